// osprey-bench-gpu-dlrm: GpuDlrm::ForwardBackward on the Criteo Kaggle DLRM shape (13 dense,
// 26 sparse, d 16, bottom 13-512-256-64-16, top 367-512-256-1), inputs already on the device,
// timed with CUDA events (median of --reps after --warmup), for each MLP precision (tf32, bf16,
// fp32). Per case it also prints the host path (ForwardBackwardHost: copies in, compute, copies
// out) and, as the baseline, the CPU model on one thread on the same batch.
#include <cuda_runtime.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

#include "tests/gpu_dlrm/dlrm_problem.h"
#include "worker/cuda/codec_kernels.h"
#include "worker/cuda/dlrm/gpu_dlrm.h"
#include "common/stats.h"

namespace osprey::cuda {
namespace {

#define BENCH_CHECK(expr)                                                                   \
  do {                                                                                      \
    const cudaError_t _e = (expr);                                                          \
    if (_e != cudaSuccess) {                                                                \
      std::fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #expr, cudaGetErrorString(_e)); \
      return false;                                                                         \
    }                                                                                       \
  } while (0)

// Counted multiply-adds x 2 of one forward + backward per sample: each layer's product forward,
// its weight gradient, and its input gradient (not for the first bottom layer); the interaction's
// dots forward and its backward (every vector against every other).
double FlopsPerSample(const models::DlrmConfig& config) {
  double flops = 0;
  bool first = true;
  for (const testing::LayerSpec& layer : testing::DlrmLayers(config)) {
    const double mac = static_cast<double>(layer.in) * layer.out;
    flops += 2 * mac * (first ? 2 : 3);
    first = false;
  }
  const double vectors = config.num_sparse + 1;
  flops += 2 * (vectors * (vectors - 1) / 2) * config.embedding_dim + 2 * vectors * vectors * config.embedding_dim;
  return flops;
}

template <typename T>
bool Upload(const std::vector<T>& v, DeviceBuffer* out) {
  auto buf = DeviceBuffer::Allocate(sizeof(T) * v.size() + 16);
  if (!buf.ok()) {
    std::fprintf(stderr, "%s\n", buf.status().ToString().c_str());
    return false;
  }
  *out = std::move(buf).value();
  BENCH_CHECK(cudaMemcpy(out->data(), v.data(), sizeof(T) * v.size(), cudaMemcpyHostToDevice));
  return true;
}

struct Options {
  std::vector<int> batches = {2048, 16384};
  int reps = 20;
  int warmup = 3;
  int host_reps = 5;
  int cpu_reps = 3;
  int device = 0;
};

// Times one (batch, precision) case and prints its row. Returns false on any error.
bool RunCase(const testing::Problem& p, MlpPrecision precision, const Options& opt, double cpu_ms) {
  GpuDlrmOptions options;
  options.precision = precision;
  auto made = GpuDlrm::Make(p.config, opt.device, p.batch.size, options);
  if (!made.ok()) {
    std::fprintf(stderr, "%s\n", made.status().ToString().c_str());
    return false;
  }
  GpuDlrm& gpu = **made;
  DeviceBuffer params, rows, index, dense, labels, dense_grad, row_grad, probs, loss;
  if (!Upload(p.params, &params) || !Upload(p.rows, &rows) || !Upload(p.row_index, &index) ||
      !Upload(p.batch.dense, &dense) || !Upload(p.batch.labels, &labels) || !Upload(p.params, &dense_grad) ||
      !Upload(p.rows, &row_grad) || !Upload(p.batch.labels, &probs) || !Upload(std::vector<float>(1), &loss)) {
    return false;
  }
  cudaStream_t stream = nullptr;
  cudaEvent_t start = nullptr, stop = nullptr;
  BENCH_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  BENCH_CHECK(cudaEventCreate(&start));
  BENCH_CHECK(cudaEventCreate(&stop));
  std::vector<double> ms;
  for (int r = 0; r < opt.warmup + opt.reps; ++r) {
    BENCH_CHECK(cudaEventRecord(start, stream));
    const Status st = gpu.ForwardBackward(params.as<float>(), rows.as<float>(), p.num_rows(), index.as<int32_t>(),
                                          dense.as<float>(), labels.as<float>(), p.batch.size, dense_grad.as<float>(),
                                          row_grad.as<float>(), probs.as<float>(), loss.as<float>(), stream);
    if (!st.ok()) {
      std::fprintf(stderr, "%s\n", st.ToString().c_str());
      return false;
    }
    BENCH_CHECK(cudaEventRecord(stop, stream));
    BENCH_CHECK(cudaEventSynchronize(stop));
    float elapsed = 0;
    BENCH_CHECK(cudaEventElapsedTime(&elapsed, start, stop));
    if (r >= opt.warmup) ms.push_back(elapsed);
  }
  float d_loss = 0;
  BENCH_CHECK(cudaMemcpy(&d_loss, loss.data(), sizeof(float), cudaMemcpyDeviceToHost));
  BENCH_CHECK(cudaEventDestroy(start));
  BENCH_CHECK(cudaEventDestroy(stop));
  BENCH_CHECK(cudaStreamDestroy(stream));

  std::vector<float> h_dense_grad(p.params.size()), h_row_grad(p.rows.size()), h_probs(p.batch.size);
  float h_loss = 0;
  std::vector<double> host_ms;
  for (int r = 0; r < opt.host_reps + 1; ++r) {  // the first call grows the staging buffers
    const auto t0 = std::chrono::steady_clock::now();
    const Status st = gpu.ForwardBackwardHost(p.params.data(), p.rows.data(), p.num_rows(), p.row_index.data(), p.batch,
                                              h_dense_grad.data(), h_row_grad.data(), h_probs.data(), &h_loss);
    const auto t1 = std::chrono::steady_clock::now();
    if (!st.ok()) {
      std::fprintf(stderr, "%s\n", st.ToString().c_str());
      return false;
    }
    if (r > 0) host_ms.push_back(std::chrono::duration<double, std::milli>(t1 - t0).count());
  }
  const double med = Median(ms), best = *std::min_element(ms.begin(), ms.end());
  const double samples = p.batch.size;
  std::printf("%7d  %-4s  %9.3f  %8.3f  %12.0f  %8.1f  %12.3f  %10.1f  %12.0f  %8.1fx\n", p.batch.size,
              MlpPrecisionName(precision), med, best, samples / (med * 1e-3),
              FlopsPerSample(p.config) * samples / (med * 1e-3) * 1e-12, Median(host_ms), cpu_ms,
              cpu_ms > 0 ? samples / (cpu_ms * 1e-3) : 0.0, cpu_ms > 0 ? cpu_ms / med : 0.0);
  std::printf("         loss %.6f, host path %.6f\n", static_cast<double>(d_loss), static_cast<double>(h_loss));
  return true;
}

// Median wall time of the CPU model on one thread, 0 when cpu_reps is 0.
double CpuMs(const testing::Problem& p, int reps) {
  auto model = models::Dlrm::Make(p.config);
  if (!model.ok() || reps <= 0) return 0.0;
  std::vector<float> dense_grad(p.params.size()), row_grad(p.rows.size()), probs(p.batch.size);
  std::vector<double> ms;
  for (int r = 0; r < reps; ++r) {
    const auto t0 = std::chrono::steady_clock::now();
    (*model)->ForwardBackward(p.params.data(), p.rows.data(), p.num_rows(), p.row_index.data(), p.batch,
                              dense_grad.data(), row_grad.data(), probs.data());
    ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
  }
  return Median(ms);
}

int Run(const Options& opt) {
  if (DeviceCount() == 0) {
    std::fprintf(stderr, "osprey-bench-gpu-dlrm: no CUDA device\n");
    return 2;
  }
  models::DlrmConfig config;
  config.bottom_mlp = {512, 256, 64, 16};
  config.top_mlp = {512, 256, 1};
  std::printf("# GpuDlrm ForwardBackward, Criteo Kaggle shape: 13 dense, 26 sparse, d 16, bottom 13-512-256-64-16,"
              " top 367-512-256-1\n");
  std::printf("# median of %d after %d warm-up (CUDA events, device inputs); host path: ForwardBackwardHost, median"
              " of %d; cpu: models::Dlrm on 1 thread, median of %d; TFLOP/s from %.2f MFLOP/sample\n",
              opt.reps, opt.warmup, opt.host_reps, opt.cpu_reps, FlopsPerSample(config) * 1e-6);
  std::printf("%7s  %-4s  %9s  %8s  %12s  %8s  %12s  %10s  %12s  %9s\n", "batch", "mode", "median_ms", "min_ms",
              "samples/s", "TFLOP/s", "host_path_ms", "cpu_ms", "cpu_samp/s", "speedup");
  for (int batch : opt.batches) {
    testing::ProblemOptions po;
    po.seed = static_cast<uint64_t>(batch);
    po.id_range = 100000;  // mostly distinct rows, as in Criteo's long tail
    po.kink_margin = 0;
    testing::Problem p;
    std::string error;
    if (!testing::MakeProblem(config, batch, po, &p, &error)) {
      std::fprintf(stderr, "%s\n", error.c_str());
      return 1;
    }
    const double cpu_ms = CpuMs(p, opt.cpu_reps);
    for (MlpPrecision precision : {MlpPrecision::kTf32, MlpPrecision::kBf16, MlpPrecision::kFp32}) {
      if (!RunCase(p, precision, opt, cpu_ms)) return 1;
    }
  }
  return 0;
}

}  // namespace
}  // namespace osprey::cuda

int main(int argc, char** argv) {
  osprey::cuda::Options opt;
  CLI::App app("GpuDlrm forward+backward micro benchmark");
  app.add_option("--batches", opt.batches, "batch sizes")->delimiter(',');
  app.add_option("--reps", opt.reps, "timed runs per case")->check(CLI::PositiveNumber);
  app.add_option("--warmup", opt.warmup, "untimed runs first");
  app.add_option("--host-reps", opt.host_reps, "timed ForwardBackwardHost runs")->check(CLI::PositiveNumber);
  app.add_option("--cpu-reps", opt.cpu_reps, "CPU baseline runs (0: skip)");
  app.add_option("--device", opt.device, "CUDA device index");
  CLI11_PARSE(app, argc, argv);
  return osprey::cuda::Run(opt);
}
