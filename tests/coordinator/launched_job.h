// LaunchedJob: the fixture of the failover tests that run `osprey launch` as real processes
// (worker_failover_test, launch_failover_test): the job in a temp dir (1 server, 100 ms
// heartbeats), a client of its coordinator, the launcher's pids, bounded waits on the
// coordinator's clocks and the launcher's exit, and the checks of a completed job.
#pragma once

#include <gtest/gtest.h>
#include <signal.h>

#include <chrono>
#include <cstdio>
#include <memory>
#include <optional>
#include <regex>
#include <string>
#include <vector>

#include "common/transport.h"
#include "coordinator/coordinator_client.h"
#include "tests/coordinator/process_test_util.h"
#include "tests/testing/launch_util.h"
#include "tests/testing/wait.h"

namespace osprey::tools::testing {

using osprey::testing::JsonNumber;
using osprey::testing::WaitUntil;
using Ms = std::chrono::milliseconds;
using Clock = std::chrono::steady_clock;

inline const std::string kBinDir = EnvOr("OSPREY_BIN_DIR", "");
inline const std::string kConfigs = EnvOr("OSPREY_SOURCE_DIR", ".") + "/configs/";
constexpr int kSteps = 1500;

inline std::vector<pid_t> PidsOf(const std::vector<std::pair<std::string, pid_t>>& named) {
  std::vector<pid_t> pids;
  for (const auto& [name, pid] : named) pids.push_back(pid);
  return pids;
}
constexpr int kKillAt = 300;  // worker 1 is killed once the coordinator heard this clock

// A job launched in its own temp dir, and a client of its coordinator.
class LaunchedJob : public ::testing::Test {
 protected:
  void Launch(const std::string& config, std::vector<std::string> extra) {
    dir_ = tmp_.path();
    logs_ = dir_ + "/logs";
    std::vector<std::string> argv = {kBinDir + "/osprey", "launch", kConfigs + config,
                                     "--set", "cluster.servers=1", "--set", "train.steps=" + std::to_string(kSteps),
                                     "--set", "train.eval_samples=5000", "--set", "cluster.heartbeat_interval_ms=100",
                                     "--log-dir", logs_, "--quiet", "--report-json", dir_ + "/report.json"};
    argv.insert(argv.end(), extra.begin(), extra.end());
    p_ = Spawn(argv, dir_);
    std::string endpoint;
    ASSERT_TRUE(WaitUntil([&] {
      const std::string err = ReadFile(p_.err_path);
      const size_t at = err.find("; coordinator ");
      const size_t end = at == std::string::npos ? at : err.find(';', at + 14);
      if (end == std::string::npos) return false;
      endpoint = err.substr(at + 14, end - at - 14);
      return true;
    }, Ms(20000))) << ReadFile(p_.err_path);
    auto transport = MakeTransport(TransportOptions{});
    ASSERT_TRUE(transport.ok());
    auto coord = coordinator::CoordinatorClient::Create(std::move(*transport), endpoint);
    ASSERT_TRUE(coord.ok());
    coord_ = std::move(*coord);
  }
  // Worker `rank`'s node in the coordinator's state (nullopt when unreachable).
  std::optional<proto::NodeState> Worker(int rank) {
    auto state = coord_->GetState(1000);
    if (!state.ok()) return std::nullopt;
    for (const proto::NodeState& n : state->nodes()) {
      if (n.role() == proto::ROLE_WORKER && n.rank() == rank) return n;
    }
    return std::nullopt;
  }
  bool LauncherFailed() { return ReadFile(p_.err_path).find("FAILED:") != std::string::npos; }
  // false as soon as the launcher failed.
  bool WaitForClock(int rank, int64_t clock, Ms timeout) {
    return WaitUntil([&] {
      auto n = Worker(rank);
      return (n && n->clock() >= clock) || LauncherFailed();
    }, timeout) && !LauncherFailed();
  }
  pid_t PidOf(const std::string& name) {
    for (const auto& [n, pid] : ReadPids(logs_)) {
      if (n == name) return pid;
    }
    return -1;
  }
  // The step in "worker 1 resumes at step S" of the restarted worker's log, or -1.
  int64_t ResumedAt() {
    std::smatch m;
    const std::string log = ReadFile(logs_ + "/worker-1.restart-1.log");
    if (!std::regex_search(log, m, std::regex("worker 1 resumes at step ([0-9]+) of"))) return -1;
    return std::stoll(m[1]);
  }
  // Kills worker 1 with SIGKILL at clock >= kKillAt; returns the clock the coordinator had heard.
  // `past` > 0: only once worker 0 was heard `past` steps beyond where it was then (a later
  // heartbeat of it), so with heartbeats far apart worker 1 dies at a random point between two
  // of its own, with steps its last heartbeat never reported.
  int64_t KillWorker1(int64_t past = 0) {
    EXPECT_TRUE(WaitForClock(1, kKillAt, Ms(120000))) << ReadFile(p_.err_path);
    const int64_t heard = Worker(1) ? Worker(1)->clock() : -1;
    const int64_t w0 = past > 0 && Worker(0) ? Worker(0)->clock() : 0;
    if (past > 0) {
      EXPECT_TRUE(WaitForClock(0, w0 + past, Ms(120000))) << ReadFile(p_.err_path);
    }
    const pid_t pid = PidOf("worker-1");
    EXPECT_GT(pid, 0);
    EXPECT_EQ(::kill(pid, SIGKILL), 0);
    killed_at_ = Clock::now();
    return heard;
  }
  // Waits for the restart to resume; checks the step and prints the time from the kill.
  void ExpectResumed(int64_t heard) {
    ASSERT_TRUE(WaitUntil([&] { return ResumedAt() >= 0 || LauncherFailed(); }, Ms(60000)) && ResumedAt() >= 0)
        << ReadFile(p_.err_path);
    const double s = std::chrono::duration<double>(Clock::now() - killed_at_).count();
    std::printf("worker 1 resumed at step %lld, %.3f s after its kill (upper bound: log polled)\n",
                static_cast<long long>(ResumedAt()), s);
    // The step a heartbeat reports may still have its pushes in flight (worker/resume_plan.h).
    EXPECT_GE(ResumedAt(), heard - 1) << "resumed before the clock the coordinator had heard, less one";
    EXPECT_LT(ResumedAt(), kSteps);
  }
  void ExpectJobCompleted() {
    std::optional<int> status = WaitExit(p_.pid, std::chrono::seconds(300));
    ASSERT_TRUE(status.has_value()) << "timed out";
    ASSERT_TRUE(WIFEXITED(*status));
    ASSERT_EQ(WEXITSTATUS(*status), 0) << ReadFile(p_.err_path);
    const std::string err = ReadFile(p_.err_path);
    EXPECT_NE(err.find("worker-1 (pid " + std::to_string(PidOf("worker-1")) +
                       ") was killed by signal 9 (Killed); restart 1 of 3"), std::string::npos) << err;
    const std::string log = ReadFile(logs_ + "/worker-1.restart-1.log");
    EXPECT_NE(log.find("worker 1 trained " + std::to_string(kSteps) + " steps"), std::string::npos)
        << "the report covers the rank's whole job\n" << log;
    const double auc = JsonNumber(ReadFile(dir_ + "/report.json"), "auc");
    EXPECT_GT(auc, 0.72) << ReadFile(dir_ + "/report.json");
  }
  // bsp stays bsp: one window per clock per table (2 tables, 1 server), none for a clock counted
  // twice or skipped.
  void ExpectOneWindowPerClock() {
    EXPECT_EQ(JsonNumber(ReadFile(dir_ + "/report.json"), "server_windows_applied"), 2.0 * kSteps)
        << ReadFile(dir_ + "/report.json");
  }

  // Exact resume: every push of every worker's steps was taken by the server exactly once, none
  // twice (a replayed step) and none missing (a step's push lost at the kill). 2 workers x kSteps
  // steps x 2 pushes (one per table; 1 server, every step touches both); a push dropped for its
  // staleness (async drop_above) was taken too.
  void ExpectEachPushTakenOnce() {
    const std::string report = ReadFile(dir_ + "/report.json");
    const double taken = JsonNumber(report, "server_pushes_applied") + JsonNumber(report, "server_pushes_dropped");
    EXPECT_EQ(taken, 2.0 * kSteps * 2) << report;
  }

  TempDir tmp_;
  std::string dir_, logs_;
  Proc p_;
  std::unique_ptr<coordinator::CoordinatorClient> coord_;
  Clock::time_point killed_at_;
};

}  // namespace osprey::tools::testing
