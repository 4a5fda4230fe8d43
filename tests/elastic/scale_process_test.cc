// osprey scale with real processes (issue 12 item 4): the test starts osprey-coordinator, two
// osprey-server and two osprey-worker processes itself (as `osprey launch` does), trains a bsp
// job, starts a third server with --join and runs `osprey scale --servers 3`, then
// `osprey scale --servers 2` (the third server hands its rows back and exits), and the job
// finishes. Rows are conserved exactly: the sum of the servers' final row digests (count and
// checksum of every row and dense chunk with its optimizer state, logged at exit) equals that of
// the same job run without scaling -- in bsp both end at the same cut (train.steps clocks).
// The same with the redis store (a real redis-server, or a real Redis Cluster, started here;
// write_through, and write_back): the moved rows are handed over in Redis -- deleted from the old
// owner's buckets and written under the new owner's, never sent through the servers -- so the
// digests, read back from Redis at exit, match too.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <functional>
#include <regex>
#include <string>
#include <thread>
#include <vector>

#include "common/transport.h"
#include "coordinator/coordinator_client.h"
#include "tests/testing/free_port.h"
#include "tests/testing/launch_util.h"
#include "tests/testing/test_env.h"
#ifdef OSPREY_TEST_REDIS
#include <set>

#include "server/redis/row_layout.h"
#include "tests/testing/redis_fixture.h"
#endif

