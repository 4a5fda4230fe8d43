// Layer-wise EF + top-k on the GPU (worker/cuda/layer_kernels.h: segmented, every layer in one
// fixed sequence of launches) next to the whole-vector and bucket-wise (4 MiB buckets, one TopK
// launch chain each) EF + exact top-k of the same floats, in the same run: over the Kaggle DLRM's
// MLP parameter list (configs/bench-dlrm-kaggle.yaml) and over a 1e8-float list of 200 equal
// tensors. The layer row's baseline is the bucket row of the same list.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <functional>
#include <string>

#include "bench/codec/bench_report.h"
#include "worker/cuda/codec_kernels.h"
#include "worker/cuda/layer_kernels.h"

namespace osprey::bench {
namespace {

using cuda::DeviceBuffer;

#define LAYER_CUDA(expr)                                                                             \
  do {                                                                                               \
    const cudaError_t _err = (expr);                                                                 \
    if (_err != cudaSuccess) return Internal(std::string(#expr) + ": " + cudaGetErrorString(_err)); \
  } while (0)

// Sizes of the DLRM MLP tensors: per layer W [in x out] then b [out], bottom then top.
std::vector<uint32_t> DlrmSizes(int num_dense, int num_sparse, int dim, const std::vector<int>& bottom,
                                const std::vector<int>& top) {
  std::vector<uint32_t> out;
  auto add = [&out](int in, const std::vector<int>& widths) {
    for (int w : widths) {
      if (in > 0) out.push_back(static_cast<uint32_t>(in) * w);
      out.push_back(static_cast<uint32_t>(w));
      in = w;
    }
  };
  add(num_dense, bottom);
  add(dim + (num_sparse + 1) * num_sparse / 2, top);
  return out;
}

StatusOr<double> TimeIt(const BenchOptions& o, cudaStream_t s, const std::function<Status()>& setup,
                        const std::function<Status()>& fn) {
  cudaEvent_t start, stop;
  LAYER_CUDA(cudaEventCreate(&start));
  LAYER_CUDA(cudaEventCreate(&stop));
  std::vector<double> ms;
  Status status;
  for (int i = 0; i < o.warmup + o.runs && status.ok(); ++i) {
    status = setup();
    if (!status.ok()) break;
    LAYER_CUDA(cudaEventRecord(start, s));
    status = fn();
    LAYER_CUDA(cudaEventRecord(stop, s));
    LAYER_CUDA(cudaEventSynchronize(stop));
    float elapsed = 0;
    LAYER_CUDA(cudaEventElapsedTime(&elapsed, start, stop));
    if (i >= o.warmup) ms.push_back(elapsed);
  }
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  OSPREY_RETURN_IF_ERROR(status);
  return Median(ms);
}

Status RunLayerList(const std::string& name, const std::vector<uint32_t>& sizes, double density, const BenchOptions& o,
                    cudaStream_t s, std::vector<BenchRow>* rows) {
  std::vector<uint32_t> begin = {0};
  for (uint32_t x : sizes) begin.push_back(begin.back() + x);
  const size_t n = begin.back();
  const std::vector<uint32_t> ks = cuda::LayerKs(sizes, density, 1);
  std::vector<uint32_t> outs = {0};
  for (uint32_t k : ks) outs.push_back(outs.back() + k);
  const uint64_t total = outs.back();
  const size_t bucket = size_t{1} << 20;  // 4 MiB of floats
  const size_t buckets = (n + bucket - 1) / bucket;
  const uint64_t k_whole = codec::MakeTargets(n, density, 0).k;
  const uint64_t cap = std::max<uint64_t>({total, k_whole, buckets * (codec::MakeTargets(bucket, density, 0).k + 1)});

  const std::vector<float> host_g = MakeGradient(n, n + 1);
  OSPREY_ASSIGN_OR_RETURN(DeviceBuffer g, DeviceBuffer::Allocate(4 * n));
  OSPREY_ASSIGN_OR_RETURN(DeviceBuffer r, DeviceBuffer::Allocate(4 * n));
  OSPREY_ASSIGN_OR_RETURN(DeviceBuffer payload, DeviceBuffer::Allocate(8 * cap + 64));
  OSPREY_ASSIGN_OR_RETURN(DeviceBuffer d_begin, DeviceBuffer::Allocate(4 * begin.size()));
  OSPREY_ASSIGN_OR_RETURN(DeviceBuffer d_k, DeviceBuffer::Allocate(4 * ks.size()));
  OSPREY_ASSIGN_OR_RETURN(DeviceBuffer d_out, DeviceBuffer::Allocate(4 * outs.size()));
  LAYER_CUDA(cudaMemcpy(g.data(), host_g.data(), 4 * n, cudaMemcpyHostToDevice));
  LAYER_CUDA(cudaMemcpy(d_begin.data(), begin.data(), 4 * begin.size(), cudaMemcpyHostToDevice));
  LAYER_CUDA(cudaMemcpy(d_k.data(), ks.data(), 4 * ks.size(), cudaMemcpyHostToDevice));
  LAYER_CUDA(cudaMemcpy(d_out.data(), outs.data(), 4 * outs.size(), cudaMemcpyHostToDevice));
  LAYER_CUDA(cudaDeviceSynchronize());
  auto reset = [&] { return cudaMemsetAsync(r.data(), 0, 4 * n, s) == cudaSuccess ? Status::OK() : Internal("memset"); };
  const cuda::EfTensor ef{g.as<float>(), r.as<float>(), nullptr, 0.0f, n};
  const std::string label = name + " (" + std::to_string(sizes.size()) + " tensors)";

  OSPREY_ASSIGN_OR_RETURN(auto ws, cuda::SelectWorkspace::Create(
                                       n, cuda::RecommendedCandidateCapacity(n, k_whole),
                                       cuda::MakeTopKParams(codec::TopKMethod::kExact, n, density, 0, 0.005, 0).plan.samples));
  const cuda::TopKParams whole = cuda::MakeTopKParams(codec::TopKMethod::kExact, n, density, 0, 0.005, 42);
  OSPREY_ASSIGN_OR_RETURN(double whole_ms, TimeIt(o, s, reset, [&] {
    return cuda::TopK(ef, whole, cuda::SparseOutput{payload.data(), cap, codec::ValueType::kFp32}, ws.get(), s);
  }));
  rows->push_back(BenchRow{"tensor_ef_topk_exact " + label, "cuda", n, density, whole_ms, 12.0 * n + 8.0 * k_whole, 1.0});

  OSPREY_ASSIGN_OR_RETURN(double bucket_ms, TimeIt(o, s, reset, [&]() -> Status {
    uint64_t at = 0;
    for (size_t b = 0; b < buckets; ++b) {
      const size_t off = b * bucket, len = std::min(bucket, n - off);
      const cuda::EfTensor part{g.as<float>() + off, r.as<float>() + off, nullptr, 0.0f, len};
      const cuda::TopKParams p = cuda::MakeTopKParams(codec::TopKMethod::kExact, len, density, 0, 0.005, 42 + b);
      uint8_t* base = payload.as<uint8_t>() + 8 * at;
      OSPREY_RETURN_IF_ERROR(cuda::TopK(part, p, cuda::SparseOutput{base, p.targets.k_hi, codec::ValueType::kFp32}, ws.get(), s));
      at += p.targets.k_hi;
    }
    return Status::OK();
  }));
  rows->push_back(BenchRow{"bucket4MiB_ef_topk_exact " + label, "cuda", n, density, bucket_ms, 12.0 * n + 8.0 * k_whole, 1.0});
  // Last, with the bucket-wise time as its baseline: speedup = bucket / layer (the target
  // is layer-wise within 10% of bucket-wise, i.e. speedup >= 0.91).
  const cuda::LayerTopKArgs layers{d_begin.as<uint32_t>(), d_k.as<uint32_t>(), d_out.as<uint32_t>(),
                                   static_cast<uint32_t>(sizes.size()), total};
  OSPREY_ASSIGN_OR_RETURN(auto layer_ws, cuda::LayerTopKWorkspace::Create(begin));
  OSPREY_ASSIGN_OR_RETURN(double layer_ms, TimeIt(o, s, reset, [&] {
    return cuda::LayerTopK(ef, layers, cuda::SparseOutput{payload.data(), cap, codec::ValueType::kFp32}, layer_ws.get(),
                           s);
  }));
  rows->push_back(BenchRow{"layer_ef_topk_exact " + label, "cuda", n, density, layer_ms, 12.0 * n + 8.0 * total, 1.0,
                           bucket_ms,
                           "baseline bucket4MiB; " + std::to_string(layer_ws->num_blocks()) + " blocks of " +
                               std::to_string(layer_ws->chunk()) + " floats"});
  LAYER_CUDA(cudaStreamSynchronize(s));
  return Status::OK();
}

}  // namespace

Status RunCudaLayerBench(const BenchOptions& o, std::vector<BenchRow>* rows) {
  cudaStream_t s;
  LAYER_CUDA(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  Status st = RunLayerList("dlrm_kaggle_mlp", DlrmSizes(13, 26, 16, {512, 256, 64, 16}, {512, 256, 1}), 0.01, o, s, rows);
  if (st.ok()) st = RunLayerList("200x500k", std::vector<uint32_t>(200, 500000), 0.01, o, s, rows);
  cudaStreamDestroy(s);
  return st;
}

}  // namespace osprey::bench
