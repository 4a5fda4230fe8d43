// osprey-bench-gpu-sparse: DedupeFeatureKeys on Criteo-shaped batches (26 features, Zipf ids),
// inputs already on the device, timed with CUDA events (median of --reps after --warmup), called
// directly and replayed from a CUDA graph, with data::DedupeKeys on one CPU thread as the baseline;
// then GatherRows / ScatterRows of --rows rows
// from a --table-rows table, vectorized and (pointers shifted off 16 bytes) scalar, against a
// plain device-to-device cudaMemcpyAsync of the same row bytes.
#include <cuda_runtime.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <functional>
#include <string>
#include <vector>

#include "worker/cuda/codec_kernels.h"
#include "worker/cuda/sparse/sparse_kernels.h"
#include "worker/data/batch.h"
#include "worker/data/random.h"
#include "worker/data/zipf.h"
#include "common/stats.h"

namespace osprey::cuda {
namespace {

#define BENCH_CHECK(expr)                                                                         \
  do {                                                                                            \
    const cudaError_t _e = (expr);                                                                \
    if (_e != cudaSuccess) {                                                                      \
      std::fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #expr, cudaGetErrorString(_e)); \
      return false;                                                                               \
    }                                                                                             \
  } while (0)

struct Options {
  std::vector<int> batches = {2048, 16384};
  int num_sparse = 26;
  uint64_t cardinality = 1000000;  // ids per feature
  double zipf_alpha = 1.05;
  int rows = 200000;
  int table_rows = 1000000;
  int dim = 16;
  int reps = 20;
  int warmup = 3;
  int cpu_reps = 5;
};

struct Timing {
  double median_ms = 0, min_ms = 0;
  double enqueue_ms = 0;  // host time of the call itself (median): launch overhead, CUB queries
};

// Times `enqueue` (which enqueues work on stream and reports failure by returning false).
bool TimeOnStream(const Options& opt, cudaStream_t stream, const std::function<bool()>& enqueue, Timing* t) {
  cudaEvent_t start = nullptr, stop = nullptr;
  BENCH_CHECK(cudaEventCreate(&start));
  BENCH_CHECK(cudaEventCreate(&stop));
  std::vector<double> ms, host_ms;
  for (int r = 0; r < opt.warmup + opt.reps; ++r) {
    BENCH_CHECK(cudaEventRecord(start, stream));
    const auto t0 = std::chrono::steady_clock::now();
    if (!enqueue()) return false;
    const auto t1 = std::chrono::steady_clock::now();
    BENCH_CHECK(cudaEventRecord(stop, stream));
    BENCH_CHECK(cudaEventSynchronize(stop));
    float elapsed = 0;
    BENCH_CHECK(cudaEventElapsedTime(&elapsed, start, stop));
    if (r >= opt.warmup) {
      ms.push_back(elapsed);
      host_ms.push_back(std::chrono::duration<double, std::milli>(t1 - t0).count());
    }
  }
  BENCH_CHECK(cudaEventDestroy(start));
  BENCH_CHECK(cudaEventDestroy(stop));
  t->median_ms = Median(ms);
  t->min_ms = *std::min_element(ms.begin(), ms.end());
  t->enqueue_ms = Median(host_ms);
  return true;
}

bool Ok(const Status& st) {
  if (!st.ok()) std::fprintf(stderr, "%s\n", st.ToString().c_str());
  return st.ok();
}

// Captures `call` (enqueueing on stream) into a CUDA graph once and times its replays.
bool TimeGraph(const Options& opt, cudaStream_t stream, const std::function<Status()>& call, Timing* t) {
  cudaGraph_t graph = nullptr;
  cudaGraphExec_t exec = nullptr;
  BENCH_CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal));
  const Status captured = call();
  const cudaError_t ended = cudaStreamEndCapture(stream, &graph);
  if (!Ok(captured)) return false;
  BENCH_CHECK(ended);
  BENCH_CHECK(cudaGraphInstantiate(&exec, graph, 0));
  const bool timed = TimeOnStream(
      opt, stream,
      [&] {
        BENCH_CHECK(cudaGraphLaunch(exec, stream));
        return true;
      },
      t);
  BENCH_CHECK(cudaGraphExecDestroy(exec));
  BENCH_CHECK(cudaGraphDestroy(graph));
  return timed;
}

template <typename T>
bool Upload(const std::vector<T>& v, DeviceBuffer* out) {
  auto buf = DeviceBuffer::Allocate(sizeof(T) * v.size() + 256);
  if (!Ok(buf.status())) return false;
  *out = std::move(buf).value();
  BENCH_CHECK(cudaMemcpy(out->data(), v.data(), sizeof(T) * v.size(), cudaMemcpyHostToDevice));
  return true;
}

