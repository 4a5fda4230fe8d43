// The store matrix: Adagrad, dim 16 / 64, windows of 1 and 4 pushes, through TableShard exactly as
// server_bench.cc's cases, on the native store and on the Redis store (write_through and
// write_back; hot-row cache of 0%, 10% and 100% of the rows). A push's keys are drawn uniformly
// or Zipf-distributed (--zipf S: the key of popularity rank i drawn with weight 1/i^S, as
// recommendation features are) over the table; every row exists in Redis before timing.
//
// A case runs --runs timed runs of at least --seconds each (whole passes of --pushes pushes),
// after a warm-up pass. Its rows/s is sustained: every row pushed over all runs divided by the
// time from the first timed push until the store has written everything to Redis (the final
// FlushAll is inside the clock), so write_back cannot look fast by leaving rows dirty. Also
// printed: the apply side's rate (median over the runs, without the final flush), the rows
// still unflushed before that flush, and the rows the store wrote to Redis per second.
#include "bench/server/store_bench.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
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

struct CaseResult {
  double rows_per_s = 0;   // sustained, the final flush inside the clock
  double apply_per_s = 0;  // median over the runs, apply side only
  uint64_t unflushed = 0;  // dirty rows before the final flush
  double flushed_per_s = 0;
};

// The pushes of a pass: `o.keys` keys drawn per push, uniform or Zipf(o.zipf) over `all` (the key
// of popularity rank i is all[i]); each push holds its distinct keys, sorted.
std::vector<std::vector<uint64_t>> DrawPushes(const std::vector<uint64_t>& all,
                                              const StoreBenchOptions& o, std::mt19937_64* rng) {
  std::vector<double> cdf;
  if (o.zipf > 0) {
    cdf.resize(all.size());
    double sum = 0;
    for (size_t i = 0; i < all.size(); ++i) cdf[i] = sum += std::pow(static_cast<double>(i + 1), -o.zipf);
    for (double& c : cdf) c /= sum;
  }
  std::uniform_real_distribution<double> u01(0.0, 1.0);
  std::uniform_int_distribution<size_t> uni(0, all.size() - 1);
  std::vector<std::vector<uint64_t>> pushes(o.pushes);
  for (auto& p : pushes) {
    p.reserve(o.keys);
    for (size_t j = 0; j < o.keys; ++j) {
      size_t i = uni(*rng);
      if (o.zipf > 0) {
        i = static_cast<size_t>(std::lower_bound(cdf.begin(), cdf.end(), u01(*rng)) - cdf.begin());
        i = std::min(i, all.size() - 1);
      }
      p.push_back(all[i]);
    }
    std::sort(p.begin(), p.end());
    p.erase(std::unique(p.begin(), p.end()), p.end());
  }
  return pushes;
}

CaseResult RunCase(Store* store, RedisStore* redis, const Shape& s, const StoreBenchOptions& o) {
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
  const std::vector<std::vector<uint64_t>> pushes = DrawPushes(all, o, &rng);
  size_t pass_rows = 0;
  for (const auto& p : pushes) pass_rows += p.size();
  std::vector<float> g(o.keys * s.dim);
  std::uniform_real_distribution<float> u(-0.01f, 0.01f);
  for (float& x : g) x = u(rng);
  std::vector<Buffer> values;
  for (const auto& p : pushes) values.push_back(Buffer::Copy(g.data(), p.size() * s.dim * sizeof(float)));
  auto pass = [&] {
    for (size_t i = 0; i < pushes.size(); ++i) {
      proto::Header h;
      h.set_version(shard.version());
      if (!shard.Push(h, pushes[i].data(), pushes[i].size(), values[i], 0).ok()) std::abort();
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
  using Clock = std::chrono::steady_clock;
  auto secs_since = [](Clock::time_point t0) {
    return std::chrono::duration<double>(Clock::now() - t0).count();
  };
  std::vector<double> rates;
  size_t rows = 0;
  const uint64_t flushed0 = redis != nullptr ? redis->flushed_rows() : 0;
  const auto timed0 = Clock::now();
  for (int r = 0; r < o.runs; ++r) {
    const auto t0 = Clock::now();
    size_t run_rows = 0;
    do {
      pass();
      run_rows += pass_rows;
    } while (secs_since(t0) < o.seconds);
    rates.push_back(static_cast<double>(run_rows) / secs_since(t0));
    rows += run_rows;
  }
  CaseResult res;
  if (redis != nullptr) {
    res.unflushed = redis->unflushed_rows();
    if (!redis->FlushAll().ok()) std::abort();
  }
  const double timed = secs_since(timed0);
  res.rows_per_s = static_cast<double>(rows) / timed;
  res.apply_per_s = Median(std::move(rates));
  res.flushed_per_s = redis != nullptr ? (redis->flushed_rows() - flushed0) / timed : 0;
  return res;
}

bool Listed(const std::string& list, const std::string& item) {
  return ("," + list + ",").find("," + item + ",") != std::string::npos;
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
  const std::string keys = o.zipf > 0 ? "zipf " + std::to_string(o.zipf).substr(0, 4) : "uniform";
  std::printf("merge-then-apply through TableShard, adagrad: %zu rows, %zu %s keys drawn per push, "
              "%d pushes per pass, %d runs of >= %.1f s; store %s%s\n", o.rows, o.keys, keys.c_str(),
              o.pushes, o.runs, o.seconds, o.store.c_str(),
              local ? (" on " + local->endpoints()).c_str() : "");
  std::printf("rows/s: sustained, until everything is in Redis; apply/s: median of the runs, "
              "without the final flush\n");
  std::printf("%-6s %4s %-14s %6s %12s %10s %12s %10s %12s\n", "window", "dim", "store", "cache",
              "rows/s", "vs native", "apply/s", "unflushed", "flushed/s");
  int prefix = 0;
  for (int dim : {16, 64}) {
    if (o.dim != 0 && dim != o.dim) continue;
    for (int window : {1, 4}) {
      Shape s{dim, window};
      NativeStore native;
      const CaseResult base = RunCase(&native, nullptr, s, o);
      std::printf("%-6d %4d %-14s %6s %12.0f %10s %12.0f %10s %12s\n", window, dim, "native", "-",
                  base.rows_per_s, "1.00", base.apply_per_s, "-", "-");
      std::fflush(stdout);
      if (!local) continue;
      // Last: merge: redis (write_through, no cache: the optimizer step runs in Redis).
      for (const char* policy_name : {"write_through", "write_back", "merge_redis"}) {
        if (!Listed(o.policies, policy_name)) continue;
        const bool merge_redis = std::string(policy_name) == "merge_redis";
        const auto policy = std::string(policy_name) == "write_back"
                                ? config::WritePolicy::kWriteBack
                                : config::WritePolicy::kWriteThrough;
        for (int pct : {0, 10, 100}) {
          if (!Listed(o.caches, std::to_string(pct)) || (merge_redis && pct != 0)) continue;
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
          const CaseResult c = RunCase(store->get(), store->get(), s, o);
          std::printf("%-6d %4d %-14s %5d%% %12.0f %10.2f %12.0f %10llu %12.0f\n", window, dim,
                      policy_name, pct, c.rows_per_s, c.rows_per_s / base.rows_per_s,
                      c.apply_per_s, static_cast<unsigned long long>(c.unflushed), c.flushed_per_s);
          std::fflush(stdout);
        }
      }
    }
  }
  return 0;
}

}  // namespace osprey::server
