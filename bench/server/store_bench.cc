// The store matrix: Adagrad, dim 16 / 64, windows of 1 and 4 pushes, through TableShard exactly as
// server_bench.cc's cases, on the native store and on the Redis store (write_through and
// write_back; hot-row cache of 0%, 10% and 100% of the rows). Rows are pushed at random over the
// table (every row exists in Redis before timing). Each case: median of --runs passes after a
// warm-up, as pushed rows per second, and the share of the native rows/s of the same shape.
// write_back rows/s count the apply side only; the flusher writes concurrently (the unflushed
// rows left at the end of the last pass are printed, and the rows written to Redis per second
// over the timed passes: whether the flusher keeps up with the apply side).
#include "bench/server/store_bench.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <vector>

#include "common/stats.h"
#include "server/native_store.h"
#include "server/redis/redis_store.h"
#include "server/table_shard.h"
#include "tools/local_redis.h"

namespace osprey::server {
namespace {

class NoReplies : public Replier {
 public:
  void Reply(PeerId, const proto::Header&, Buffer) override {}
  void ReplyError(PeerId, const proto::Header&, const Status&) override {}
};

struct Shape {
  int dim;
  int window;
};

// Median rows/s; *left: rows still unflushed after the last pass (write_back).
double RunCase(Store* store, RedisStore* redis, const Shape& s, const StoreBenchOptions& o,
               uint64_t* left, double* flushed_per_s) {
  config::TableConfig cfg;
  cfg.name = "bench";
  cfg.type = config::TableType::kSparse;
  cfg.dim = s.dim;
  cfg.optimizer.type = config::OptimizerType::kAdagrad;
  cfg.consistency.mode = config::ConsistencyMode::kAsync;
  cfg.consistency.merge_max_pushes = s.window;
  proto::TableSpec ps;
  ps.set_name("bench");
  ps.set_type(proto::TABLE_SPARSE);
  ps.set_dim(s.dim);
  ServerCounters counters;
  NoReplies replier;
  auto created = TableShard::Create(0, ps, cfg, {}, 0, store, &counters, &replier);
  if (!created.ok()) {
    std::fprintf(stderr, "%s\n", created.status().ToString().c_str());
    std::exit(1);
  }
  TableShard& shard = **created;
  std::mt19937_64 rng(7);
  std::vector<uint64_t> all(o.rows);
  for (size_t i = 0; i < o.rows; ++i) all[i] = rng();
  std::vector<std::vector<uint64_t>> pushes(o.pushes);
  for (auto& p : pushes) {
    std::shuffle(all.begin(), all.end(), rng);
    p.assign(all.begin(), all.begin() + std::min(o.keys, all.size()));
  }
  std::vector<float> g(o.keys * s.dim);
  std::uniform_real_distribution<float> u(-0.01f, 0.01f);
  for (float& x : g) x = u(rng);
  const Buffer values = Buffer::Copy(g.data(), g.size() * sizeof(float));
  auto pass = [&] {
    for (const auto& p : pushes) {
      proto::Header h;
      h.set_version(shard.version());
      if (!shard.Push(h, p.data(), p.size(), values, 0).ok()) std::abort();
      if (!shard.Advance(0).ok()) std::abort();
    }
  };
  {  // every row exists (in Redis too) before timing
    std::vector<float> gall(o.rows * s.dim, 0.0f);
    std::sort(all.begin(), all.end());
    if (!shard.Push(proto::Header(), all.data(), all.size(),
                    Buffer::Copy(gall.data(), gall.size() * sizeof(float)), 0).ok() ||
        !shard.Advance(0).ok()) {
      std::abort();
    }
    if (redis != nullptr && !redis->FlushAll().ok()) std::abort();
  }
  pass();  // warm-up
  std::vector<double> secs;
  const uint64_t flushed0 = redis != nullptr ? redis->flushed_rows() : 0;
  const auto timed0 = std::chrono::steady_clock::now();
  for (int r = 0; r < o.runs; ++r) {
    auto t0 = std::chrono::steady_clock::now();
    pass();
    secs.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  *left = redis != nullptr ? redis->unflushed_rows() : 0;
  const double timed =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - timed0).count();
  *flushed_per_s = redis != nullptr ? (redis->flushed_rows() - flushed0) / timed : 0;
  if (redis != nullptr) (void)redis->FlushAll();
  return static_cast<double>(o.pushes) * o.keys / Median(std::move(secs));
}

}  // namespace

int RunStoreBench(const StoreBenchOptions& o) {
  const bool cluster = o.store == "redis-cluster";
  std::unique_ptr<tools::LocalRedis> local;
  char tmpl[] = "/tmp/osprey-bench-redis-XXXXXX";
  if (o.store != "native") {
    if (::mkdtemp(tmpl) == nullptr) return 1;
    auto r = tools::LocalRedis::Start(tmpl, cluster);
    if (!r.ok()) {
      std::fprintf(stderr, "%s\n", r.status().ToString().c_str());
      return 1;
    }
    local = std::move(*r);
  }
  std::printf("merge-then-apply through TableShard, adagrad: %zu rows, %zu keys per push, %d "
              "pushes per pass, median of %d; store %s%s\n", o.rows, o.keys, o.pushes, o.runs,
              o.store.c_str(), local ? (" on " + local->endpoints()).c_str() : "");
  std::printf("%-6s %4s %-14s %6s %14s %10s %10s %12s\n", "window", "dim", "store", "cache",
              "rows/s", "vs native", "unflushed", "flushed/s");
  int prefix = 0;
  for (int dim : {16, 64}) {
    if (o.dim != 0 && dim != o.dim) continue;
    for (int window : {1, 4}) {
      Shape s{dim, window};
      NativeStore native;
      uint64_t left = 0;
      double flushed = 0;
      const double base = RunCase(&native, nullptr, s, o, &left, &flushed);
      std::printf("%-6d %4d %-14s %6s %14.0f %10s %10s %12s\n", window, dim, "native", "-", base,
                  "1.00", "-", "-");
      std::fflush(stdout);
      if (!local) continue;
      // Last: merge: redis (write_through, no cache: the optimizer step runs in Redis).
      for (int policy_i = 0; policy_i < 3; ++policy_i) {
        const bool merge_redis = policy_i == 2;
        const auto policy = policy_i == 1 ? config::WritePolicy::kWriteBack
                                          : config::WritePolicy::kWriteThrough;
        for (int pct : {0, 10, 100}) {
          if (merge_redis && pct != 0) continue;
          config::RedisStoreConfig rc;
          if (merge_redis) rc.merge = config::MergeSide::kRedis;
          rc.endpoints = local->endpoints();
          rc.cluster = cluster;
          rc.key_prefix = "bench" + std::to_string(prefix++);
          rc.write_policy = policy;
          rc.flush_interval_ms = 100;
          rc.cache_rows = o.rows * pct / 100;
          auto store = RedisStore::Connect(rc);
          if (!store.ok() || !(*store)->TakeOver(0).ok()) {
            std::fprintf(stderr, "redis store: %s\n", store.status().ToString().c_str());
            return 1;
          }
          double rps = RunCase(store->get(), store->get(), s, o, &left, &flushed);
          const bool wt = policy == config::WritePolicy::kWriteThrough;
          std::printf("%-6d %4d %-14s %5d%% %14.0f %10.2f %10llu %12.0f\n", window, dim,
                      merge_redis ? "merge_redis" : wt ? "write_through" : "write_back", pct,
                      rps, rps / base,
                      static_cast<unsigned long long>(left), flushed);
          std::fflush(stdout);
        }
      }
    }
  }
  return 0;
}

}  // namespace osprey::server
