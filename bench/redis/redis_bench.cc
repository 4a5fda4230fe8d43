// osprey-bench-redis: pipelined SETs of 1 KiB blobs through osprey::redis::RedisClient, batch 1
// vs 64 vs 1024, on one redis-server and on a 3-master Redis Cluster (both started here, on
// loopback, as the tests start them), with raw hiredis pipelining to the same nodes (same keys,
// same grouping per node) as the baseline for the client's own overhead. Prints, per case, the median of --runs runs.
//
//   osprey-bench-redis [--runs 5] [--commands 16384]
#include <hiredis/hiredis.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "common/redis/redis_client.h"
#include "tests/testing/redis_fixture.h"

namespace osprey::redis {
namespace {

using Clock = std::chrono::steady_clock;

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

std::vector<std::string> MakeKeys(int n) {
  std::vector<std::string> keys;
  for (int i = 0; i < n; ++i) keys.push_back("bench:" + std::to_string(i));
  return keys;
}

// SETs/s of `total` SETs sent `batch` at a time through the client.
StatusOr<double> RunClient(RedisClient& client, const std::vector<std::string>& keys,
                           const std::string& blob, int batch, int total) {
  std::vector<Command> cmds;
  std::vector<Reply> replies;
  const auto start = Clock::now();
  for (int done = 0; done < total; done += batch) {
    cmds.clear();
    for (int i = done; i < std::min(total, done + batch); ++i) {
      cmds.push_back({{"SET", keys[i % keys.size()], blob}});
    }
    OSPREY_RETURN_IF_ERROR(client.Execute(cmds, &replies));
    if (replies.back().is_error()) return Internal("SET failed: " + replies.back().str);
  }
  return total / std::chrono::duration<double>(Clock::now() - start).count();
}

// The same with hiredis directly: each batch's SETs appended to the connection of their key's
// node (`owner[i]` indexes `nodes`), every node's pipeline written, then every node's replies
// read -- what the client does, minus routing, grouping and reply copies. The floor.
StatusOr<double> RunRaw(const std::vector<Endpoint>& nodes, const std::vector<int>& owner,
                        const std::vector<std::string>& keys, const std::string& blob, int batch, int total) {
  std::vector<redisContext*> ctx;
  auto close_all = [&] {
    for (redisContext* c : ctx) redisFree(c);
  };
  for (const Endpoint& ep : nodes) {
    ctx.push_back(redisConnect(ep.host.c_str(), ep.port));
    if (ctx.back() == nullptr || ctx.back()->err) {
      close_all();
      return Unavailable("raw hiredis connect to " + ep.ToString() + " failed");
    }
  }
  std::vector<int> count(nodes.size());
  const auto start = Clock::now();
  for (int done = 0; done < total; done += batch) {
    std::fill(count.begin(), count.end(), 0);
    for (int i = done; i < std::min(total, done + batch); ++i) {
      const size_t k = i % keys.size();
      const char* argv[3] = {"SET", keys[k].data(), blob.data()};
      const size_t lens[3] = {3, keys[k].size(), blob.size()};
      redisAppendCommandArgv(ctx[owner[k]], 3, argv, lens);
      ++count[owner[k]];
    }
    for (size_t n = 0; n < nodes.size(); ++n) {
      int written = 0;
      while (count[n] > 0 && !written) {
        if (redisBufferWrite(ctx[n], &written) != REDIS_OK) {
          close_all();
          return Unavailable("raw hiredis write failed");
        }
      }
    }
    for (size_t n = 0; n < nodes.size(); ++n) {
      for (int j = 0; j < count[n]; ++j) {
        void* r = nullptr;
        if (redisGetReply(ctx[n], &r) != REDIS_OK) {
          close_all();
          return Unavailable("raw hiredis read failed");
        }
        freeReplyObject(r);
      }
    }
  }
  const double rate = total / std::chrono::duration<double>(Clock::now() - start).count();
  close_all();
  return rate;
}

int Main(int argc, char** argv) {
  int runs = 5, commands = 16384;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (std::strcmp(argv[i], "--runs") == 0) runs = std::max(1, std::atoi(argv[i + 1]));
    if (std::strcmp(argv[i], "--commands") == 0) commands = std::max(1024, std::atoi(argv[i + 1]));
  }
  auto single = osprey::testing::RedisServer::Start();
  auto cluster = osprey::testing::RedisTestCluster::Start();
  if (!single.ok() || !cluster.ok()) {
    std::fprintf(stderr, "cannot start redis: %s %s\n", single.status().ToString().c_str(),
                 cluster.status().ToString().c_str());
    return 1;
  }
  RedisOptions so;
  so.seeds = {(*single)->endpoint()};
  RedisOptions co;
  co.cluster = true;
  co.seeds = (*cluster)->endpoints();
  auto sc = RedisClient::Connect(so);
  auto cc = RedisClient::Connect(co);
  if (!sc.ok() || !cc.ok()) {
    std::fprintf(stderr, "cannot connect: %s %s\n", sc.status().ToString().c_str(), cc.status().ToString().c_str());
    return 1;
  }
  const std::string blob(1024, 'x');
  const auto keys = MakeKeys(10000);
  // Which cluster node owns each key (from one CLUSTER SLOTS), for the raw baseline.
  const std::vector<Endpoint> cnodes = (*cluster)->endpoints();
  const std::vector<int> single_owner(keys.size(), 0);
  std::vector<int> cluster_owner(keys.size(), -1);
  const redis::Reply slots = (*cluster)->node(0).Call({"CLUSTER", "SLOTS"});
  for (size_t k = 0; k < keys.size(); ++k) {
    const int slot = RedisClient::KeySlot(keys[k]);
    for (const Reply& range : slots.elements) {
      if (range.elements.size() < 3 || slot < range.elements[0].integer || slot > range.elements[1].integer) continue;
      for (size_t n = 0; n < cnodes.size(); ++n) {
        if (cnodes[n].port == range.elements[2].elements[1].integer) cluster_owner[k] = static_cast<int>(n);
      }
    }
    if (cluster_owner[k] < 0) {
      std::fprintf(stderr, "no owner for slot %d\n", slot);
      return 1;
    }
  }
  // Runs are interleaved (run r of every case, in a shuffled order, then run r+1), so a change in the machine's load
  // (2 shared cores here) hits every case alike rather than one case's five runs.
  struct Case {
    const char* target;
    int batch;
    int total;
    std::vector<double> rates;
  };
  std::vector<Case> cases;
  for (const char* target : {"raw_single", "single", "raw_cluster", "cluster"}) {
    // Batch 1 pays one round trip per SET: fewer of them keep the run short.
    for (int batch : {1, 64, 1024}) cases.push_back({target, batch, batch == 1 ? commands / 4 : commands, {}});
  }
  std::mt19937 rng(1);
  std::vector<size_t> order(cases.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  for (int r = 0; r < runs; ++r) {
    // A new case order every round: no case always follows the same one (what ran just before
    // leaves the servers' and the scheduler's state behind).
    std::shuffle(order.begin(), order.end(), rng);
    for (size_t ci : order) {
      Case& c = cases[ci];
      const bool is_cluster = std::strstr(c.target, "cluster") != nullptr;
      StatusOr<double> rate =
          std::strncmp(c.target, "raw_", 4) == 0
              ? RunRaw(is_cluster ? cnodes : std::vector<Endpoint>{(*single)->endpoint()},
                       is_cluster ? cluster_owner : single_owner, keys, blob, c.batch, c.total)
              : RunClient(is_cluster ? **cc : **sc, keys, blob, c.batch, c.total);
      if (!rate.ok()) {
        std::fprintf(stderr, "%s batch %d: %s\n", c.target, c.batch, rate.status().ToString().c_str());
        return 1;
      }
      c.rates.push_back(*rate);
    }
  }
  std::printf("1 KiB SETs, median of %d interleaved runs\n", runs);
  std::printf("%-12s %6s %9s %12s %10s %12s\n", "target", "batch", "commands", "SETs/s", "vs batch1",
              "vs raw same batch");
  for (const Case& c : cases) {
    const double med = Median(c.rates);
    double batch1 = 0, raw = 0;
    for (const Case& o : cases) {
      if (std::strcmp(o.target, c.target) == 0 && o.batch == 1) batch1 = Median(o.rates);
      const std::string base = std::strstr(c.target, "cluster") ? "raw_cluster" : "raw_single";
      if (base == o.target && o.batch == c.batch) raw = Median(o.rates);
    }
    std::printf("%-12s %6d %9d %12.0f %9.1fx %11.2fx\n", c.target, c.batch, c.total, med, med / batch1, med / raw);
  }
  const RedisClient::Counters cn = (*cc)->counters();
  std::printf("cluster client: %lld map reads, %lld MOVED, %lld ASK, %lld retries\n", cn.map_refreshes,
              cn.moved, cn.asks, cn.retries);
  return 0;
}

}  // namespace
}  // namespace osprey::redis

int main(int argc, char** argv) { return osprey::redis::Main(argc, argv); }
