// osprey-bench-server: apply throughput of the server's merge-then-apply path, without transport.
//
// A sparse table of --rows rows (NativeStore, created before timing) receives pushes of --keys
// distinct random keys each, through TableShard exactly as the server's request thread drives it
// (decode-free fp32 pushes passed as a Buffer like the server's values frame, async mode):
// `window1` applies every push on arrival (merge_max_pushes
// 1: the apply-per-push baseline), `window4` merges 4 pushes into the merge buffer and applies one
// optimizer step to the merged rows. Per case it prints the median of --runs timed passes (after a
// warm-up) as pushed rows per second, ns per pushed row, and the memory traffic implied by the
// optimizer step (rows applied x (weights + state read and written + gradient read)).
//
// Usage: osprey-bench-server [--rows N] [--keys K] [--pushes P] [--runs R] [--json PATH]
//                            [--optimizer sgd|adagrad|adam|ftrl] [--dim 16|64]
//        osprey-bench-server --placement [--keys K] [--runs R]
//        osprey-bench-server --store native|redis|redis-cluster [...]  (store_bench.h)
//
// --placement times instead the key-ownership computation every multi-server request pays (the
// client partitions keys by server, the server checks it owns each): ns per key of ServerForKey
// one key at a time against ServersForKeys (8 lanes; AVX-512 where the CPU has it), for 8, 16, 24
// and 300 servers, --keys random keys, median of --runs passes.
#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "common/placement.h"
#include "common/stats.h"
#include "bench/server/store_bench.h"
#include "server/native_store.h"
#include "server/table_shard.h"

