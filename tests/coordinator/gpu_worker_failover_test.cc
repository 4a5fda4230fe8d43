// GPU worker failover through the real binaries (issue 12, item 2, for `worker.device: cuda`):
// `osprey launch` runs the bsp job with two GPU workers (sharing the machine's GPUs, no NCCL
// host group with one device); worker 1 is killed with SIGKILL mid-run, the launcher restarts
// it with its rank and the GPU loop resumes at the step the servers' applied clocks say
// (GpuTrainer::ResumeAt): the job completes, bsp keeps one window per clock and each step's
// pushes are taken once. Skips where no GPU is visible (or the build has no CUDA), like
// gpu_worker_test. Every wait is on a condition (a clock, a log line, the launcher's exit).
#include "tests/coordinator/launched_job.h"

namespace osprey::tools {
namespace {

using namespace testing;  // NOLINT: the process helpers and the LaunchedJob fixture

class GpuWorkerFailover : public LaunchedJob {
 protected:
  // The worker's log, or the launcher's stderr (which quotes a failed child's last lines: the
  // launcher may fail on worker 0's exit before the log is read here), names a missing GPU.
  bool NoGpu() {
    for (const std::string& path : {logs_ + "/worker-0.log", logs_ + "/worker-1.log", p_.err_path}) {
      const std::string text = ReadFile(path);
      if (text.find("no CUDA device is visible") != std::string::npos ||
          text.find("built without CUDA") != std::string::npos) {
        return true;
      }
    }
    return false;
  }
};

TEST_F(GpuWorkerFailover, KilledGpuWorkerResumesAtItsStepInBsp) {
  Launch("bsp.yaml", {"--set", "worker.device=cuda"});
  bool no_gpu = false;
  ASSERT_TRUE(WaitUntil([&] {
    no_gpu = NoGpu();
    auto n = Worker(1);
    return no_gpu || LauncherFailed() || (n && n->clock() >= kKillAt);
  }, Ms(120000))) << ReadFile(p_.err_path);
  no_gpu = no_gpu || NoGpu();  // the launcher may have failed first, the reason read just after
  if (no_gpu) {
    ::kill(p_.pid, SIGTERM);
    (void)WaitExit(p_.pid, std::chrono::seconds(60));
    GTEST_SKIP() << "no usable GPU here";
  }
  ASSERT_FALSE(LauncherFailed()) << ReadFile(p_.err_path);
  EXPECT_NE(ReadFile(logs_ + "/worker-1.log").find("training on cuda:"), std::string::npos)
      << "worker 1 is not a GPU worker";
  const int64_t heard = KillWorker1();
  ExpectResumed(heard);
  ExpectJobCompleted();
  ExpectOneWindowPerClock();
  ExpectEachPushTakenOnce();
}

}  // namespace
}  // namespace osprey::tools
