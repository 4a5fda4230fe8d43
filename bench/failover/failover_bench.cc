// Server failover benchmark (issue 12): time from a server's kill -9 to training resumed on its
// replacement, for a server whose shard holds >= 1M sparse rows, per store.
//
//   osprey-bench-failover [--store native|redis] [--rows N] [--runs 3]
//
// One job (2 servers, 1 worker, async, a near-uniform synthetic key space of 2.2M keys, so that
// rows are created fast and server 1's shard stays near 1.1M rows) trains until server 1 holds --rows rows and a checkpoint of them exists (native); then,
// --runs times per mode:
//   detected: kill -9 server 1; a scheduler restarts it once the coordinator marks it dead
//             (heartbeat timeout) -- the replacement restores and the worker re-sends;
//   at once:  kill -9 and restart at once (a new incarnation supersedes the old one).
// "Resumed" is the first push the replacement applies (its OP_SERVER_STATS pushes_applied > 0,
// polled every 5 ms). Prints one table row per mode: median, min, max seconds.
// Redis: the store is a redis-server started here (no persistence), write_through.
#include <signal.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "proto/wire.h"
#include "tests/testing/process_job.h"
#include "tests/testing/redis_fixture.h"

namespace {

using Clock = std::chrono::steady_clock;
using namespace osprey;

// Server stats of the server at `endpoint`; false when it did not answer within 1 s.
bool ServerStats(const std::string& endpoint, proto::ServerStats* out) {
  auto t = MakeTransport(TransportOptions{});
  if (!t.ok()) return false;
  Mutex mu;
  CondVar cv;
  bool got = false;
  Buffer values;
  (*t)->SetHandler([&](Message&& m) {
    MutexLock lock(&mu);
    values = std::move(m.values);
    got = true;
    cv.SignalAll();
  });
  auto peer = (*t)->Connect(endpoint);
  if (!peer.ok() || !(*t)->Start().ok()) return false;
  proto::Header h;
  h.set_op(proto::OP_SERVER_STATS);
  h.set_request_id(1);
  Message m;
  m.peer = *peer;
  m.header = SerializeHeader(h);
  if (!(*t)->Send(std::move(m)).ok()) return false;
  MutexLock lock(&mu);
  cv.WaitUntil(&lock, Clock::now() + std::chrono::seconds(1), [&]() { return got; });
  return got && out->ParseFromArray(values.data(), static_cast<int>(values.size()));
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  std::setvbuf(stdout, nullptr, _IOLBF, 0);
  std::string store = "native";
  uint64_t rows = 1000000;
  int runs = 3;
  for (int i = 1; i + 1 < argc; i += 2) {
    std::string a = argv[i];
    if (a == "--store") store = argv[i + 1];
    if (a == "--rows") rows = std::strtoull(argv[i + 1], nullptr, 10);
    if (a == "--runs") runs = std::atoi(argv[i + 1]);
  }
  const int heartbeat_timeout_ms = 3000;
  std::vector<std::string> sets = {
      "cluster.workers=1", "train.steps=100000000", "train.batch_size=2048", "train.eval_samples=0",
      "data.zipf_alpha=0.01",
      "data.cardinalities=[85000,85000,85000,85000,85000,85000,85000,85000,85000,85000,85000,85000,85000,85000,85000,85000,85000,85000,85000,85000,85000,85000,85000,85000,85000,85000]",
      "cluster.heartbeat_interval_ms=100", "cluster.heartbeat_timeout_ms=" + std::to_string(heartbeat_timeout_ms),
      "cluster.server_replace_timeout_ms=60000", "client.timeout_ms=60000", "log.level=info"};
  std::unique_ptr<testing::RedisServer> redis;
  if (store == "redis") {
    auto started = testing::RedisServer::Start();
    if (!started.ok()) {
      std::fprintf(stderr, "redis-server: %s\n", started.status().ToString().c_str());
      return 1;
    }
    redis = std::move(*started);
    sets.push_back("store.type=redis");
    sets.push_back("store.redis.local=none");
    sets.push_back("store.redis.endpoints=" + redis->endpoint().ToString());
    sets.push_back("store.redis.write_policy=write_through");
  } else {
    sets.push_back("checkpoint.every_seconds=5");
  }
  testing::ProcessJob job("async.yaml", sets, "/tmp/osprey-bench-failover-" + store);
  job.Start(2, 1);
  auto endpoint_of = [&](std::string* ep, uint32_t replacements) {
    proto::NodeState n;
    if (!job.Node(proto::ROLE_SERVER, 1, &n) || !n.alive() || n.replacements() != replacements) return false;
    *ep = n.endpoint();
    return true;
  };
  std::string ep;
  if (!job.WaitFor([&] { return endpoint_of(&ep, 0); }, 60)) {
    std::fprintf(stderr, "server 1 did not register\n%s", job.Logs().c_str());
    return 1;
  }
  proto::ServerStats st;
  std::printf("filling server 1 with %llu rows ...\n", static_cast<unsigned long long>(rows));
  if (!job.WaitFor([&] { return ServerStats(ep, &st) && st.rows() >= rows; }, 600)) {
    std::fprintf(stderr, "server 1 never reached %llu rows\n%s", static_cast<unsigned long long>(rows),
                 job.Logs().c_str());
    return 1;
  }
  const std::string ckpt_file = job.ckpt() + "/server-1-of-2.ckpt";
  std::vector<double> detected, at_once;
  uint32_t replacements = 0;
  std::string victim = "server-1";
  for (int k = 0; k < 2 * runs; ++k) {
    const bool wait_detect = k % 2 == 0;
    if (store == "native") {  // a checkpoint taken after the shard reached `rows`
      auto before = std::filesystem::exists(ckpt_file) ? std::filesystem::last_write_time(ckpt_file)
                                                       : std::filesystem::file_time_type::min();
      job.WaitFor([&] {
        return std::filesystem::exists(ckpt_file) && std::filesystem::last_write_time(ckpt_file) > before;
      }, 120);
    }
    ServerStats(ep, &st);
    const uint64_t rows_now = st.rows();
    testing::Child& c = job.child(victim);
    ::kill(c.pid, SIGKILL);
    const auto killed = Clock::now();
    while (!job.Exited(c)) std::this_thread::sleep_for(std::chrono::milliseconds(2));
    if (wait_detect) {
      proto::NodeState n;
      job.WaitFor([&] { return job.Node(proto::ROLE_SERVER, 1, &n) && !n.alive(); }, 60);
    }
    victim = "server-1-r" + std::to_string(++replacements);
    std::vector<std::string> extra = {"--rank", "1"};
    if (store == "native") extra.insert(extra.end(), {"--restore", job.ckpt()});
    job.Spawn(victim, "osprey-server", extra);
    if (!job.WaitFor([&] { return endpoint_of(&ep, replacements); }, 120)) {
      std::fprintf(stderr, "replacement %u did not register\n", replacements);
      return 1;
    }
    if (!job.WaitFor([&] { return ServerStats(ep, &st) && st.pushes_applied() > 0; }, 120)) {
      std::fprintf(stderr, "replacement %u at %s applied no push within 120 s (logs in %s)\n", replacements,
                   ep.c_str(), "/tmp/osprey-bench-failover-*");
      return 1;
    }
    const double s = std::chrono::duration<double>(Clock::now() - killed).count();
    std::printf("run %d (%s): %llu rows, resumed %.2f s after the kill\n", k / 2 + 1,
                wait_detect ? "restart after detection" : "restart at once",
                static_cast<unsigned long long>(rows_now), s);
    (wait_detect ? detected : at_once).push_back(s);
  }
  std::printf("\n| store | restart | heartbeat timeout | median s | min s | max s | target s |\n");
  std::printf("|---|---|---|---|---|---|---|\n");
  for (int m = 0; m < 2; ++m) {
    const std::vector<double>& v = m == 0 ? detected : at_once;
    std::printf("| %s%s | %s | %.1f s | %.2f | %.2f | %.2f | %.1f |\n", store.c_str(),
                store == "redis" ? " write_through" : "", m == 0 ? "after detection" : "at once",
                heartbeat_timeout_ms / 1000.0, Median(v), *std::min_element(v.begin(), v.end()),
                *std::max_element(v.begin(), v.end()), heartbeat_timeout_ms / 1000.0 + 3);
  }
  return 0;
}
