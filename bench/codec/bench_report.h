// Rows of the codec benchmark, their table and their JSON file.
// Thread-safety: plain values and free functions; not for concurrent use on one vector.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "common/stats.h"
#include "common/status.h"

namespace osprey::bench {

struct BenchOptions {
  std::string device = "cpu";  // cpu | cuda
  std::string json_path;       // empty: no file
  std::vector<double> sizes;
  std::vector<double> densities;
  int runs = 0;    // 0: 5 on cpu, 50 on cuda
  int warmup = 0;  // 0: 1 on cpu, 5 on cuda
  size_t cpu_max_n = 100000000;
  std::string torch_script;  // cuda baseline; empty disables it
};

struct BenchRow {
  BenchRow(std::string codec_name, std::string device_name, size_t size, std::optional<double> density_or_none,
           double ms = 0, double traffic = 0, std::optional<double> over_k = {}, std::optional<double> baseline = {},
           std::string why = {})
      : codec(std::move(codec_name)), device(std::move(device_name)), n(size), density(density_or_none),
        median_ms(ms), bytes(traffic), selected_over_k(over_k), baseline_ms(baseline), note(std::move(why)) {}

  std::string codec;
  std::string device;
  size_t n = 0;
  std::optional<double> density;
  double median_ms = 0;
  double bytes = 0;  // minimum memory traffic of the operation, for GB/s
  std::optional<double> selected_over_k;
  std::optional<double> baseline_ms;
  std::string note;  // "skipped: ..." rows carry no timing

  double gbps() const { return median_ms > 0 ? bytes / (median_ms * 1e6) : 0; }
};

// Prints an aligned table (one line per row) to stdout.
void PrintTable(const std::vector<BenchRow>& rows);

// Writes a JSON array of objects with keys codec, device, n, density, median_ms, gbps,
// selected_over_k, baseline_ms (null when absent), note.
Status WriteJson(const std::string& path, const std::vector<BenchRow>& rows);

// Gradient-like values, reproducible from `seed`: Gaussian with sigma 1e-3, 1% of them 30x
// larger (heavy tail). Defined in codec_bench.cc.
std::vector<float> MakeGradient(size_t n, uint64_t seed);

// The CPU cases; defined in codec_bench.cc.
void RunCpuBench(const BenchOptions& options, std::vector<BenchRow>* rows);

// The CUDA cases; defined in codec_bench_cuda.cc (only built with CUDA).
Status RunCudaBench(const BenchOptions& options, std::vector<BenchRow>* rows);
// Layer-wise EF + top-1% next to whole-vector and bucket-wise over the same floats (Kaggle DLRM
// MLP list, 200 x 5e5 floats); codec_bench_layers_cuda.cc.
Status RunCudaLayerBench(const BenchOptions& options, std::vector<BenchRow>* rows);

}  // namespace osprey::bench
