// `osprey launch` as a user runs it: a real `osprey` binary starting real processes.
//
// StandInBinaries: a bin dir holding the real osprey-coordinator next to small shell scripts
// named osprey-server / osprey-worker that sleep (each also starts a `sleep` child of its own) or
// fail. That is a test seam for the launcher's process management, independent of the real
// server and worker. RealBinaries: the same checks with the real osprey-server / osprey-worker,
// skipped when they are not built.
#include <gtest/gtest.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <string>
#include <vector>

#include "common/transport.h"
#include "coordinator/coordinator_client.h"
#include "tests/coordinator/process_test_util.h"
#include "tools/child_process.h"

namespace osprey::tools {
namespace {

using namespace testing;  // NOLINT: the process helpers
using Ms = std::chrono::milliseconds;

const std::string kBinDir = EnvOr("OSPREY_BIN_DIR", "");
const std::string kLocalConfig = EnvOr("OSPREY_SOURCE_DIR", ".") + "/configs/local.yaml";

std::string Osprey() { return kBinDir + "/osprey"; }

void WriteScript(const std::string& path, const std::string& body) {
  std::ofstream(path) << "#!/bin/sh\n" << body;
  ::chmod(path.c_str(), 0755);
}

// Waits until the launcher's pids.txt lists `n` processes.
std::vector<std::pair<std::string, pid_t>> WaitForPids(const std::string& log_dir, size_t n) {
  std::vector<std::pair<std::string, pid_t>> pids;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (std::chrono::steady_clock::now() < deadline) {
    pids = ReadPids(log_dir);
    if (pids.size() >= n) break;
    std::this_thread::sleep_for(Ms(20));
  }
  return pids;
}

// The coordinator endpoint `osprey launch` printed in its first line ("...; coordinator E; logs
// in ..."), waiting up to 20 s for it in `err_path`; "" when it did not appear.
std::string LaunchedCoordinator(const std::string& err_path) {
  const std::string tag = "; coordinator ";
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (std::chrono::steady_clock::now() < deadline) {
    const std::string err = ReadFile(err_path);
    const size_t at = err.find(tag);
    const size_t end = at == std::string::npos ? at : err.find(';', at + tag.size());
    if (end != std::string::npos) return err.substr(at + tag.size(), end - at - tag.size());
    std::this_thread::sleep_for(Ms(20));
  }
  return "";
}

// Whether, within `timeout`, the coordinator at `endpoint` heard a step > 0 from `workers` workers:
// training is under way.
bool WaitForTraining(const std::string& endpoint, int workers, Ms timeout) {
  auto transport = MakeTransport(TransportOptions{});
  if (!transport.ok()) return false;
  auto coord = coordinator::CoordinatorClient::Create(std::move(*transport), endpoint);
  if (!coord.ok()) return false;
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  bool training = false;
  while (!training && std::chrono::steady_clock::now() < deadline) {
    auto state = (*coord)->GetState(1000);
    int stepping = 0;
    if (state.ok()) {
      for (const proto::NodeState& n : state->nodes()) {
        if (n.role() == proto::ROLE_WORKER && n.clock() > 0) ++stepping;
      }
    }
    training = stepping >= workers;
    if (!training) std::this_thread::sleep_for(Ms(20));
  }
  (*coord)->Stop();
  return training;
}

std::vector<pid_t> PidsOf(const std::vector<std::pair<std::string, pid_t>>& named) {
  std::vector<pid_t> pids;
  for (const auto& [name, pid] : named) pids.push_back(pid);
  return pids;
}

std::vector<pid_t> ReadPidList(const std::string& path) {
  std::vector<pid_t> pids;
  std::ifstream in(path);
  pid_t p;
  while (in >> p) pids.push_back(p);
  return pids;
}

TEST(LauncherTest, BadConfigExitsWithTwoAndTheErrorBeforeStartingAnything) {
  TempDir tmp;
  const std::string& dir = tmp.path();
  std::ofstream(dir + "/bad.yaml") << "clusterr:\n  servers: 1\n";
  Proc p = Spawn({Osprey(), "launch", dir + "/bad.yaml", "--log-dir", dir + "/logs"}, dir);
  std::optional<int> status = WaitExit(p.pid, std::chrono::seconds(30));
  ASSERT_TRUE(status.has_value());
  ASSERT_TRUE(WIFEXITED(*status));
  EXPECT_EQ(WEXITSTATUS(*status), 2);
  const std::string err = ReadFile(p.err_path);
  EXPECT_NE(err.find("clusterr"), std::string::npos) << err;
  EXPECT_TRUE(ReadPids(dir + "/logs").empty()) << "nothing may start for a bad config";
}

TEST(LauncherTest, BadOverrideAndBadFlagsExitWithTwo) {
  TempDir tmp;
  const std::string& dir = tmp.path();
  Proc p = Spawn({Osprey(), "launch", kLocalConfig, "--set", "cluster.servers=-3"}, dir);
  std::optional<int> status = WaitExit(p.pid, std::chrono::seconds(30));
  ASSERT_TRUE(status.has_value() && WIFEXITED(*status));
  EXPECT_EQ(WEXITSTATUS(*status), 2);
  EXPECT_NE(ReadFile(p.err_path).find("cluster.servers"), std::string::npos)
      << ReadFile(p.err_path);

  p = Spawn({Osprey(), "launch", kLocalConfig, "--no-such-flag"}, dir);
  status = WaitExit(p.pid, std::chrono::seconds(30));
  ASSERT_TRUE(status.has_value() && WIFEXITED(*status));
  EXPECT_EQ(WEXITSTATUS(*status), 2);

  p = Spawn({Osprey(), "bench", "no-such-benchmark"}, dir);
  status = WaitExit(p.pid, std::chrono::seconds(30));
  ASSERT_TRUE(status.has_value() && WIFEXITED(*status));
  EXPECT_EQ(WEXITSTATUS(*status), 2);
  EXPECT_NE(ReadFile(p.err_path).find("unknown benchmark"), std::string::npos);
}

class StandInBinaries : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = tmp_.path();
    bin_ = dir_ + "/bin";
    logs_ = dir_ + "/logs";
    ::mkdir(bin_.c_str(), 0755);
    const std::string coordinator = kBinDir + "/osprey-coordinator";
    ASSERT_EQ(::symlink(coordinator.c_str(), (bin_ + "/osprey-coordinator").c_str()), 0);
    // Stand-ins that never register: the real coordinator waits for them.
    const std::string sleeper = "sleep 300 &\necho $! >> " + dir_ + "/grandchildren.txt\nwait\n";
    WriteScript(bin_ + "/osprey-server", sleeper);
    WriteScript(bin_ + "/osprey-worker", sleeper);
  }
  Proc Launch() {
    return Spawn({Osprey(), "launch", kLocalConfig, "--set", "cluster.servers=1", "--set",
                  "cluster.workers=2", "--bin-dir", bin_, "--log-dir", logs_},
                 dir_);
  }

