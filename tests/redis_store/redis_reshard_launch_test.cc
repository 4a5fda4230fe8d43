// A Redis Cluster resharded under a running job, through the real binaries: the test starts a
// 3-master cluster, runs `osprey launch configs/local-redis-cluster.yaml` against it (the
// launcher's own Redis off: store.redis.local=none), and while the job trains moves a third of
// the slots (with the rows' hashes in them) from one master to another with `redis-cli --cluster
// reshard`. The job must finish, its servers must have followed MOVED / ASK redirections, every
// row a server created must be in Redis exactly once (the servers' own row counts, logged at
// stop, equal what `osprey redis-inspect` counts in the cluster), and the AUC must match the
// native store's on the same job.
#include <unistd.h>

#include <chrono>
#include <regex>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "tests/coordinator/process_test_util.h"
#include "tests/testing/launch_util.h"
#include "tests/testing/redis_fixture.h"
#include "tests/testing/wait.h"

namespace osprey {
namespace {

using tools::testing::ProcessGone;
using tools::testing::TempDir;
using testing::BinDir;
using testing::ReadFile;
using testing::SourceDir;

constexpr char kSteps[] = "1500";

std::vector<std::string> LaunchArgs(const std::vector<std::string>& sets) {
  std::vector<std::string> a = {"--set", std::string("train.steps=") + kSteps};
  for (const auto& s : sets) a.insert(a.end(), {"--set", s});
  return a;
}

// Sum over the servers' logs of the numbers in "stopped with R sparse rows in Redis; followed M
// MOVED and A ASK redirections" (server/redis/redis_store.cc).
struct StopLine {
  long long rows = 0, moved = 0, asks = 0;
  int servers = 0;
};
StopLine ReadStopLines(const std::string& log_dir, int num_servers) {
  StopLine s;
  const std::regex re("stopped with (\\d+) sparse rows in Redis; followed (\\d+) MOVED and (\\d+) ASK");
  for (int r = 0; r < num_servers; ++r) {
    const std::string log = ReadFile(log_dir + "/server-" + std::to_string(r) + ".log");
    std::smatch m;
    if (!std::regex_search(log, m, re)) continue;
    ++s.servers;
    s.rows += std::stoll(m[1]);
    s.moved += std::stoll(m[2]);
    s.asks += std::stoll(m[3]);
  }
  return s;
}

// Rows per server as `osprey redis-inspect` counts them ("  server R: N rows"), summed.
long long InspectRows(const std::string& inspect_out, int* servers) {
  const std::regex re("server (\\d+): (\\d+) rows");
  long long n = 0;
  *servers = 0;
  for (auto it = std::sregex_iterator(inspect_out.begin(), inspect_out.end(), re); it != std::sregex_iterator();
       ++it) {
    n += std::stoll((*it)[2]);
    ++*servers;
  }
  return n;
}

long long KeysInCluster(testing::RedisTestCluster& c) {
  long long n = 0;
  for (size_t i = 0; i < c.size(); ++i) n += c.node(i).Call({"DBSIZE"}).integer;
  return n;
}

TEST(RedisReshardLaunchTest, ReshardDuringTrainingLosesAndDoublesNoRow) {
  auto cluster = testing::RedisTestCluster::Start(3);
  ASSERT_TRUE(cluster.ok()) << cluster.status().ToString();
  testing::RedisTestCluster& c = **cluster;
  std::string endpoints;
  for (const auto& e : c.endpoints()) endpoints += (endpoints.empty() ? "" : ",") + e.host + ":" + std::to_string(e.port);
  const std::vector<std::string> redis_sets = {"store.redis.local=none", "store.redis.endpoints=" + endpoints};

  TempDir dir;
  const pid_t job = testing::StartLaunch("local-redis-cluster.yaml", dir.path(), LaunchArgs(redis_sets));
  ASSERT_GT(job, 0);
  const std::string job_out = dir.path() + "/launch.out";
  // Training has written rows (the tables' meta keys alone are a handful).
  ASSERT_TRUE(testing::WaitUntil([&] { return KeysInCluster(c) > 20 || ProcessGone(job); },
                                 std::chrono::seconds(120)));
  ASSERT_FALSE(ProcessGone(job)) << ReadFile(job_out);

  // The reshard, as an operator runs it: 5500 slots (a third of the cluster) from node 0 to 1.
  const std::string cmd = "redis-cli --cluster reshard 127.0.0.1:" + std::to_string(c.node(0).port()) +
                          " --cluster-from " + c.NodeId(0) + " --cluster-to " + c.NodeId(1) +
                          " --cluster-slots 5500 --cluster-yes > " + dir.path() + "/reshard.log 2>&1";
  ASSERT_EQ(testing::RunCommand(cmd), 0) << ReadFile(dir.path() + "/reshard.log");
  const bool trained_through_reshard = !ProcessGone(job);
  ASSERT_TRUE(testing::WaitUntil([&] { return c.Agreed(); }, std::chrono::seconds(20)));

  ASSERT_EQ(testing::WaitLaunch(job, std::chrono::minutes(8)), 0) << ReadFile(job_out);
  EXPECT_TRUE(trained_through_reshard) << "the job ended before the reshard did; raise train.steps";

  const StopLine stop = ReadStopLines(dir.path() + "/logs", 2);
  ASSERT_EQ(stop.servers, 2) << "a server's stop line is missing";
  EXPECT_GT(stop.moved + stop.asks, 0) << "the servers never saw the reshard";
  EXPECT_GT(stop.rows, 0);

  // Every row a server created is in Redis once, where the cluster now keeps it.
  const std::string inspect = dir.path() + "/inspect.txt";
  std::string icmd = BinDir() + "/osprey redis-inspect --config " + SourceDir() +
                     "/configs/local-redis-cluster.yaml --rows 0";
  for (const auto& s : redis_sets) icmd += " --set " + s;
  ASSERT_EQ(testing::RunCommand(icmd + " > " + inspect + " 2>&1"), 0) << ReadFile(inspect);
  int inspected_servers = 0;
  EXPECT_EQ(InspectRows(ReadFile(inspect), &inspected_servers), stop.rows) << ReadFile(inspect);
  EXPECT_EQ(inspected_servers, 2);

  // And the model trained as the native store trains it.
  TempDir native_dir;
  ASSERT_EQ(testing::WaitLaunch(testing::StartLaunch("local.yaml", native_dir.path(), LaunchArgs({})),
                                std::chrono::minutes(5)), 0)
      << ReadFile(native_dir.path() + "/launch.out");
  const double auc = testing::JsonNumber(ReadFile(dir.path() + "/report.json"), "auc");
  const double native_auc = testing::JsonNumber(ReadFile(native_dir.path() + "/report.json"), "auc");
  std::printf("reshard: %lld MOVED, %lld ASK; %lld rows; AUC %.4f (native %.4f)\n", stop.moved, stop.asks,
              stop.rows, auc, native_auc);
  EXPECT_GT(native_auc, 0.7);
  EXPECT_NEAR(auc, native_auc, 0.003);
}

}  // namespace
}  // namespace osprey
