// The CUDA half of osprey-bench-codec: every case timed with CUDA events on one stream, after
// warm-up, the residual reset (untimed) before each run; torch.topk timed by torch_topk.py in the
// same run, before this process allocates device memory.
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <functional>
#include <map>
#include <sstream>

#include "bench/codec/bench_report.h"
#include "worker/cuda/codec_kernels.h"

namespace osprey::bench {
namespace {

using cuda::DeviceBuffer;

#define BENCH_CUDA(expr)                                                                     \
  do {                                                                                       \
    const cudaError_t _err = (expr);                                                         \
    if (_err != cudaSuccess) return Internal(std::string(#expr) + ": " + cudaGetErrorString(_err)); \
  } while (0)

using Baselines = std::map<std::pair<size_t, double>, double>;

// Runs the torch script; lines "RESULT <n> <density> <median_ms>" are baselines, the rest is echoed.
Baselines TorchBaselines(const BenchOptions& o) {
  Baselines out;
  if (o.torch_script.empty()) return out;
  std::ostringstream cmd;
  cmd << "python3 '" << o.torch_script << "' --runs " << o.runs << " --warmup " << o.warmup << " --sizes ";
  for (size_t i = 0; i < o.sizes.size(); ++i) cmd << (i ? "," : "") << static_cast<size_t>(o.sizes[i]);
  cmd << " --densities ";
  for (size_t i = 0; i < o.densities.size(); ++i) cmd << (i ? "," : "") << o.densities[i];
  cmd << " 2>&1";
  FILE* pipe = popen(cmd.str().c_str(), "r");
  if (!pipe) return out;
  char line[512];
  while (std::fgets(line, sizeof(line), pipe)) {
    size_t n = 0;
    double density = 0, ms = 0;
    if (std::sscanf(line, "RESULT %zu %lf %lf", &n, &density, &ms) == 3) {
      out[{n, density}] = ms;
    } else {
      std::printf("torch_topk.py: %s", line);
    }
  }
  pclose(pipe);
  return out;
}

std::optional<double> Lookup(const Baselines& b, size_t n, double density) {
  for (const auto& [key, ms] : b) {
    if (key.first == n && std::abs(key.second - density) < 1e-12) return ms;
  }
  return std::nullopt;
}

StatusOr<double> TimeGpu(const BenchOptions& o, cudaStream_t s, const std::function<Status()>& setup,
                         const std::function<Status()>& fn) {
  cudaEvent_t start, stop;
  BENCH_CUDA(cudaEventCreate(&start));
  BENCH_CUDA(cudaEventCreate(&stop));
  std::vector<double> ms;
  Status status;
  for (int i = 0; i < o.warmup + o.runs && status.ok(); ++i) {
    status = setup();
    if (!status.ok()) break;
    BENCH_CUDA(cudaEventRecord(start, s));
    status = fn();
    BENCH_CUDA(cudaEventRecord(stop, s));
    BENCH_CUDA(cudaEventSynchronize(stop));
    float elapsed = 0;
    BENCH_CUDA(cudaEventElapsedTime(&elapsed, start, stop));
    if (i >= o.warmup) ms.push_back(elapsed);
  }
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  OSPREY_RETURN_IF_ERROR(status);
  return Median(ms);
}

// Device buffers of one size; payload holds the largest frame (fp16 cast: 2n bytes, sparse: 8 * k_hi).
struct Tensors {
  DeviceBuffer g, r, dst, payload, sparse, threshold, bad;
  std::unique_ptr<cuda::SelectWorkspace> ws;
};

uint32_t ReadCount(const cuda::SelectWorkspace& ws) {
  uint32_t count = 0;
  cudaMemcpy(&count, ws.device_count(), sizeof(count), cudaMemcpyDeviceToHost);
  return count;
}

// A magnitude near the density quantile, from a strided host sample, for the threshold-only case.
float QuantileThreshold(const std::vector<float>& g, double density) {
  std::vector<float> sample;
  const size_t stride = std::max<size_t>(1, g.size() / 1000000);
  for (size_t i = 0; i < g.size(); i += stride) sample.push_back(std::fabs(g[i]));
  const size_t k = std::max<size_t>(1, static_cast<size_t>(density * sample.size()));
  std::nth_element(sample.begin(), sample.begin() + (k - 1), sample.end(), std::greater<float>());
  return sample[k - 1];
}

Status RunSparseCases(size_t n, double density, const std::vector<float>& host_g, const Baselines& base, Tensors& t,
                      const BenchOptions& o, cudaStream_t s, std::vector<BenchRow>* rows) {
  const std::optional<double> torch = Lookup(base, n, density);
  auto reset = [&] { return cudaMemsetAsync(t.r.data(), 0, 4 * n, s) == cudaSuccess ? Status::OK() : Internal("memset"); };
  const cuda::SparseOutput out{t.sparse.data(), t.sparse.size() / 8, codec::ValueType::kFp32};
  const cuda::EfTensor ef{t.g.as<float>(), t.r.as<float>(), nullptr, 0.0f, n};
  const cuda::EfTensor plain{t.g.as<float>(), nullptr, nullptr, 0.0f, n};
  struct Case {
    const char* name;
    codec::TopKMethod method;
    const cuda::EfTensor* tensor;
  };
  const uint64_t k = codec::MakeTargets(n, density, 0).k;
  for (const Case& c : {Case{"ef_topk_sample", codec::TopKMethod::kSample, &ef},
                        Case{"ef_topk_histogram", codec::TopKMethod::kHistogram, &ef},
                        Case{"topk_exact", codec::TopKMethod::kExact, &plain},
                        Case{"ef_topk_exact", codec::TopKMethod::kExact, &ef}}) {
    const cuda::TopKParams p = cuda::MakeTopKParams(c.method, n, density, 0.05, 0.005, 42);
    OSPREY_ASSIGN_OR_RETURN(double ms, TimeGpu(o, s, reset, [&] { return cuda::TopK(*c.tensor, p, out, t.ws.get(), s); }));
    const uint32_t count = ReadCount(*t.ws);
    const double reads = c.tensor->residual ? 12.0 : 4.0;  // EF reads g, r and writes r
    rows->push_back(BenchRow{c.name, "cuda", n, density, ms, reads * n + 8.0 * count, count / double(k), torch});
  }
  // The exact frame just written is what the decode-add case scatters (k pairs into n).
  const uint32_t count = ReadCount(*t.ws);
  const codec::EncodedMeta meta{codec::CodecId::kTopK, codec::ValueType::kFp32, n, count, 0};
  OSPREY_ASSIGN_OR_RETURN(double decode_ms, TimeGpu(o, s, [] { return Status::OK(); }, [&] {
    return cuda::DecodeAdd(meta, t.sparse.data(), 8ull * count, t.dst.as<float>(), n, 1.0f, t.bad.as<uint32_t>(), s);
  }));
  rows->push_back(BenchRow{"decode_topk", "cuda", n, density, decode_ms, 16.0 * count});
  const float threshold = QuantileThreshold(host_g, density);
  BENCH_CUDA(cudaMemcpy(t.threshold.data(), &threshold, sizeof(threshold), cudaMemcpyHostToDevice));
  OSPREY_ASSIGN_OR_RETURN(double thr_ms, TimeGpu(o, s, reset, [&] {
    return cuda::SelectByThreshold(ef, t.threshold.as<float>(), out, t.ws.get(), s);
  }));
  const uint32_t thr_count = ReadCount(*t.ws);
  rows->push_back(BenchRow{"ef_threshold_given", "cuda", n, density, thr_ms, 12.0 * n + 8.0 * thr_count,
                           thr_count / double(k)});
  return Status::OK();
}

Status RunDenseCases(size_t n, Tensors& t, const BenchOptions& o, cudaStream_t s, std::vector<BenchRow>* rows) {
  auto reset = [&] { return cudaMemsetAsync(t.r.data(), 0, 4 * n, s) == cudaSuccess ? Status::OK() : Internal("memset"); };
  auto none = [] { return Status::OK(); };
  const cuda::EfTensor ef{t.g.as<float>(), t.r.as<float>(), nullptr, 0.0f, n};
  OSPREY_ASSIGN_OR_RETURN(double copy_ms, TimeGpu(o, s, none, [&] {
    return cudaMemcpyAsync(t.dst.data(), t.g.data(), 4 * n, cudaMemcpyDeviceToDevice, s) == cudaSuccess
               ? Status::OK() : Internal("copy");
  }));
  rows->push_back(BenchRow{"copy (1 read+1 write)", "cuda", n, {}, copy_ms, 8.0 * n});
  for (const codec::ValueType type : {codec::ValueType::kFp16, codec::ValueType::kBf16}) {
    OSPREY_ASSIGN_OR_RETURN(double ms, TimeGpu(o, s, reset, [&] { return cuda::CastEncode(ef, type, t.payload.data(), s); }));
    rows->push_back(BenchRow{"ef_" + codec::ValueTypeName(type), "cuda", n, {}, ms, 14.0 * n});
  }
  const codec::EncodedMeta meta{codec::CodecId::kOneBit, codec::ValueType::kFp32, n, n, 1024};
  const size_t onebit_bytes = codec::PayloadBytes(meta);
  OSPREY_ASSIGN_OR_RETURN(double onebit_ms, TimeGpu(o, s, reset, [&] { return cuda::OneBitEncode(ef, 1024, t.payload.data(), s); }));
  rows->push_back(BenchRow{"ef_onebit", "cuda", n, {}, onebit_ms, 12.0 * n + onebit_bytes});
  OSPREY_ASSIGN_OR_RETURN(double decode_ms, TimeGpu(o, s, none, [&] {
    return cuda::DecodeAdd(meta, t.payload.data(), onebit_bytes, t.dst.as<float>(), n, 1.0f, t.bad.as<uint32_t>(), s);
  }));
  rows->push_back(BenchRow{"decode_onebit", "cuda", n, {}, decode_ms, onebit_bytes + 8.0 * n});
  return Status::OK();
}

Status RunCudaSize(size_t n, const BenchOptions& o, const Baselines& base, cudaStream_t s, std::vector<BenchRow>* rows) {
  uint64_t k_hi = 1, samples = 1;
  for (double d : o.densities) {
    const auto p = cuda::MakeTopKParams(codec::TopKMethod::kSample, n, d, 0.05, 0.005, 0);
    k_hi = std::max(k_hi, p.targets.k_hi);
    samples = std::max(samples, p.plan.samples);
  }
  const size_t cand = cuda::RecommendedCandidateCapacity(n, k_hi);
  const size_t need = 16 * n + 8 * k_hi + 8 * cand + 8 * samples + (64u << 20);
  size_t free_bytes = 0, total = 0;
  BENCH_CUDA(cudaMemGetInfo(&free_bytes, &total));
  if (need > free_bytes) {
    char note[128];
    std::snprintf(note, sizeof(note), "skipped: needs %.1f GiB, %.1f GiB free", need / 1073741824.0, free_bytes / 1073741824.0);
    rows->push_back(BenchRow{"all", "cuda", n, {}, 0, 0, {}, {}, note});
    return Status::OK();
  }
  Tensors t;
  const std::vector<float> host_g = MakeGradient(n, n);
  OSPREY_ASSIGN_OR_RETURN(t.g, DeviceBuffer::Allocate(4 * n));
  OSPREY_ASSIGN_OR_RETURN(t.r, DeviceBuffer::Allocate(4 * n));
  OSPREY_ASSIGN_OR_RETURN(t.dst, DeviceBuffer::Allocate(4 * n));
  OSPREY_ASSIGN_OR_RETURN(t.payload, DeviceBuffer::Allocate(2 * n + 64));
  OSPREY_ASSIGN_OR_RETURN(t.sparse, DeviceBuffer::Allocate(8 * k_hi));
  OSPREY_ASSIGN_OR_RETURN(t.threshold, DeviceBuffer::Allocate(sizeof(float)));
  OSPREY_ASSIGN_OR_RETURN(t.bad, DeviceBuffer::Allocate(sizeof(uint32_t)));
  OSPREY_ASSIGN_OR_RETURN(t.ws, cuda::SelectWorkspace::Create(n, cand, samples));
  BENCH_CUDA(cudaMemcpy(t.g.data(), host_g.data(), 4 * n, cudaMemcpyHostToDevice));
  BENCH_CUDA(cudaMemset(t.dst.data(), 0, 4 * n));
  BENCH_CUDA(cudaDeviceSynchronize());  // legacy-stream copies vs. the non-blocking bench stream
  OSPREY_RETURN_IF_ERROR(RunDenseCases(n, t, o, s, rows));
  for (double d : o.densities) OSPREY_RETURN_IF_ERROR(RunSparseCases(n, d, host_g, base, t, o, s, rows));
  BENCH_CUDA(cudaStreamSynchronize(s));
  return Status::OK();
}

}  // namespace

Status RunCudaBench(const BenchOptions& o, std::vector<BenchRow>* rows) {
  if (cuda::DeviceCount() == 0) return Unavailable("no CUDA device visible");
  const Baselines base = TorchBaselines(o);  // first: torch frees its memory before we allocate
  cudaDeviceProp prop;
  BENCH_CUDA(cudaGetDeviceProperties(&prop, 0));
  std::printf("device: %s, %d SMs, %.0f GiB\n", prop.name, prop.multiProcessorCount, prop.totalGlobalMem / 1073741824.0);
  cudaStream_t s;
  BENCH_CUDA(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  Status status;
  for (double size : o.sizes) {
    status = RunCudaSize(static_cast<size_t>(size), o, base, s, rows);
    if (!status.ok()) break;
  }
  if (status.ok()) status = RunCudaLayerBench(o, rows);  // codec_bench_layers_cuda.cc
  cudaStreamDestroy(s);
  return status;
}

}  // namespace osprey::bench
