// bsp rollback with real processes (issue 12, "in bsp the job rolls every server back to the last
// consistent cut and the workers rewind to that clock, so bsp stays exactly bsp"): the test
// starts osprey-coordinator, two osprey-server and two osprey-worker processes itself (native
// store, bsp, a cut every 10 clocks), kills server 1 with SIGKILL at a random step and starts
// `osprey-server --rank 1 --restore CKPT` right away. Server 0 must roll back to its file of the
// same cut, both workers must rewind to its clock, and at the end every server's rows digest
// (count and checksum of every record: weights and optimizer state) must equal, bit for bit, an
// undisturbed run of the same job in the same test. Two workers: a bsp window sums two
// gradients, and a + b == b + a in IEEE arithmetic, so the arrival order changes nothing (with
// three or more workers it would: the window sums in arrival order).
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <random>
#include <regex>
#include <string>
#include <thread>
#include <vector>

#include "tests/testing/process_job.h"
#include "tests/testing/test_env.h"

namespace {

using Clock = std::chrono::steady_clock;
using osprey::testing::Child;
using osprey::testing::ProcessJob;
using osprey::testing::ReadFile;

constexpr int kSteps = 200;

std::vector<std::string> Sets() {
  return {"train.steps=" + std::to_string(kSteps), "train.eval_samples=4000",
          "cluster.heartbeat_interval_ms=50", "cluster.heartbeat_timeout_ms=2000",
          "cluster.server_replace_timeout_ms=20000", "checkpoint.every_steps=10", "log.level=info"};
}

// "server R rows digest: N rows, M records, checksum X" of a server's log ("" when missing).
std::string Digest(const std::string& log) {
  static const std::regex re(R"(rows digest: (\d+ rows, \d+ records, checksum [0-9a-f]+))");
  std::string text = ReadFile(log);
  std::smatch m;
  return std::regex_search(text, m, re) ? m[1].str() : "";
}

std::string Describe(const Child& c) {
  if (!c.reaped) return c.name + " still running";
  if (WIFEXITED(c.status)) return c.name + " exited " + std::to_string(WEXITSTATUS(c.status));
  if (WIFSIGNALED(c.status)) return c.name + " killed by signal " + std::to_string(WTERMSIG(c.status));
  return c.name + " ?";
}

void ExpectAllExitedZero(ProcessJob& job, const std::string& except) {
  for (auto& c : job.children()) {
    if (c.name == except) continue;
    EXPECT_TRUE(c.reaped && WIFEXITED(c.status) && WEXITSTATUS(c.status) == 0) << Describe(c) << job.Logs();
  }
}

TEST(BspRollbackProcessTest, ServerKillEndsWithTheUndisturbedRowsBitForBit) {
  const std::string base_dir = ::testing::TempDir() + "/osprey-bsp-rollback-base";
  std::string base0, base1;
  {
    ProcessJob job("bsp.yaml", Sets(), base_dir);
    job.Start();
    ASSERT_TRUE(job.WaitAll(180)) << job.Logs();
    ExpectAllExitedZero(job, "");
    base0 = Digest(job.log("server-0"));
    base1 = Digest(job.log("server-1"));
  }
  ASSERT_FALSE(base0.empty());
  ASSERT_FALSE(base1.empty());

  ProcessJob job("bsp.yaml", Sets(), ::testing::TempDir() + "/osprey-bsp-rollback-kill");
  job.Start();
  const unsigned seed = static_cast<unsigned>(Clock::now().time_since_epoch().count());
  std::mt19937 rng(seed);
  const long at = 55 + static_cast<long>(rng() % 80);  // in [55, 135): cuts at 10..50 exist
  std::printf("seed %u: killing server 1 at worker-0 step %ld\n", seed, at);
  ASSERT_TRUE(job.WaitFor([&] { return job.Step(0) >= at; }, 120)) << job.Logs();
  const auto killed_at = Clock::now();
  // Both workers rewind (their log says so), then train on.
  const ProcessJob::Rewound r = job.KillServer1AndAwaitRewind(60);
  ASSERT_GE(r.cut, 0) << "the workers did not rewind\n" << job.Logs();
  const double rewind_s = r.seconds;
  const long killed_step = r.killed_step, from = r.from, cut = r.cut;
  EXPECT_EQ(cut % 10, 0) << "a cut clock is a multiple of checkpoint.every_steps";
  EXPECT_LE(cut, killed_step);
  ASSERT_TRUE(job.WaitFor([&] { return job.Step(0) >= from + 5; }, 60))
      << "training did not resume after the rewind\n" << job.Logs();
  const double resumed_s = std::chrono::duration<double>(Clock::now() - killed_at).count();
  std::printf("killed at step %ld; cut clock %ld, %ld clocks redone; kill -> both workers rewound "
              "%.2f s, -> 5 steps past the kill point %.2f s\n",
              killed_step, cut, from - cut, rewind_s, resumed_s);
  ASSERT_TRUE(job.WaitAll(180)) << job.Logs();
  ExpectAllExitedZero(job, "server-1");
  const std::string s0 = ReadFile(job.log("server-0"));
  EXPECT_NE(s0.find("rolled back to bsp clock " + std::to_string(cut)), std::string::npos) << s0;
  const std::string r1 = ReadFile(job.log("server-1-r1"));
  EXPECT_NE(r1.find("restored bsp cut clock " + std::to_string(cut)), std::string::npos) << r1;
  EXPECT_EQ(Digest(job.log("server-0")), base0) << "server 0's rows differ from the undisturbed run";
  EXPECT_EQ(Digest(job.log("server-1-r1")), base1) << "server 1's rows differ from the undisturbed run";
}

}  // namespace