namespace {

using Clock = std::chrono::steady_clock;
using osprey::testing::EnvOr;
using osprey::testing::ReadFile;

constexpr int kSteps = 900;

struct Child {
  std::string name;
  pid_t pid = -1;
  bool reaped = false;
  int status = 0;
};

// The processes of one job; whatever still runs at the end is killed and reaped.
class Job {
 public:
  Job(const std::string& dir, const std::vector<std::string>& sets) : dir_(dir) {
    std::filesystem::remove_all(dir_);
    std::filesystem::create_directories(dir_);
    bin_ = EnvOr("OSPREY_BIN_DIR", "build/bin");
    endpoint_ = "tcp://127.0.0.1:" + std::to_string(osprey::testing::FreePort());
    config_ = {"--config", EnvOr("OSPREY_SOURCE_DIR", ".") + "/configs/bsp.yaml"};
    for (const std::string& s :
         {"cluster.coordinator=" + endpoint_, std::string("cluster.heartbeat_interval_ms=50"),
          "train.steps=" + std::to_string(kSteps), std::string("train.eval_samples=0"),
          std::string("train.batch_size=64"), std::string("tables.1.chunk_floats=512"),
          std::string("log.level=info")}) {
      config_.insert(config_.end(), {"--set", s});
    }
    for (const std::string& s : sets) config_.insert(config_.end(), {"--set", s});
  }
  ~Job() {
    coord_.reset();
    for (auto& c : children_) {
      if (!c.reaped && c.pid > 0) {
        ::kill(c.pid, SIGKILL);
        ::waitpid(c.pid, nullptr, 0);
      }
    }
  }
  void Start() {
    Spawn("coordinator", "osprey-coordinator", config_);
    Spawn("server-0", "osprey-server", config_);
    Spawn("server-1", "osprey-server", config_);
    Spawn("worker-0", "osprey-worker", config_);
    Spawn("worker-1", "osprey-worker", config_);
  }
  void Spawn(const std::string& name, const std::string& binary, std::vector<std::string> args) {
    const std::string path = bin_ + "/" + binary;
    const std::string logp = log(name);
    const pid_t pid = osprey::testing::SpawnLogged(path, args, logp);
    children_.push_back(Child{name, pid});
  }
  // `osprey scale --servers M`, run to its end; its exit code (-1: not within the deadline).
  int Scale(int servers) {
    const std::string name = "scale-" + std::to_string(scale_runs_++);
    Spawn(name, "osprey", {"scale", "--coordinator", endpoint_, "--servers", std::to_string(servers),
                           "--timeout-ms", "60000"});
    Child& c = children_.back();
    const auto deadline = Clock::now() + std::chrono::seconds(90);
    while (!Exited(c) && Clock::now() < deadline) std::this_thread::sleep_for(std::chrono::milliseconds(20));
    return c.reaped && WIFEXITED(c.status) ? WEXITSTATUS(c.status) : -1;
  }
  bool Exited(Child& c) {
    if (c.reaped) return true;
    int st = 0;
    if (::waitpid(c.pid, &st, WNOHANG) == c.pid) {
      c.reaped = true;
      c.status = st;
    }
    return c.reaped;
  }
  bool WaitAll(Clock::time_point deadline) {
    while (Clock::now() < deadline) {
      bool all = true;
      for (auto& c : children_) all = Exited(c) && all;
      if (all) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    return false;
  }
  // The slowest worker's step as the coordinator last heard it; -1 when not known.
  long MinStep() {
    if (!coord_) {
      auto t = osprey::MakeTransport(osprey::TransportOptions{});
      if (!t.ok()) return -1;
      auto c = osprey::coordinator::CoordinatorClient::Create(std::move(t).value(), endpoint_);
      if (!c.ok()) return -1;
      coord_ = std::move(c).value();
    }
    auto st = coord_->GetState(1000);
    if (!st.ok()) return -1;
    long min = -1;
    int workers = 0;
    for (const auto& n : st->nodes()) {
      if (n.role() != osprey::proto::ROLE_WORKER) continue;
      ++workers;
      min = min < 0 ? n.clock() : std::min<long>(min, n.clock());
    }
    return workers == 2 ? min : -1;
  }
  // False at the deadline, or as soon as a worker exited.
  bool WaitForStep(long step, int seconds) {
    const auto deadline = Clock::now() + std::chrono::seconds(seconds);
    while (Clock::now() < deadline) {
      if (MinStep() >= step) return true;
      for (auto& c : children_) {
        if (c.name.rfind("worker-", 0) == 0 && Exited(c)) return false;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    return false;
  }
  // A worker said it has no GPU to train on (worker.device: cuda on a machine without one).
  bool NoGpu() const {
    for (const char* w : {"worker-0", "worker-1"}) {
      const std::string text = ReadFile(log(w));
      if (text.find("no CUDA device is visible") != std::string::npos ||
          text.find("built without CUDA") != std::string::npos) {
        return true;
      }
    }
    return false;
  }
  // Sum over the servers' "rows digest" lines: rows, records, checksum (mod 2^64).
  void Digest(uint64_t* rows, uint64_t* records, uint64_t* checksum, int* servers) {
    static const std::regex re(R"(server \d+ rows digest: (\d+) rows, (\d+) records, checksum ([0-9a-f]+))");
    *rows = *records = *checksum = 0;
    *servers = 0;
    for (const auto& c : children_) {
      if (c.name.rfind("server-", 0) != 0) continue;
      const std::string text = ReadFile(log(c.name));
      std::smatch m;
      if (!std::regex_search(text, m, re)) continue;
      ++*servers;
      *rows += std::stoull(m[1]);
      *records += std::stoull(m[2]);
      *checksum += std::stoull(m[3], nullptr, 16);
    }
  }
  std::string log(const std::string& name) const { return dir_ + "/" + name + ".log"; }
  std::vector<Child>& children() { return children_; }
  const std::vector<std::string>& config() const { return config_; }
  std::string Logs() const {
    std::string out;
    for (const auto& c : children_) out += "---- " + c.name + "\n" + ReadFile(log(c.name)).substr(0, 6000);
    return out;
  }

 private:
  std::string dir_, bin_, endpoint_;
  std::vector<std::string> config_;
  std::vector<Child> children_;
  std::unique_ptr<osprey::coordinator::CoordinatorClient> coord_;
  int scale_runs_ = 0;
};

bool AllExitedZero(Job& job, std::string* why) {
  for (auto& c : job.children()) {
    if (!c.reaped || !WIFEXITED(c.status) || WEXITSTATUS(c.status) != 0) {
      *why = c.name + (c.reaped ? " exit status " + std::to_string(c.status) : " still running");
      return false;
    }
  }
  return true;
}

// 2 -> 3 -> 2 servers while training, then the same job never scaled: the rows digests match.
// `scaled` and `unscaled` are each run's extra config sets; `check` (optional) runs after each
// scale step with the new server count, and with 0 once the scaled job has ended. `exact`: the
// checksum too (every row bit for bit), else the row and record counts only. Skips when the
// workers have no GPU (worker.device: cuda).
void ScaleAndCompare(const std::string& tag, const std::vector<std::string>& scaled,
                     const std::vector<std::string>& unscaled,
                     const std::function<void(int, const Job&)>& check = nullptr, bool exact = true) {
  const std::string base = "/tmp/osprey-scale-test-" + tag + "-" + std::to_string(::getpid());
  uint64_t rows = 0, records = 0, checksum = 0;
  int servers = 0;
  std::string scale_out;
  {
    Job job(base + "/scaled", scaled);
    job.Start();
    const bool started = job.WaitForStep(100, 120);
    if (!started && job.NoGpu()) GTEST_SKIP() << "no usable GPU here";
    ASSERT_TRUE(started) << job.Logs();
    std::vector<std::string> join = job.config();
    join.push_back("--join");
    job.Spawn("server-2", "osprey-server", join);
    ASSERT_EQ(job.Scale(3), 0) << job.Logs();
    if (check) check(3, job);
    scale_out = ReadFile(job.log("scale-0"));
    const long at = job.MinStep();
    ASSERT_TRUE(job.WaitForStep(at + 100, 120)) << "training did not go on after 2 -> 3\n" << job.Logs();
    ASSERT_EQ(job.Scale(2), 0) << job.Logs();
    if (check) check(2, job);
    scale_out += ReadFile(job.log("scale-1"));
    ASSERT_TRUE(job.WaitAll(Clock::now() + std::chrono::seconds(180))) << job.Logs();
    if (check) check(0, job);
    std::string why;
    EXPECT_TRUE(AllExitedZero(job, &why)) << why << "\n" << job.Logs();
    job.Digest(&rows, &records, &checksum, &servers);
    EXPECT_EQ(servers, 3) << job.Logs();
    EXPECT_NE(ReadFile(job.log("server-2")).find("removed from the job"), std::string::npos);
    EXPECT_NE(ReadFile(job.log("worker-0")).find("epoch 3 (2 servers)"), std::string::npos)
        << ReadFile(job.log("worker-0"));
  }
  EXPECT_NE(scale_out.find("scaled to 3 servers (shard map epoch 2)"), std::string::npos) << scale_out;
  EXPECT_NE(scale_out.find("scaled to 2 servers (shard map epoch 3)"), std::string::npos) << scale_out;
  std::printf("%s", scale_out.c_str());

  uint64_t base_rows = 0, base_records = 0, base_checksum = 0;
  int base_servers = 0;
  {
    Job job(base + "/baseline", unscaled);
    job.Start();
    ASSERT_TRUE(job.WaitAll(Clock::now() + std::chrono::seconds(180))) << job.Logs();
    std::string why;
    EXPECT_TRUE(AllExitedZero(job, &why)) << why << "\n" << job.Logs();
    job.Digest(&base_rows, &base_records, &base_checksum, &base_servers);
    EXPECT_EQ(base_servers, 2);
  }
  std::printf("rows digest, scaled 2->3->2: %llu rows, %llu records, checksum %016llx\n"
              "rows digest, never scaled:    %llu rows, %llu records, checksum %016llx\n",
              static_cast<unsigned long long>(rows), static_cast<unsigned long long>(records),
              static_cast<unsigned long long>(checksum), static_cast<unsigned long long>(base_rows),
              static_cast<unsigned long long>(base_records), static_cast<unsigned long long>(base_checksum));
  EXPECT_GT(base_rows, 1000u);
  EXPECT_EQ(rows, base_rows);
  EXPECT_EQ(records, base_records);
  if (exact) {
    EXPECT_EQ(checksum, base_checksum) << "a row's weights or optimizer state differ from the run without scaling";
  }
  if (!::testing::Test::HasFailure()) std::filesystem::remove_all(base);
}

TEST(ScaleProcessTest, TwoToThreeToTwoServersConservesEveryRow) { ScaleAndCompare("native", {}, {}); }

// GPU workers pause for the step too: the GPU loop ends at the boundary, with its pushes answered,
// and goes on with the new map's client (GpuTrainer::AtBoundary). Not bit for bit -- the GPU sums
// row gradients with atomics, so two GPU runs differ in the last bits -- but every row is there:
// the row and record counts equal the unscaled GPU run's. Skips where no GPU is visible.
TEST(ScaleProcessTest, GpuWorkersPauseAndGoOnWithTheNewMap) {
  const std::vector<std::string> gpu = {"worker.device=cuda"};
  ScaleAndCompare("gpu", gpu, gpu, [&](int servers, const Job& job) {
    if (servers != 0) return;
    for (const char* w : {"worker-0", "worker-1"}) {  // both switches, logged by the GPU loop
      const std::string text = ReadFile(job.log(w));
      EXPECT_NE(text.find("training on cuda:"), std::string::npos) << w << " is not a GPU worker";
      EXPECT_NE(text.find("the GPU loop goes on with shard map epoch 2 (2 -> 3 servers)"), std::string::npos) << text;
      EXPECT_NE(text.find("the GPU loop goes on with shard map epoch 3 (3 -> 2 servers)"), std::string::npos) << text;
    }
  }, /*exact=*/false);
}

#ifdef OSPREY_TEST_REDIS
// Sum over `log` of the rows its reshard lines say were handed over in Redis.
long long HandedOver(const std::string& log) {
  const std::regex re("records moved \\((\\d+) of them handed over in the store\\)");
  long long n = 0;
  for (auto it = std::sregex_iterator(log.begin(), log.end(), re); it != std::sregex_iterator(); ++it) {
    n += std::stoll((*it)[1]);
  }
  return n;
}

// The redis store job scaled 2 -> 3 -> 2 against a real redis-server (or, `cluster`, a real
// 3-master Redis Cluster); `merge` is store.redis.merge, `policy` store.redis.write_policy.
void RedisScaleTest(const std::string& merge, bool cluster = false,
                    const std::string& policy = "write_through") {
  std::unique_ptr<osprey::testing::RedisServer> node;
  std::unique_ptr<osprey::testing::RedisTestCluster> nodes;
  std::vector<osprey::redis::Endpoint> endpoints;
  if (cluster) {
    auto c = osprey::testing::RedisTestCluster::Start(3);
    ASSERT_TRUE(c.ok()) << c.status().ToString();
    nodes = std::move(c).value();
    endpoints = nodes->endpoints();
  } else {
    auto n = osprey::testing::RedisServer::Start();
    ASSERT_TRUE(n.ok()) << n.status().ToString();
    node = std::move(n).value();
    endpoints = {node->endpoint()};
  }
  std::string list;
  for (const auto& e : endpoints) list += (list.empty() ? "" : ",") + e.ToString();
  const std::vector<std::string> store = {"store.type=redis", "store.redis.endpoints=" + list,
                                          std::string("store.redis.cluster=") + (cluster ? "true" : "false"),
                                          "store.redis.write_policy=" + policy,
                                          "store.redis.merge=" + merge};
  std::vector<std::string> scaled = store, unscaled = store;
  scaled.push_back("store.redis.key_prefix=scaled");
  unscaled.push_back("store.redis.key_prefix=unscaled");
  osprey::redis::RedisOptions o;
  o.seeds = endpoints;
  o.cluster = cluster;
  auto admin = osprey::redis::RedisClient::Connect(o);
  ASSERT_TRUE(admin.ok()) << admin.status().ToString();
  // The sparse table's row keys in Redis under server rank r (row_layout.h).
  auto keys_of = [&](int r) {
    const osprey::server::redis_store::Layout layout("scaled", r);
    std::vector<osprey::redis::Command> cmds;
    for (uint32_t b = 0; b < osprey::server::redis_store::kBuckets; ++b) {
      cmds.push_back(osprey::redis::Command{{"HKEYS", layout.Rows(0, b)}});
    }
    std::vector<osprey::redis::Reply> replies;
    EXPECT_TRUE((*admin)->Execute(cmds, &replies).ok());
    std::set<std::string> keys;
    for (const auto& reply : replies) {
      for (const auto& e : reply.elements) keys.insert(e.str);
    }
    return keys;
  };
  // Moved rows are written under their new owner and deleted under the old one: rank 2 holds rows
  // while it serves and none once it left; no row is under two ranks.
  ScaleAndCompare("redis-" + merge + (cluster ? "-cluster-" : "-") + policy, scaled, unscaled,
                  [&](int servers, const Job& job) {
    const std::set<std::string> r0 = keys_of(0), r1 = keys_of(1), r2 = keys_of(2);
    std::printf("redis rows after %s: rank 0 %zu, rank 1 %zu, rank 2 %zu\n",
                servers ? ("the step to " + std::to_string(servers) + " servers").c_str() : "the job",
                r0.size(), r1.size(), r2.size());
    if (servers == 3) {
      EXPECT_GT(r2.size(), 0u) << "rank 2 holds no rows in Redis after it joined";
    } else {
      EXPECT_EQ(r2.size(), 0u) << "rows left under the removed rank 2";
    }
    for (const std::set<std::string>* other : {&r1, &r2}) {
      for (const std::string& k : *other) EXPECT_EQ(r0.count(k), 0u) << "row " << k << " under two ranks";
    }
    for (const std::string& k : r2) EXPECT_EQ(r1.count(k), 0u) << "row " << k << " under two ranks";
    // The sparse rows were handed over in Redis, not sent through the servers.
    if (servers != 0) {
      long long handed = 0;
      for (const char* s : {"server-0", "server-1", "server-2"}) handed += HandedOver(ReadFile(job.log(s)));
      EXPECT_GT(handed, 0) << "no row was handed over in Redis";
    }
  });
}

TEST(ScaleProcessTest, RedisStoreTwoToThreeToTwoServersConservesEveryRow) { RedisScaleTest("server"); }

// merge: redis -- the optimizer step runs in Redis (osprey_apply) and the servers cache no rows:
// the moved rows are read from and written to Redis the same way.
TEST(ScaleProcessTest, RedisMergeStoreTwoToThreeToTwoServersConservesEveryRow) { RedisScaleTest("redis"); }

// A Redis Cluster: a row's old and new buckets are in different slots, so the old owner copies
// their blobs from bucket to bucket itself (never through the new owner).
TEST(ScaleProcessTest, RedisClusterStoreTwoToThreeToTwoServersConservesEveryRow) {
  RedisScaleTest("server", /*cluster=*/true);
}

// write_back: the flusher thread runs through the step; the old owner writes the moving rows
// still dirty (or only pulled) before it hands them over.
TEST(ScaleProcessTest, RedisWriteBackStoreTwoToThreeToTwoServersConservesEveryRow) {
  RedisScaleTest("server", /*cluster=*/false, "write_back");
}
#endif

}  // namespace