data::Batch ZipfBatch(const Options& opt, int size) {
  data::Batch b;
  b.size = size;
  b.num_sparse = opt.num_sparse;
  b.labels.assign(size, 0.0f);
  b.ids.resize(static_cast<size_t>(size) * opt.num_sparse);
  data::ZipfSampler zipf(opt.cardinality, opt.zipf_alpha);
  data::Rng rng(static_cast<uint64_t>(size));
  for (uint64_t& id : b.ids) {
    uint64_t rank = 0;
    while (!zipf.TrySample(rng.NextUniform(), &rank)) {
    }
    id = data::Mix64(rank);  // hashed ids, as Criteo's, with the Zipf frequencies
  }
  return b;
}

bool BenchDedupe(const Options& opt, int size, cudaStream_t stream) {
  const data::Batch b = ZipfBatch(opt, size);
  const int n = size * opt.num_sparse;
  DeviceBuffer ids, unique, rows, count, ws;
  if (!Upload(b.ids, &ids) || !Upload(std::vector<uint64_t>(n), &unique) || !Upload(std::vector<int32_t>(n), &rows) ||
      !Upload(std::vector<int32_t>(1), &count)) {
    return false;
  }
  const size_t ws_bytes = DedupeWorkspaceBytes(n);
  auto alloc = DeviceBuffer::Allocate(ws_bytes);
  if (!Ok(alloc.status())) return false;
  ws = std::move(alloc).value();
  Timing t;
  if (!TimeOnStream(
          opt, stream,
          [&] {
            return Ok(DedupeFeatureKeys(ids.as<uint64_t>(), size, opt.num_sparse, unique.as<uint64_t>(),
                                        rows.as<int32_t>(), count.as<int32_t>(), ws.data(), ws_bytes, stream));
          },
          &t)) {
    return false;
  }
  int32_t num_unique = 0;
  BENCH_CHECK(cudaMemcpy(&num_unique, count.data(), sizeof(num_unique), cudaMemcpyDeviceToHost));

  std::vector<uint64_t> cpu_unique;
  std::vector<int32_t> cpu_rows;
  std::vector<double> cpu_ms;
  for (int r = 0; r < opt.cpu_reps; ++r) {
    const auto t0 = std::chrono::steady_clock::now();
    data::DedupeKeys(b, &cpu_unique, &cpu_rows);
    cpu_ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
  }
  const double cpu = Median(cpu_ms);
  if (opt.cpu_reps > 0 && cpu_unique.size() != static_cast<size_t>(num_unique)) {
    std::fprintf(stderr, "unique count differs: gpu %d, cpu %zu\n", num_unique, cpu_unique.size());
    return false;
  }
  auto row = [&](const char* name, const Timing& tm) {
    std::printf("%-13s %7d  %8d  %8d  %9.1f  %8.1f  %10.1f  %10.1f  %9.1f  %8.1fx  %8.2f MiB\n", name, size, n,
                num_unique, tm.median_ms * 1e3, tm.min_ms * 1e3, tm.enqueue_ms * 1e3, n / (tm.median_ms * 1e-3) * 1e-6,
                cpu * 1e3, cpu > 0 ? cpu / tm.median_ms : 0.0, ws_bytes / 1048576.0);
  };
  row("dedupe", t);

  // The same call captured once into a CUDA graph and replayed (same shape, same buffers): the
  // device time of the pipeline without the host cost of its ~14 enqueues. A failure here is
  // reported and the benchmark goes on.
  Timing g;
  if (TimeGraph(
          opt, stream,
          [&] {
            return DedupeFeatureKeys(ids.as<uint64_t>(), size, opt.num_sparse, unique.as<uint64_t>(),
                                     rows.as<int32_t>(), count.as<int32_t>(), ws.data(), ws_bytes, stream);
          },
          &g)) {
    row("dedupe graph", g);
  } else {
    std::printf("dedupe graph: capture or replay failed (see stderr)\n");
  }
  return true;
}

// One row-copy case: GB/s counts the row bytes read and written plus the slots.
bool BenchRows(const Options& opt, const char* name, cudaStream_t stream, const std::function<bool()>& enqueue,
               size_t bytes_moved, double baseline_ms) {
  Timing t;
  if (!TimeOnStream(opt, stream, enqueue, &t)) return false;
  std::printf("%-22s %7d  %4d  %9.1f  %8.1f  %10.1f  %9.1f  %10.1f  %11.1f\n", name, opt.rows, opt.dim,
              t.median_ms * 1e3, t.min_ms * 1e3, t.enqueue_ms * 1e3, bytes_moved / (t.median_ms * 1e-3) * 1e-9,
              baseline_ms * 1e3,
              baseline_ms > 0 ? 2.0 * opt.rows * opt.dim * sizeof(float) / (baseline_ms * 1e-3) * 1e-9 : 0.0);
  return true;
}

