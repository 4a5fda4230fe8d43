// Server and coordinator failover under `osprey launch` (issue 12, items 1 and 3), through the
// real binaries: the launcher's supervisor restarts a server killed with SIGKILL with its rank
// and `--restore CHECKPOINT_DIR` (the coordinator takes the new incarnation as the rank's
// replacement, workers re-send what it left unanswered), and a killed coordinator with the same
// endpoint and `--recover` (the nodes ride out the outage and re-register). In both the job
// completes and trains a model as good as an undisturbed one. Waits are on conditions only.
#include <filesystem>

#include "tests/coordinator/launched_job.h"

namespace osprey::tools {
namespace {

using namespace testing;  // NOLINT: the process helpers and the LaunchedJob fixture

class LaunchFailover : public LaunchedJob {
 protected:
  // The launcher's restart line for `slot` (whose first process had `pid`), exit 0, AUC.
  void ExpectRestartedAndCompleted(const std::string& slot, pid_t pid) {
    std::optional<int> status = WaitExit(p_.pid, std::chrono::seconds(300));
    ASSERT_TRUE(status.has_value()) << "timed out\n" << ReadFile(p_.err_path);
    ASSERT_TRUE(WIFEXITED(*status));
    ASSERT_EQ(WEXITSTATUS(*status), 0) << ReadFile(p_.err_path);
    const std::string err = ReadFile(p_.err_path);
    EXPECT_NE(err.find(slot + " (pid " + std::to_string(pid) + ") was killed by signal 9 (Killed); restart 1 of 3"),
              std::string::npos) << err;
    const std::string report = ReadFile(dir_ + "/report.json");
    EXPECT_GT(JsonNumber(report, "auc"), 0.72) << report;
  }
};

TEST_F(LaunchFailover, KilledServerIsRestartedFromItsCheckpointAndTheJobCompletes) {
  const std::string ckpt = tmp_.path() + "/ckpt";
  Launch("local.yaml", {"--set", "checkpoint.dir=" + ckpt, "--set", "checkpoint.every_steps=100"});
  ASSERT_TRUE(WaitUntil([&] {
    return std::filesystem::exists(ckpt + "/server-0-of-1.ckpt") || LauncherFailed();
  }, Ms(120000)) && !LauncherFailed()) << ReadFile(p_.err_path);
  ASSERT_TRUE(WaitForClock(1, kKillAt, Ms(120000))) << ReadFile(p_.err_path);
  const pid_t pid = PidOf("server-0");
  ASSERT_GT(pid, 0);
  ASSERT_EQ(::kill(pid, SIGKILL), 0);
  ExpectRestartedAndCompleted("server-0", pid);
  EXPECT_GE(JsonNumber(ReadFile(dir_ + "/report.json"), "server_replacements"), 1.0)
      << ReadFile(dir_ + "/report.json");
}

TEST_F(LaunchFailover, KilledCoordinatorIsRestartedWithRecoverAndTheJobCompletes) {
  Launch("local.yaml", {});
  ASSERT_TRUE(WaitForClock(1, kKillAt, Ms(120000))) << ReadFile(p_.err_path);
  const pid_t pid = PidOf("coordinator-0");
  ASSERT_GT(pid, 0);
  ASSERT_EQ(::kill(pid, SIGKILL), 0);
  // The restarted coordinator answers on the same endpoint and learns the workers back.
  ASSERT_TRUE(WaitUntil([&] {
    auto n = Worker(1);
    return (n && n->alive() && n->clock() > kKillAt) || LauncherFailed();
  }, Ms(60000)) && !LauncherFailed()) << ReadFile(p_.err_path);
  ExpectRestartedAndCompleted("coordinator-0", pid);
  const std::string log = ReadFile(logs_ + "/coordinator-0.restart-1.log");
  EXPECT_EQ(log.find("marked dead"), std::string::npos) << "no node dies of the coordinator's outage\n" << log;
}

}  // namespace
}  // namespace osprey::tools
