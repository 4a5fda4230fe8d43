// RestartPolicy (tools/restart_policy.h): `osprey launch`'s restart rules, driven with a fake
// clock and made-up exits (no processes).
#include "tools/restart_policy.h"

#include <gtest/gtest.h>

namespace osprey::tools {
namespace {

using Ms = std::chrono::milliseconds;
using Clock = RestartPolicy::Clock;

ExitInfo Killed(int sig) {
  ExitInfo e;
  e.signal = sig;
  return e;
}
ExitInfo Exited(int code) {
  ExitInfo e;
  e.exited = true;
  e.code = code;
  return e;
}

TEST(RestartPolicyTest, RestartsEachSlotUpToTheLimitFirstAtOnceThenBackingOff) {
  RestartPolicy p(RestartOptions{3, Ms(500), Ms(800)});
  const Clock::time_point t0 = Clock::now();
  RestartDecision d = p.OnExit("worker-1", 42, Killed(9), JobPhase::kRunning, false, t0);
  ASSERT_EQ(d.action, RestartDecision::kRestart);
  EXPECT_EQ(d.restart, 1);
  EXPECT_EQ(d.at, t0) << "the first restart is immediate";
  EXPECT_EQ(d.line, "worker-1 (pid 42) was killed by signal 9 (Killed); restart 1 of 3");

  d = p.OnExit("worker-1", 43, Exited(1), JobPhase::kRunning, false, t0);
  ASSERT_EQ(d.action, RestartDecision::kRestart);
  EXPECT_EQ(d.at, t0 + Ms(500));
  EXPECT_NE(d.line.find("restart 2 of 3 in 500 ms"), std::string::npos) << d.line;
  d = p.OnExit("worker-1", 44, Killed(9), JobPhase::kRunning, false, t0);
  ASSERT_EQ(d.action, RestartDecision::kRestart);
  EXPECT_EQ(d.at, t0 + Ms(800)) << "capped at max_backoff";

  // Another slot has its own count.
  EXPECT_EQ(p.OnExit("worker-0", 50, Killed(9), JobPhase::kRunning, false, t0).action,
            RestartDecision::kRestart);
  EXPECT_EQ(p.restarts("worker-0"), 1);

  d = p.OnExit("worker-1", 45, Killed(9), JobPhase::kRunning, false, t0);
  ASSERT_EQ(d.action, RestartDecision::kFail);
  EXPECT_EQ(d.line, "worker-1 (pid 45) was killed by signal 9 (Killed); not restarted: restarted 3 "
                    "times (--max-restarts 3), none left");
  EXPECT_EQ(p.restarts("worker-1"), 3);
}

TEST(RestartPolicyTest, ZeroTurnsRestartsOff) {
  RestartPolicy p(RestartOptions{0});
  RestartDecision d = p.OnExit("worker-0", 7, Killed(9), JobPhase::kRunning, false, Clock::now());
  ASSERT_EQ(d.action, RestartDecision::kFail);
  EXPECT_EQ(d.line, "worker-0 (pid 7) was killed by signal 9 (Killed); not restarted: restarted 0 "
                    "times (--max-restarts 0), restarts are off");
}

TEST(RestartPolicyTest, ConfigErrorsShutdownAndVerdictsAreNotRestartedAndDoneIsIgnored) {
  RestartPolicy p(RestartOptions{3});
  const Clock::time_point t0 = Clock::now();
  RestartDecision d = p.OnExit("server-0", 1, Exited(2), JobPhase::kRunning, false, t0);
  EXPECT_EQ(d.action, RestartDecision::kFail);
  EXPECT_NE(d.line.find("usage or config error"), std::string::npos) << d.line;

  d = p.OnExit("worker-1", 2, Killed(9), JobPhase::kShuttingDown, false, t0);
  EXPECT_EQ(d.action, RestartDecision::kFail);
  EXPECT_NE(d.line.find("while the job was shutting down"), std::string::npos) << d.line;

  // The coordinator: an exit status is its verdict; a crash is restarted.
  d = p.OnExit("coordinator-0", 3, Exited(1), JobPhase::kRunning, true, t0);
  EXPECT_EQ(d.action, RestartDecision::kFail);
  EXPECT_NE(d.line.find("verdict"), std::string::npos) << d.line;
  EXPECT_EQ(p.OnExit("coordinator-0", 3, Killed(9), JobPhase::kRunning, true, t0).action,
            RestartDecision::kRestart);

  d = p.OnExit("worker-0", 4, Exited(1), JobPhase::kDone, false, t0);
  EXPECT_EQ(d.action, RestartDecision::kIgnore);
  EXPECT_EQ(p.restarts("worker-0"), 0);
  EXPECT_EQ(p.restarts("server-0") + p.restarts("worker-1"), 0) << "refusals use no restart";
}

}  // namespace
}  // namespace osprey::tools