bool BenchGatherScatter(const Options& opt, cudaStream_t stream) {
  const size_t row_elems = static_cast<size_t>(opt.rows) * opt.dim;
  const size_t table_elems = static_cast<size_t>(opt.table_rows) * opt.dim;
  std::vector<int32_t> slots(opt.table_rows);
  for (int i = 0; i < opt.table_rows; ++i) slots[i] = i;
  data::Rng rng(7);
  for (int i = 0; i < opt.rows; ++i) std::swap(slots[i], slots[i + rng.NextU64() % (opt.table_rows - i)]);
  slots.resize(opt.rows);
  DeviceBuffer d_slots, table, rows;
  if (!Upload(slots, &d_slots) || !Upload(std::vector<float>(table_elems + 4, 1.0f), &table) ||
      !Upload(std::vector<float>(row_elems + 4, 2.0f), &rows)) {
    return false;
  }
  const int32_t* s = d_slots.as<int32_t>();
  const size_t row_bytes = row_elems * sizeof(float);
  Timing copy;
  if (!TimeOnStream(
          opt, stream,
          [&] {
            BENCH_CHECK(cudaMemcpyAsync(rows.data(), table.data(), row_bytes, cudaMemcpyDeviceToDevice, stream));
            return true;
          },
          &copy)) {
    return false;
  }
  const size_t moved = 2 * row_bytes + sizeof(int32_t) * opt.rows;
  float* t = table.as<float>();
  float* r = rows.as<float>();
  return BenchRows(
             opt, "gather", stream, [&] { return Ok(GatherRows(t, s, opt.rows, opt.dim, r, stream)); }, moved,
             copy.median_ms) &&
         BenchRows(
             opt, "scatter", stream, [&] { return Ok(ScatterRows(r, s, opt.rows, opt.dim, t, stream)); }, moved,
             copy.median_ms) &&
         BenchRows(
             opt, "gather (scalar, +4B)", stream,
             [&] { return Ok(GatherRows(t + 1, s, opt.rows, opt.dim, r + 1, stream)); }, moved, copy.median_ms) &&
         BenchRows(
             opt, "scatter (scalar, +4B)", stream,
             [&] { return Ok(ScatterRows(r + 1, s, opt.rows, opt.dim, t + 1, stream)); }, moved, copy.median_ms);
}

int Run(const Options& opt) {
  if (DeviceCount() == 0) {
    std::fprintf(stderr, "osprey-bench-gpu-sparse: no CUDA device\n");
    return 2;
  }
  cudaStream_t stream = nullptr;
  if (cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking) != cudaSuccess) return 1;
  std::printf(
      "# DedupeFeatureKeys: %d features, ids Zipf(alpha %.2f) over %llu per feature (hashed); median of %d"
      " after %d warm-up (CUDA events); cpu: data::DedupeKeys on 1 thread, median of %d\n",
      opt.num_sparse, opt.zipf_alpha, static_cast<unsigned long long>(opt.cardinality), opt.reps, opt.warmup,
      opt.cpu_reps);
  std::printf("%-13s %7s  %8s  %8s  %9s  %8s  %10s  %10s  %9s  %9s  %9s\n", "case", "batch", "ids", "unique",
              "median_us", "min_us", "enqueue_us", "Mids/s", "cpu_us", "speedup", "workspace");
  for (int size : opt.batches) {
    if (!BenchDedupe(opt, size, stream)) return 1;
  }
  std::printf(
      "\n# GatherRows / ScatterRows: %d distinct random slots of a %d-row table, dim %d; GB/s counts rows read"
      " + written + slots; baseline: cudaMemcpyAsync D2D of the same row bytes (GB/s read + written)\n",
      opt.rows, opt.table_rows, opt.dim);
  std::printf("%-22s %7s  %4s  %9s  %8s  %10s  %9s  %10s  %11s\n", "case", "rows", "dim", "median_us", "min_us",
              "enqueue_us", "GB/s", "memcpy_us", "memcpy_GB/s");
  if (!BenchGatherScatter(opt, stream)) return 1;
  cudaStreamDestroy(stream);
  return 0;
}

}  // namespace
}  // namespace osprey::cuda

int main(int argc, char** argv) {
  osprey::cuda::Options opt;
  CLI::App app("DedupeFeatureKeys / GatherRows / ScatterRows micro benchmark");
  app.add_option("--batches", opt.batches, "batch sizes")->delimiter(',');
  app.add_option("--num-sparse", opt.num_sparse, "sparse features per sample")->check(CLI::Range(1, 65536));
  app.add_option("--cardinality", opt.cardinality, "ids per feature")->check(CLI::PositiveNumber);
  app.add_option("--zipf-alpha", opt.zipf_alpha, "Zipf exponent")->check(CLI::PositiveNumber);
  app.add_option("--rows", opt.rows, "rows gathered / scattered")->check(CLI::PositiveNumber);
  app.add_option("--table-rows", opt.table_rows, "rows of the table")->check(CLI::PositiveNumber);
  app.add_option("--dim", opt.dim, "floats per row")->check(CLI::PositiveNumber);
  app.add_option("--reps", opt.reps, "timed runs per case")->check(CLI::PositiveNumber);
  app.add_option("--warmup", opt.warmup, "untimed runs first");
  app.add_option("--cpu-reps", opt.cpu_reps, "CPU baseline runs (0: skip)");
  CLI11_PARSE(app, argc, argv);
  if (opt.table_rows < opt.rows) {
    std::fprintf(stderr, "--table-rows must be >= --rows\n");
    return 2;
  }
  return osprey::cuda::Run(opt);
}