namespace osprey::server {
namespace {

struct Options {
  size_t rows = 1 << 20;
  size_t keys = 1 << 16;   // per push
  int pushes = 16;         // per timed pass
  int runs = 5;
  std::string json;
  std::string optimizer;  // "": all
  int dim = 0;            // 0: 16 and 64
  int apply_threads = 1;  // cluster.server_apply_threads
};

struct Result {
  std::string name, optimizer;
  int dim = 0;
  double rows_per_sec = 0, ns_per_row = 0, gbps = 0;
};

// The benchmark's pushes carry no acks and it holds no pulls: nothing is ever replied.
class NoReplies : public Replier {
 public:
  void Reply(PeerId, const proto::Header&, Buffer) override {}
  void ReplyError(PeerId, const proto::Header&, const Status&) override {}
};

double RunCase(OptimizerType type, int dim, int per_window, const Options& o, double* gbps) {
  config::TableConfig cfg;
  cfg.name = "bench";
  cfg.type = config::TableType::kSparse;
  cfg.dim = dim;
  cfg.optimizer.type = type;
  cfg.consistency.mode = config::ConsistencyMode::kAsync;
  cfg.consistency.merge_max_pushes = per_window;
  NativeStore store;
  proto::TableSpec ps;
  ps.set_name("bench");
  ps.set_type(proto::TABLE_SPARSE);
  ps.set_dim(dim);
  ServerCounters counters;
  NoReplies replier;
  auto created = TableShard::Create(0, ps, cfg, {}, 0, &store, &counters, &replier);
  if (!created.ok()) std::abort();
  TableShard& shard = **created;
  ApplyPool pool(o.apply_threads);
  shard.set_apply_pool(&pool);

  std::mt19937_64 rng(7);
  std::vector<uint64_t> all(o.rows);
  for (size_t i = 0; i < o.rows; ++i) all[i] = rng();
  std::vector<float> scratch(o.rows * dim);
  (void)store.PullRows(0, all.data(), all.size(), scratch.data());  // create every row
  // Push key sets: distinct keys per push (a deduplicated batch), random over the table.
  std::vector<std::vector<uint64_t>> pushes(o.pushes);
  for (auto& p : pushes) {
    std::shuffle(all.begin(), all.end(), rng);
    p.assign(all.begin(), all.begin() + std::min(o.keys, all.size()));
  }
  std::vector<float> g(o.keys * dim);
  std::uniform_real_distribution<float> u(-0.01f, 0.01f);
  for (float& x : g) x = u(rng);
  // Pushed as the server does: the values frame as a Buffer (a merge window may hold it).
  const Buffer values = Buffer::Copy(g.data(), g.size() * sizeof(float));

  auto pass = [&] {
    for (const auto& p : pushes) {
      proto::Header h;
      h.set_version(shard.version());
      if (!shard.Push(h, p.data(), p.size(), values, 0).ok()) std::abort();
      if (!shard.Advance(0).ok()) std::abort();
    }
  };
  pass();  // warm-up
  std::vector<double> secs;
  for (int r = 0; r < o.runs; ++r) {
    auto t0 = std::chrono::steady_clock::now();
    pass();
    secs.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  std::sort(secs.begin(), secs.end());
  double median = secs[secs.size() / 2];
  auto opt = Optimizer::Make(cfg.optimizer);
  double row_bytes = (2.0 * (dim + (*opt)->state_floats(dim)) + dim) * sizeof(float);
  double pushed_rows = static_cast<double>(o.pushes) * o.keys;
  // Traffic of the optimizer steps only: every pushed row is applied once in window1; in window4
  // the union of 4 pushes' keys is applied (nearly 4 x keys for random keys of a large table).
  *gbps = pushed_rows * row_bytes / median / 1e9;
  return pushed_rows / median;
}

void Usage() {
  std::fprintf(stderr, "usage: osprey-bench-server [--rows N] [--keys K] [--pushes P] [--runs R] "
                       "[--json PATH] [--optimizer NAME] [--dim 16|64] [--apply-threads T]\n"
                       "       osprey-bench-server --placement [--keys K] [--runs R]\n"
                       "       osprey-bench-server --store native|redis|redis-cluster [--rows N] "
                       "[--keys K] [--pushes P] [--runs R] [--seconds S] [--zipf S] [--dim 16|64]"
                       " [--policies write_through,write_back,merge_redis] [--caches 0,10,100]\n");
  std::exit(2);
}

// Median ns per key of `fn` over `runs` passes of `keys`; *sink keeps the results alive.
template <typename Fn>
double NsPerKey(const std::vector<uint64_t>& keys, int runs, Fn fn, int64_t* sink) {
  std::vector<int32_t> owners(keys.size());
  std::vector<double> ns;
  fn(owners.data());  // warm-up
  for (int r = 0; r < runs; ++r) {
    auto t0 = std::chrono::steady_clock::now();
    fn(owners.data());
    ns.push_back(std::chrono::duration<double, std::nano>(std::chrono::steady_clock::now() - t0).count() /
                 static_cast<double>(keys.size()));
    for (size_t i = 0; i < owners.size(); i += 97) *sink += owners[i];
  }
  return osprey::Median(std::move(ns));
}

int RunPlacement(const Options& o) {
  std::mt19937_64 rng(11);
  std::vector<uint64_t> keys(o.keys);
  for (uint64_t& k : keys) k = rng();
  const bool avx512 = osprey::placement_internal::HaveAvx512();
  std::printf("key ownership, %zu random keys, median of %d passes, ns per key (AVX-512 %s)\n",
              keys.size(), o.runs, avx512 ? "available" : "not available");
  std::printf("%8s %14s %14s %14s %9s\n", "servers", "one by one", "8 lanes", "avx512", "speedup");
  int64_t sink = 0;
  for (int32_t servers : {8, 16, 24, 300}) {
    const uint32_t table = 3;
    double scalar = NsPerKey(keys, o.runs, [&](int32_t* out) {
      for (size_t i = 0; i < keys.size(); ++i) out[i] = osprey::ServerForKey(table, keys[i], servers);
    }, &sink);
    double lanes = NsPerKey(keys, o.runs, [&](int32_t* out) {
      osprey::placement_internal::ServersForKeysLanes(table, keys.data(), keys.size(), servers, out);
    }, &sink);
    double vec = avx512 ? NsPerKey(keys, o.runs, [&](int32_t* out) {
      osprey::placement_internal::ServersForKeysAvx512(table, keys.data(), keys.size(), servers, out);
    }, &sink) : 0;
    char vec_cell[32] = "-";
    if (avx512) std::snprintf(vec_cell, sizeof(vec_cell), "%.1f", vec);
    std::printf("%8d %14.1f %14.1f %14s %8.2fx\n", servers, scalar, lanes, vec_cell,
                scalar / (avx512 ? vec : lanes));
  }
  std::printf("(checksum %lld)\n", static_cast<long long>(sink));
  return 0;
}

// A bad `--store` flag: what was wrong, then the usage; exit status 2.
[[noreturn]] void BadStoreFlag(const std::string& what) {
  std::fprintf(stderr, "osprey-bench-server: %s\n", what.c_str());
  Usage();
  std::exit(2);
}

// The whole of `text` as a number (strtod), or BadStoreFlag naming the flag.
double StoreFlagNumber(const std::string& flag, const char* text) {
  char* end = nullptr;
  errno = 0;
  const double v = std::strtod(text, &end);
  if (end == text || *end != '\0' || errno != 0 || !std::isfinite(v)) {
    BadStoreFlag(flag + ": '" + text + "' is not a number");
  }
  return v;
}

// Each item of the comma-separated `list` must be one of `allowed`.
void CheckStoreFlagList(const std::string& flag, const std::string& list,
                        const std::vector<std::string>& allowed) {
  size_t from = 0;
  while (from <= list.size()) {
    const size_t comma = std::min(list.find(',', from), list.size());
    const std::string item = list.substr(from, comma - from);
    if (std::find(allowed.begin(), allowed.end(), item) == allowed.end()) {
      std::string all;
      for (const std::string& x : allowed) all += (all.empty() ? "" : ", ") + x;
      BadStoreFlag(flag + ": '" + item + "' is none of " + all);
    }
    from = comma + 1;
  }
}

// `--store S [flags]` from argv[at] on (store_bench.h).
StoreBenchOptions ParseStoreFlags(int argc, char** argv, int at) {
  StoreBenchOptions so;
  so.store = argv[at];
  if (so.store != "native" && so.store != "redis" && so.store != "redis-cluster") {
    BadStoreFlag("--store: '" + so.store + "' is none of native, redis, redis-cluster");
  }
  for (int i = at + 1; i < argc; i += 2) {
    const std::string b = argv[i];
    if (i + 1 >= argc) BadStoreFlag(b + ": no value");
    const char* v = argv[i + 1];
    auto whole = [&](double min, double max) {
      const double x = StoreFlagNumber(b, v);
      if (x != std::floor(x) || x < min || x > max) {
        BadStoreFlag(b + ": '" + v + "' is not a whole number in [" + std::to_string(static_cast<long long>(min)) +
                     ", " + std::to_string(static_cast<long long>(max)) + "]");
      }
      return x;
    };
    if (b == "--rows") so.rows = static_cast<size_t>(whole(1, 1e9));
    else if (b == "--keys") so.keys = static_cast<size_t>(whole(1, 1e9));
    else if (b == "--pushes") so.pushes = static_cast<int>(whole(1, 1e6));
    else if (b == "--runs") so.runs = static_cast<int>(whole(1, 1000));
    else if (b == "--dim") so.dim = static_cast<int>(whole(0, 64));
    else if (b == "--seconds") so.seconds = StoreFlagNumber(b, v);
    else if (b == "--zipf") so.zipf = StoreFlagNumber(b, v);
    else if (b == "--policies") so.policies = v;
    else if (b == "--caches") so.caches = v;
    else BadStoreFlag("unknown flag '" + b + "'");
  }
  if (so.dim != 0 && so.dim != 16 && so.dim != 64) BadStoreFlag("--dim: 16 or 64 (0: both)");
  if (so.seconds < 0) BadStoreFlag("--seconds: must be >= 0");
  if (so.zipf < 0) BadStoreFlag("--zipf: must be >= 0 (0: uniform keys)");
  CheckStoreFlagList("--policies", so.policies, {"write_through", "write_back", "merge_redis"});
  CheckStoreFlagList("--caches", so.caches, {"0", "10", "100"});
  return so;
}

}  // namespace
}  // namespace osprey::server

int main(int argc, char** argv) {
  using namespace osprey::server;
  Options o;
  bool placement = false;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--placement") {
      placement = true;
      continue;
    }
    if (i + 1 >= argc) Usage();
    if (a == "--store") {  // the Redis store matrix (store_bench.h), its own defaults
      const StoreBenchOptions so = ParseStoreFlags(argc, argv, i + 1);
#ifdef OSPREY_BENCH_STORE
      return RunStoreBench(so);
#else
      std::fprintf(stderr, "osprey-bench-server: built without hiredis: no --store\n");
      return 2;
#endif
    }
    if (a == "--rows") o.rows = std::strtoull(argv[++i], nullptr, 10);
    else if (a == "--keys") o.keys = std::strtoull(argv[++i], nullptr, 10);
    else if (a == "--pushes") o.pushes = std::atoi(argv[++i]);
    else if (a == "--runs") o.runs = std::atoi(argv[++i]);
    else if (a == "--json") o.json = argv[++i];
    else if (a == "--optimizer") o.optimizer = argv[++i];
    else if (a == "--dim") o.dim = std::atoi(argv[++i]);
    else if (a == "--apply-threads") {
      const std::string v = argv[++i];
      const double t = StoreFlagNumber(a, v.c_str());
      if (t < 1 || t > 64 || t != static_cast<int>(t)) BadStoreFlag(a + ": '" + v + "' is not 1..64");
      o.apply_threads = static_cast<int>(t);
    }
    else Usage();
  }
  if (placement) return o.keys > 0 && o.runs > 0 ? RunPlacement(o) : (Usage(), 2);
  if (o.rows == 0 || o.keys == 0 || o.keys > o.rows || o.pushes <= 0 || o.runs <= 0) Usage();
  std::printf("merge-then-apply, sparse rows: %zu rows, %zu keys per push, %d pushes per pass, "
              "%d apply thread(s), median of %d\n", o.rows, o.keys, o.pushes, o.apply_threads, o.runs);
  std::printf("%-8s %-9s %4s %14s %10s %10s   %s\n", "case", "optimizer", "dim", "rows/s",
              "ns/row", "GB/s", "vs window1");
  std::vector<Result> results;
  const OptimizerType types[] = {OptimizerType::kSgd, OptimizerType::kAdagrad,
                                 OptimizerType::kAdam, OptimizerType::kFtrl};
  for (int dim : {16, 64}) {
    if (o.dim != 0 && dim != o.dim) continue;
    for (OptimizerType t : types) {
      if (!o.optimizer.empty() && o.optimizer != OptimizerTypeName(t)) continue;
      double base = 0;
      for (int per_window : {1, 4}) {
        Result r;
        r.name = "window" + std::to_string(per_window);
        r.optimizer = OptimizerTypeName(t);
        r.dim = dim;
        r.rows_per_sec = RunCase(t, dim, per_window, o, &r.gbps);
        r.ns_per_row = 1e9 / r.rows_per_sec;
        if (per_window == 1) base = r.rows_per_sec;
        std::printf("%-8s %-9s %4d %14.0f %10.1f %10.2f   %.2fx\n", r.name.c_str(),
                    r.optimizer.c_str(), dim, r.rows_per_sec, r.ns_per_row, r.gbps,
                    r.rows_per_sec / base);
        std::fflush(stdout);
        results.push_back(r);
      }
    }
  }
  if (!o.json.empty()) {
    FILE* f = std::fopen(o.json.c_str(), "w");
    if (f == nullptr) {
      std::fprintf(stderr, "cannot write %s\n", o.json.c_str());
      return 1;
    }
    std::fprintf(f, "[\n");
    for (size_t i = 0; i < results.size(); ++i) {
      const Result& r = results[i];
      std::fprintf(f,
                   "  {\"case\": \"%s\", \"optimizer\": \"%s\", \"dim\": %d, \"rows_per_sec\": %.0f, "
                   "\"ns_per_row\": %.2f}%s\n",
                   r.name.c_str(), r.optimizer.c_str(), r.dim, r.rows_per_sec, r.ns_per_row,
                   i + 1 < results.size() ? "," : "");
    }
    std::fprintf(f, "]\n");
    std::fclose(f);
  }
  return 0;
}