  TempDir tmp_;
  std::string dir_, bin_, logs_;
};

class StandInBinariesSignal : public StandInBinaries, public ::testing::WithParamInterface<int> {};

TEST_P(StandInBinariesSignal, StopSignalStopsEveryChildAndGrandchild) {
  const int sig = GetParam();
  Proc p = Launch();
  auto named = WaitForPids(logs_, 4);
  ASSERT_EQ(named.size(), 4u) << ReadFile(p.err_path);
  EXPECT_EQ(named[0].first, "coordinator-0");
  EXPECT_EQ(named[3].first, "worker-1");
  std::vector<pid_t> grandchildren;
  for (int i = 0; i < 500 && grandchildren.size() < 3; ++i) {
    grandchildren = ReadPidList(dir_ + "/grandchildren.txt");
    std::this_thread::sleep_for(Ms(10));
  }
  ASSERT_EQ(grandchildren.size(), 3u);
  std::this_thread::sleep_for(Ms(300));
  ASSERT_EQ(::kill(p.pid, sig), 0);
  std::optional<int> status = WaitExit(p.pid, std::chrono::seconds(15));
  ASSERT_TRUE(status.has_value()) << "the launcher did not exit";
  ASSERT_TRUE(WIFEXITED(*status));
  EXPECT_EQ(WEXITSTATUS(*status), 128 + sig);
  EXPECT_TRUE(AllGone(PidsOf(named), Ms(2000))) << ReadFile(p.err_path);
  EXPECT_TRUE(AllGone(grandchildren, Ms(2000))) << "a child's own children survived";
}

INSTANTIATE_TEST_SUITE_P(Signals, StandInBinariesSignal, ::testing::Values(SIGTERM, SIGINT));

