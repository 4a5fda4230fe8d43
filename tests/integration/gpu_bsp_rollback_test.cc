// bsp rollback with GPU workers (issue 12; the CPU case is bsp_rollback_process_test): the test
// starts osprey-coordinator, two osprey-server and two osprey-worker processes (worker.device
// cuda, sharing the machine's GPUs) itself, kills server 1 with SIGKILL mid-run and starts
// `osprey-server --rank 1 --restore CKPT` right away. Server 0 rolls back to the same cut, both
// GPU loops rewind to its clock (GpuTrainer::Rewind) and the job completes; the held-out AUC is
// that of an undisturbed run of the same job in the same test. Not bit for bit: the GPU sums row
// gradients with atomics, so two GPU runs differ in the last bits anyway. Skips where no GPU is
// visible (or the build has no CUDA).
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>

#include <chrono>
#include <regex>
#include <string>
#include <thread>
#include <vector>

#include "tests/testing/process_job.h"
#include "tests/testing/test_env.h"

namespace {

using osprey::testing::Child;
using osprey::testing::ProcessJob;
using osprey::testing::ReadFile;

constexpr int kSteps = 3000;

std::vector<std::string> Sets() {
  return {"train.steps=" + std::to_string(kSteps), "train.eval_samples=20000", "worker.device=cuda",
          "cluster.heartbeat_interval_ms=50", "cluster.heartbeat_timeout_ms=2000",
          "cluster.server_replace_timeout_ms=20000", "checkpoint.every_steps=100", "log.level=info"};
}

bool NoGpu(const ProcessJob& job) {
  for (const char* w : {"worker-0", "worker-1"}) {
    const std::string log = ReadFile(job.log(w));
    if (log.find("no CUDA device is visible") != std::string::npos ||
        log.find("built without CUDA") != std::string::npos) {
      return true;
    }
  }
  return false;
}

// The held-out AUC a worker's log reports, or -1.
double Auc(const std::string& log) {
  static const std::regex re(R"(held-out: AUC ([0-9.]+))");
  std::string text = ReadFile(log);
  std::smatch m;
  return std::regex_search(text, m, re) ? std::stod(m[1]) : -1;
}

bool ExitedZero(const Child& c) { return c.reaped && WIFEXITED(c.status) && WEXITSTATUS(c.status) == 0; }

TEST(GpuBspRollbackTest, ServerKillRewindsTheGpuWorkersAndTheJobCompletes) {
  double base_auc = -1;
  {
    ProcessJob job("bsp.yaml", Sets(), ::testing::TempDir() + "/osprey-gpu-rollback-base");
    job.Start();
    // A worker without a GPU exits at once (WaitFor then returns false) saying why.
    const bool started = job.WaitFor([&] { return NoGpu(job) || job.Step(0) >= 1; }, 120);
    if (NoGpu(job)) GTEST_SKIP() << "no usable GPU here";  // ~ProcessJob kills the rest
    ASSERT_TRUE(started) << job.Logs();
    ASSERT_TRUE(job.WaitAll(300)) << job.Logs();
    for (auto& c : job.children()) ASSERT_TRUE(ExitedZero(c)) << c.name << job.Logs();
    base_auc = Auc(job.log("worker-0"));
  }
  ASSERT_GT(base_auc, 0.7);

  ProcessJob job("bsp.yaml", Sets(), ::testing::TempDir() + "/osprey-gpu-rollback-kill");
  job.Start();
  ASSERT_TRUE(job.WaitFor([&] { return job.Step(0) >= 700; }, 120)) << job.Logs();
  const ProcessJob::Rewound r = job.KillServer1AndAwaitRewind(60);
  ASSERT_GE(r.cut, 0) << "the GPU workers did not rewind\n" << job.Logs();
  const double rewind_s = r.seconds;
  const long killed_step = r.killed_step, from = r.from, cut = r.cut;
  EXPECT_EQ(cut % 100, 0) << "a cut clock is a multiple of checkpoint.every_steps";
  EXPECT_LE(cut, killed_step);
  std::printf("killed at step %ld; cut clock %ld, %ld clocks redone; kill -> both GPU workers rewound %.2f s\n",
              killed_step, cut, from - cut, rewind_s);
  ASSERT_TRUE(job.WaitAll(300)) << job.Logs();
  for (auto& c : job.children()) {
    if (c.name != "server-1") {
      EXPECT_TRUE(ExitedZero(c)) << c.name << job.Logs();
    }
  }
  const std::string w0 = ReadFile(job.log("worker-0"));
  EXPECT_NE(w0.find("worker 0 trained " + std::to_string(kSteps) + " steps"), std::string::npos) << w0;
  EXPECT_NE(ReadFile(job.log("server-0")).find("rolled back to bsp clock " + std::to_string(cut)), std::string::npos);
  const double auc = Auc(job.log("worker-0"));
  std::printf("AUC %.4f, undisturbed %.4f\n", auc, base_auc);
  EXPECT_NEAR(auc, base_auc, 0.003);
}

}  // namespace
