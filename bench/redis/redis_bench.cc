// osprey-bench-redis: pipelined SETs of 1 KiB blobs through osprey::redis::RedisClient, batch 1
// vs 64 vs 1024, on one redis-server and on a 3-master Redis Cluster (both started here, on
// loopback, as the tests start them), with raw hiredis pipelining on the single node as the
// baseline for the client's own overhead. Prints, per case, the median of --runs runs.
//
//   osprey-bench-redis [--runs 5] [--commands 16384]
#include <hiredis/hiredis.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
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

// The same with hiredis directly (no routing, no reply copies): the floor for one node.
StatusOr<double> RunRawHiredis(const Endpoint& ep, const std::vector<std::string>& keys,
                               const std::string& blob, int batch, int total) {
  redisContext* c = redisConnect(ep.host.c_str(), ep.port);
  if (c == nullptr || c->err) return Unavailable("raw hiredis connect to " + ep.ToString() + " failed");
  const auto start = Clock::now();
  for (int done = 0; done < total; done += batch) {
    const int n = std::min(total, done + batch) - done;
    for (int i = done; i < done + n; ++i) {
      const std::string& k = keys[i % keys.size()];
      const char* argv[3] = {"SET", k.data(), blob.data()};
      const size_t lens[3] = {3, k.size(), blob.size()};
      redisAppendCommandArgv(c, 3, argv, lens);
    }
    for (int i = 0; i < n; ++i) {
      void* r = nullptr;
      if (redisGetReply(c, &r) != REDIS_OK) {
        redisFree(c);
        return Unavailable("raw hiredis read failed");
      }
      freeReplyObject(r);
    }
  }
  const double rate = total / std::chrono::duration<double>(Clock::now() - start).count();
  redisFree(c);
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
  std::printf("%-14s %6s %9s %12s %10s\n", "target", "batch", "commands", "SETs/s(med)", "vs batch1");
  for (const char* target : {"raw_hiredis", "single", "cluster"}) {
    double batch1 = 0;
    for (int batch : {1, 64, 1024}) {
      // Batch 1 pays one round trip per SET: fewer of them keep the run short.
      const int total = batch == 1 ? commands / 4 : commands;
      std::vector<double> rates;
      for (int r = 0; r < runs; ++r) {
        StatusOr<double> rate =
            std::strcmp(target, "raw_hiredis") == 0 ? RunRawHiredis((*single)->endpoint(), keys, blob, batch, total)
            : std::strcmp(target, "single") == 0    ? RunClient(**sc, keys, blob, batch, total)
                                                    : RunClient(**cc, keys, blob, batch, total);
        if (!rate.ok()) {
          std::fprintf(stderr, "%s batch %d: %s\n", target, batch, rate.status().ToString().c_str());
          return 1;
        }
        rates.push_back(*rate);
      }
      const double med = Median(rates);
      if (batch == 1) batch1 = med;
      std::printf("%-14s %6d %9d %12.0f %9.1fx\n", target, batch, total, med, med / batch1);
    }
  }
  return 0;
}

}  // namespace
}  // namespace osprey::redis

int main(int argc, char** argv) { return osprey::redis::Main(argc, argv); }
