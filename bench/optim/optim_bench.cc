// Micro-benchmark of Optimizer::Apply over a table of rows stored contiguously
// (row = dim weights + state, as the native store lays them out) with one
// merged gradient of `dim` floats per row, as merge-then-apply hands them over.
//
// Per case it prints rows/s, ns per row and the memory traffic that implies
// (weights + state read and written, gradient read), the median of --runs
// timed passes after one warm-up pass, next to a baseline with the same
// layout and traffic but no optimizer math (w += g, state += 1): the memory
// roofline the optimizer is compared with.
//
// Usage: optim_bench [--rows N] [--runs R] [--threads T] [--random]
//                    [--optimizer NAME] [--dim D] [--prefetch D]
//   --threads T       splits the rows over T threads (the server's shard workers)
//   --random          visits rows in a random order (keys of a merge window)
//   --optimizer, --dim run only that optimizer / row width (default: all, 16 and 64)
//   --prefetch D      prefetches the row D positions ahead (what a store
//                     walking a merge window can do; 0 = off)
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <numeric>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "server/optim/optimizer.h"

namespace osprey::server {
namespace {

struct Options {
  size_t rows = 1 << 20;
  int runs = 5;
  int threads = 1;
  bool random_order = false;
  size_t prefetch = 0;
  std::vector<OptimizerType> types = {OptimizerType::kSgd,     OptimizerType::kMomentum,
                                      OptimizerType::kNesterov, OptimizerType::kAdagrad,
                                      OptimizerType::kAdam,    OptimizerType::kFtrl};
  std::vector<size_t> dims = {16, 64};
};

struct Table {
  size_t dim = 0, stride = 0;
  std::vector<float> data;      // rows * stride
  std::vector<float> grads;     // rows * dim
  std::vector<uint32_t> order;  // visiting order of the rows
};

Table MakeTable(const Optimizer& opt, size_t dim, const Options& o) {
  Table t;
  t.dim = dim;
  t.stride = dim + opt.state_floats(dim);
  t.data.resize(o.rows * t.stride);
  t.grads.resize(o.rows * dim);
  std::mt19937 rng(1);
  std::uniform_real_distribution<float> u(-0.5f, 0.5f);
  for (size_t r = 0; r < o.rows; ++r) {
    float* row = &t.data[r * t.stride];
    for (size_t i = 0; i < dim; ++i) row[i] = 0.01f * u(rng);
    opt.InitState(row + dim, dim);
  }
  for (float& g : t.grads) g = u(rng);
  t.order.resize(o.rows);
  std::iota(t.order.begin(), t.order.end(), 0u);
  if (o.random_order) std::shuffle(t.order.begin(), t.order.end(), rng);
  return t;
}

// Same loads and stores as an optimizer step on this layout, no math.
void BaselineRow(float* row, const float* g, size_t dim, size_t state) {
  for (size_t i = 0; i < dim; ++i) row[i] += g[i];
  for (size_t i = dim; i < dim + state; ++i) row[i] += 1.0f;
}

// Asks for every cache line of row r and of its gradient, for writing.
void Prefetch(const Table& t, size_t r) {
  constexpr size_t kLineFloats = 64 / sizeof(float);
  const float* row = &t.data[r * t.stride];
  for (size_t i = 0; i < t.stride; i += kLineFloats) __builtin_prefetch(row + i, 1);
  const float* g = &t.grads[r * t.dim];
  for (size_t i = 0; i < t.dim; i += kLineFloats) __builtin_prefetch(g + i, 0);
}

// Runs `pass(begin, end)` over the rows split across threads; returns seconds.
template <typename Pass>
double TimePass(const Options& o, Pass pass) {
  const auto start = std::chrono::steady_clock::now();
  if (o.threads <= 1) {
    pass(0, o.rows);
  } else {
    std::vector<std::thread> workers;
    const size_t per = (o.rows + o.threads - 1) / o.threads;
    for (int k = 0; k < o.threads; ++k) {
      const size_t b = std::min(o.rows, k * per), e = std::min(o.rows, b + per);
      workers.emplace_back([&pass, b, e] { pass(b, e); });
    }
    for (auto& w : workers) w.join();
  }
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

template <typename Pass>
double MedianSeconds(const Options& o, Pass pass) {
  TimePass(o, pass);  // warm-up: faults pages in, resolves the ifuncs
  std::vector<double> times;
  for (int i = 0; i < o.runs; ++i) times.push_back(TimePass(o, pass));
  std::sort(times.begin(), times.end());
  return times[times.size() / 2];
}

void PrintRow(const char* name, size_t dim, const Options& o, double secs, double bytes_per_row,
              double base_secs) {
  const double rows_per_s = o.rows / secs;
  std::printf("%-9s %4zu %8.1f %8.2f %7.2f %9.1f %7.2f %6.0f%%\n", name, dim, secs * 1e3,
              rows_per_s / 1e6, bytes_per_row * rows_per_s / 1e9, secs * 1e9 / o.rows,
              o.rows / base_secs / 1e6, 100.0 * base_secs / secs);
}

void BenchCase(OptimizerType type, size_t dim, const Options& o) {
  OptimizerConfig c;
  c.type = type;
  auto made = Optimizer::Make(c);
  if (!made.ok()) {
    std::fprintf(stderr, "%s\n", made.status().ToString().c_str());
    std::exit(1);
  }
  const Optimizer& opt = **made;
  Table t = MakeTable(opt, dim, o);
  const size_t state = opt.state_floats(dim);
  const ApplyOptions apply;
  const double secs = MedianSeconds(o, [&](size_t b, size_t e) {
    for (size_t k = b; k < e; ++k) {
      if (o.prefetch > 0 && k + o.prefetch < e) Prefetch(t, t.order[k + o.prefetch]);
      const size_t r = t.order[k];
      float* row = &t.data[r * t.stride];
      opt.Apply(row, row + dim, &t.grads[r * dim], dim, apply);
    }
  });
  const double base_secs = MedianSeconds(o, [&](size_t b, size_t e) {
    for (size_t k = b; k < e; ++k) {
      if (o.prefetch > 0 && k + o.prefetch < e) Prefetch(t, t.order[k + o.prefetch]);
      const size_t r = t.order[k];
      BaselineRow(&t.data[r * t.stride], &t.grads[r * dim], dim, state);
    }
  });
  const double bytes_per_row = 4.0 * (2.0 * t.stride + dim);
  PrintRow(OptimizerTypeName(type), dim, o, secs, bytes_per_row, base_secs);
}

Options ParseArgs(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    const bool has_value = i + 1 < argc;
    if (arg == "--rows" && has_value) {
      o.rows = std::strtoull(argv[++i], nullptr, 10);
    } else if (arg == "--runs" && has_value) {
      o.runs = std::max(1, std::atoi(argv[++i]));
    } else if (arg == "--threads" && has_value) {
      o.threads = std::max(1, std::atoi(argv[++i]));
    } else if (arg == "--random") {
      o.random_order = true;
    } else if (arg == "--optimizer" && has_value) {
      auto type = ParseOptimizerType(argv[++i]);
      if (!type.ok()) {
        std::fprintf(stderr, "%s\n", type.status().ToString().c_str());
        std::exit(2);
      }
      o.types = {*type};
    } else if (arg == "--prefetch" && has_value) {
      o.prefetch = std::strtoull(argv[++i], nullptr, 10);
    } else if (arg == "--dim" && has_value) {
      o.dims = {std::max<size_t>(1, std::strtoull(argv[++i], nullptr, 10))};
    } else {
      std::fprintf(stderr,
                   "usage: %s [--rows N] [--runs R] [--threads T] [--random] "
                   "[--optimizer NAME] [--dim D] [--prefetch D]\n",
                   argv[0]);
      std::exit(2);
    }
  }
  return o;
}

}  // namespace
}  // namespace osprey::server

int main(int argc, char** argv) {
  using namespace osprey::server;
  const Options o = ParseArgs(argc, argv);
  std::printf("optim_bench: %zu rows, median of %d runs, %d thread(s), %s order, prefetch %zu\n",
              o.rows, o.runs, o.threads, o.random_order ? "random" : "sequential", o.prefetch);
  std::printf("%-9s %4s %8s %8s %7s %9s %7s %7s\n", "optimizer", "dim", "ms", "Mrows/s", "GB/s",
              "ns/row", "base", "of_base");
  std::printf("%-9s %4s %8s %8s %7s %9s %7s %7s\n", "", "", "(median)", "", "", "", "Mrows/s",
              "");
  for (size_t dim : o.dims)
    for (OptimizerType type : o.types) BenchCase(type, dim, o);
  return 0;
}