TEST_F(StandInBinaries, FailingWorkerStopsTheJobAndShowsItsLog) {
  WriteScript(bin_ + "/osprey-worker", "echo 'stand-in worker failing on purpose'\nexit 3\n");
  Proc p = Launch();
  std::optional<int> status = WaitExit(p.pid, std::chrono::seconds(30));
  ASSERT_TRUE(status.has_value());
  ASSERT_TRUE(WIFEXITED(*status));
  EXPECT_EQ(WEXITSTATUS(*status), 1);
  const std::string err = ReadFile(p.err_path);
  EXPECT_NE(err.find("exited with status 3"), std::string::npos) << err;
  EXPECT_NE(err.find("stand-in worker failing on purpose"), std::string::npos) << err;
  EXPECT_TRUE(AllGone(PidsOf(ReadPids(logs_)), Ms(2000)));
}

TEST_F(StandInBinaries, CoordinatorFailureNamesTheMissingNodes) {
  Proc p = Spawn({Osprey(), "launch", kLocalConfig, "--set", "cluster.servers=1", "--set",
                  "cluster.workers=2", "--set", "cluster.startup_timeout_ms=500", "--bin-dir",
                  bin_, "--log-dir", logs_},
                 dir_);
  std::optional<int> status = WaitExit(p.pid, std::chrono::seconds(30));
  ASSERT_TRUE(status.has_value());
  ASSERT_TRUE(WIFEXITED(*status));
  EXPECT_EQ(WEXITSTATUS(*status), 1);
  const std::string err = ReadFile(p.err_path);
  EXPECT_NE(err.find("missing 1 of 1 servers and 2 of 2 workers"), std::string::npos) << err;
  EXPECT_TRUE(AllGone(PidsOf(ReadPids(logs_)), Ms(2000)));
}

