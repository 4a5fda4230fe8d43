// Worker failover through the real binaries (issue 12, item 2): `osprey launch` with real
// coordinator, server and worker processes; a worker is killed with SIGKILL mid-run; the
// launcher restarts it with its rank, the coordinator lets it rejoin, and it resumes at the step
// its rank had reached, exactly where the servers are: every push of every step is taken once
// (worker/resume_plan.h). Every wait is on a condition (a clock in the coordinator's state, a log
// line, the launcher's exit), never a fixed sleep.
#include "tests/coordinator/launched_job.h"

namespace osprey::tools {
namespace {

using namespace testing;  // NOLINT: the process helpers and the LaunchedJob fixture

class WorkerFailover : public LaunchedJob {};

class KilledWorkerResumes : public WorkerFailover, public ::testing::WithParamInterface<const char*> {};

TEST_P(KilledWorkerResumes, JobCompletesAndTheRestartResumesAtItsStep) {
  // Heartbeats 1 s apart and the kill at worker 0's next heartbeat: worker 1 dies with steps (and
  // pushes) its last heartbeat never reported, which the restart must neither apply twice nor skip.
  Launch(std::string(GetParam()) + ".yaml", {"--set", "cluster.heartbeat_interval_ms=1000"});
  const int64_t heard = KillWorker1(/*past=*/15);
  ExpectResumed(heard);
  ExpectJobCompleted();
  ExpectEachPushTakenOnce();
  if (std::string(GetParam()) == "bsp") ExpectOneWindowPerClock();
}

INSTANTIATE_TEST_SUITE_P(Modes, KilledWorkerResumes, ::testing::Values("async", "ssp", "bsp"));

// bsp: worker 1 is frozen (SIGSTOP) until the coordinator marks it dead and the bsp windows go on
// without it (worker 0 advances), then killed; its restart rejoins a dead rank and
// the servers count it again (the job still completes, every rank reaching train.steps).
TEST_F(WorkerFailover, DeadWorkerRejoinsInBsp) {
  // Short enough to keep the test short, long enough for a loaded 2-core machine.
  Launch("bsp.yaml", {"--set", "cluster.heartbeat_timeout_ms=5000"});
  ASSERT_TRUE(WaitForClock(1, kKillAt, Ms(120000))) << ReadFile(p_.err_path);
  const pid_t pid = PidOf("worker-1");
  ASSERT_EQ(::kill(pid, SIGSTOP), 0);
  ASSERT_TRUE(WaitUntil([&] {
    auto n = Worker(1);
    return (n && !n->alive()) || LauncherFailed();
  }, Ms(30000)) && !LauncherFailed()) << "worker 1 never marked dead\n" << ReadFile(p_.err_path);
  const int64_t heard = Worker(1)->clock();
  const int64_t w0 = Worker(0)->clock();
  ASSERT_TRUE(WaitForClock(0, w0 + 20, Ms(30000))) << "bsp did not go on without the dead worker";
  ASSERT_EQ(::kill(pid, SIGKILL), 0);
  killed_at_ = Clock::now();
  ExpectResumed(heard);
  // The restart resumes where the servers are (OP_APPLIED_CLOCKS), which may be past the clock
  // last heard: the steps it made between its last heartbeat and the freeze (CI saw 301 after
  // 300 heard). In bsp it was never more than a step ahead of worker 0 (a step's pulls wait for
  // the previous window, which needs worker 0's push); each push taken once is checked below.
  EXPECT_LE(ResumedAt(), w0 + 2) << "resumed past where bsp could have let the frozen worker go";
  ASSERT_TRUE(WaitUntil([&] {
    auto n = Worker(1);
    return !n || (n->alive() && n->rejoins() == 1);
  }, Ms(30000)));
  ExpectJobCompleted();
  ExpectOneWindowPerClock();
  ExpectEachPushTakenOnce();  // the clocks it missed while dead join later windows, once each
  EXPECT_NE(ReadFile(logs_ + "/coordinator-0.log").find("takes over from pid " + std::to_string(pid) + " (marked dead)"),
            std::string::npos);
}

TEST_F(WorkerFailover, MaxRestartsZeroFailsTheJobNamingTheProcess) {
  Launch("local.yaml", {"--max-restarts", "0"});
  KillWorker1();
  const pid_t pid = PidOf("worker-1");
  std::optional<int> status = WaitExit(p_.pid, std::chrono::seconds(60));
  ASSERT_TRUE(status.has_value());
  ASSERT_TRUE(WIFEXITED(*status));
  EXPECT_EQ(WEXITSTATUS(*status), 1);
  const std::string err = ReadFile(p_.err_path);
  EXPECT_NE(err.find("FAILED: worker-1 (pid " + std::to_string(pid) +
                     ") was killed by signal 9 (Killed); not restarted: restarted 0 times "
                     "(--max-restarts 0), restarts are off"),
            std::string::npos) << err;
  EXPECT_TRUE(AllGone(PidsOf(ReadPids(logs_)), Ms(5000)));
}

}  // namespace
}  // namespace osprey::tools