// The coordinator cannot bind (its port is taken): the launch fails at once, with the
// coordinator's own error, and starts no server or worker.
TEST_F(StandInBinaries, CoordinatorThatCannotListenFailsTheLaunchWithItsError) {
  const int taken = ::socket(AF_INET, SOCK_STREAM, 0);
  ASSERT_GE(taken, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(addr);
  ASSERT_EQ(::bind(taken, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  ASSERT_EQ(::listen(taken, 1), 0);
  ASSERT_EQ(::getsockname(taken, reinterpret_cast<sockaddr*>(&addr), &len), 0);
  const std::string endpoint = "tcp://127.0.0.1:" + std::to_string(ntohs(addr.sin_port));
  Proc p = Spawn({Osprey(), "launch", kLocalConfig, "--set", "cluster.servers=1", "--set",
                  "cluster.workers=2", "--set", "cluster.coordinator=" + endpoint, "--bin-dir", bin_,
                  "--log-dir", logs_},
                 dir_);
  std::optional<int> status = WaitExit(p.pid, std::chrono::seconds(60));
  ::close(taken);
  ASSERT_TRUE(status.has_value()) << "timed out";
  ASSERT_TRUE(WIFEXITED(*status));
  EXPECT_NE(WEXITSTATUS(*status), 0);
  const std::string err = ReadFile(p.err_path);
  EXPECT_NE(err.find("the coordinator did not start listening on " + endpoint), std::string::npos) << err;
  EXPECT_NE(err.find("coordinator-0.log"), std::string::npos) << err;
  EXPECT_NE(err.find("cannot listen on " + endpoint), std::string::npos)
      << "the coordinator's own error, from its log\n" << err;
  for (const auto& [name, pid] : ReadPids(logs_)) EXPECT_EQ(name, "coordinator-0") << "started " << name;
}

// --endpoint-file where no file can be written: the coordinator stops with exit status 1 and an
// error naming the flag and the path, so a launcher waiting for the file learns why.
TEST_F(StandInBinaries, CoordinatorEndpointFileThatCannotBeWrittenFailsNamingIt) {
  Proc p = Spawn({bin_ + "/osprey-coordinator", "--config", kLocalConfig, "--set",
                  "cluster.coordinator=tcp://127.0.0.1:0", "--endpoint-file", dir_ + "/no-such-dir/endpoint"},
                 dir_);
  std::optional<int> status = WaitExit(p.pid, std::chrono::seconds(30));
  ASSERT_TRUE(status.has_value()) << "timed out";
  ASSERT_TRUE(WIFEXITED(*status));
  EXPECT_EQ(WEXITSTATUS(*status), 1);
  const std::string err = ReadFile(p.err_path);
  EXPECT_NE(err.find("--endpoint-file"), std::string::npos) << err;
  EXPECT_NE(err.find(dir_ + "/no-such-dir/endpoint"), std::string::npos) << err;
}

TEST_F(StandInBinaries, StallGuardFailsAJobThatDoesNotMove) {
  Proc p = Spawn({Osprey(), "launch", kLocalConfig, "--set", "cluster.servers=1", "--set",
                  "cluster.workers=2", "--stall-timeout", "1", "--bin-dir", bin_, "--log-dir",
                  logs_},
                 dir_);
  std::optional<int> status = WaitExit(p.pid, std::chrono::seconds(30));
  ASSERT_TRUE(status.has_value());
  ASSERT_TRUE(WIFEXITED(*status));
  EXPECT_EQ(WEXITSTATUS(*status), 1);
  const std::string err = ReadFile(p.err_path);
  EXPECT_NE(err.find("no progress for 1 s"), std::string::npos) << err;
  EXPECT_TRUE(AllGone(PidsOf(ReadPids(logs_)), Ms(2000)));
}

TEST_F(StandInBinaries, KilledLauncherTakesItsChildrenDown) {
  Proc p = Launch();
  auto named = WaitForPids(logs_, 4);
  ASSERT_EQ(named.size(), 4u);
  ASSERT_EQ(::kill(p.pid, SIGKILL), 0);  // no chance to clean up: PR_SET_PDEATHSIG must
  WaitExit(p.pid, std::chrono::seconds(5));
  EXPECT_TRUE(AllGone(PidsOf(named), Ms(5000)));
  for (pid_t g : ReadPidList(dir_ + "/grandchildren.txt")) ::kill(g, SIGKILL);  // tidy up
}

class RealBinaries : public ::testing::Test {
 protected:
  void SetUp() override {
    for (const char* name : {"osprey-server", "osprey-worker"}) {
      if (::access((kBinDir + "/" + name).c_str(), X_OK) != 0) {
        GTEST_SKIP() << name << " is not built in " << kBinDir;
      }
    }
    dir_ = tmp_.path();
  }
  TempDir tmp_;
  std::string dir_;
};

TEST_F(RealBinaries, RunsASmallJobAndWritesTheJsonReport) {
  const std::string json = dir_ + "/report.json";
  Proc p = Spawn({Osprey(), "launch", kLocalConfig, "--set", "train.steps=30", "--set",
                  "train.eval_samples=2000", "--report-json", json, "--log-dir", dir_ + "/logs",
                  "--quiet"},
                 dir_);
  std::optional<int> status = WaitExit(p.pid, std::chrono::seconds(180));
  ASSERT_TRUE(status.has_value()) << "timed out";
  ASSERT_TRUE(WIFEXITED(*status));
  ASSERT_EQ(WEXITSTATUS(*status), 0) << ReadFile(p.err_path);
  const std::string report = ReadFile(json);
  for (const char* key : {"\"auc\": 0.", "\"oracle_auc\": 0.", "\"logloss\": ",
                          "\"samples_per_sec\": ", "\"steps\": 30,", "\"bytes_pushed\": ",
                          "\"bytes_pulled\": ", "\"wall_seconds\": "}) {
    EXPECT_NE(report.find(key), std::string::npos) << key << " in " << report;
  }
  EXPECT_NE(ReadFile(p.out_path).find("held-out AUC"), std::string::npos);
}

TEST_F(RealBinaries, SigintMidRunStopsEveryProcess) {
  Proc p = Spawn({Osprey(), "launch", kLocalConfig, "--set", "train.steps=1000000", "--log-dir",
                  dir_ + "/logs", "--quiet"},
                 dir_);
  auto named = WaitForPids(dir_ + "/logs", 5);
  ASSERT_EQ(named.size(), 5u) << ReadFile(p.err_path);
  const std::string coordinator = LaunchedCoordinator(p.err_path);
  ASSERT_FALSE(coordinator.empty()) << ReadFile(p.err_path);
  ASSERT_TRUE(WaitForTraining(coordinator, 2, Ms(60000)))
      << "training is not under way\n" << ReadFile(p.err_path);
  ASSERT_EQ(::kill(p.pid, SIGINT), 0);
  std::optional<int> status = WaitExit(p.pid, std::chrono::seconds(15));
  ASSERT_TRUE(status.has_value());
  ASSERT_TRUE(WIFEXITED(*status));
  EXPECT_EQ(WEXITSTATUS(*status), 128 + SIGINT);
  EXPECT_TRUE(AllGone(PidsOf(named), Ms(2000)));
}

}  // namespace
}  // namespace osprey::tools
