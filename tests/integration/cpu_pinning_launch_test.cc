// cluster.server_cpus / cluster.worker_cpus through the real binaries (`osprey launch`): every
// server and worker runs on its role's CPUs (each logs the set it reads back after pinning), and
// a CPU the machine lacks fails the job with the key named. cluster.server_apply_threads: a
// server spreads its large merged windows over its apply threads (it counts them at stop).
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <cstdlib>
#include <string>

#include "common/cpu_affinity.h"
#include "tests/testing/launch_util.h"

namespace {

using osprey::testing::BinDir;
using osprey::testing::ReadFile;
using osprey::testing::SourceDir;

int Launch(const std::string& name, const std::string& sets, std::string* logs) {
  *logs = ::testing::TempDir() + "/osprey-pin-" + name;
  const std::string cmd = BinDir() + "/osprey launch " + SourceDir() + "/configs/local.yaml --quiet" +
                          " --set train.steps=200 --set train.eval_samples=2000" + sets + " --log-dir " + *logs +
                          " > " + *logs + ".out 2>&1";
  const int rc = std::system(cmd.c_str());
  return WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
}

TEST(CpuPinningLaunchTest, ServersAndWorkersRunOnTheirRolesCpus) {
  const std::vector<int> cpus = osprey::AllowedCpus();
  ASSERT_FALSE(cpus.empty());
  // Servers on the first CPU this test may use, workers on the last (the same one on a 1-CPU box).
  const std::string server = std::to_string(cpus.front()), worker = std::to_string(cpus.back());
  std::string logs;
  ASSERT_EQ(Launch("ok", " --set cluster.server_cpus=" + server + " --set cluster.worker_cpus=" + worker, &logs), 0)
      << ReadFile(logs + ".out");
  for (const std::string file : {"server-0.log", "server-1.log"}) {
    EXPECT_NE(ReadFile(logs + "/" + file).find("runs on CPUs " + server + "\n"), std::string::npos)
        << file << ":\n" << ReadFile(logs + "/" + file);
  }
  for (const std::string file : {"worker-0.log", "worker-1.log"}) {
    EXPECT_NE(ReadFile(logs + "/" + file).find("runs on CPUs " + worker + "\n"), std::string::npos)
        << file << ":\n" << ReadFile(logs + "/" + file);
  }
}

TEST(CpuPinningLaunchTest, ACpuTheMachineLacksFailsTheJobNamingTheKey) {
  std::string logs;
  EXPECT_NE(Launch("bad", " --set cluster.server_cpus=1023", &logs), 0);
  const std::string all = ReadFile(logs + ".out") + ReadFile(logs + "/server-0.log");
  EXPECT_NE(all.find("cluster.server_cpus: FailedPrecondition: CPU 1023 not on this machine"), std::string::npos)
      << all;
}

TEST(CpuPinningLaunchTest, ServersSpreadLargeWindowsOverTheirApplyThreads) {
  // One server merging two pushes of 8192 x 26 keys a window, so a window holds tens of
  // thousands of rows: above the 16k rows of 16 floats a thread starts at.
  std::string logs;
  ASSERT_EQ(Launch("apply", " --set cluster.servers=1 --set train.batch_size=8192 --set train.steps=12"
                            " --set tables.embeddings.consistency.merge_max_pushes=2"
                            " --set cluster.server_apply_threads=2",
                   &logs), 0)
      << ReadFile(logs + ".out");
  const std::string log = ReadFile(logs + "/server-0.log");
  const std::string tail = " optimizer steps spread over 2 apply threads";
  const size_t at = log.find(tail);
  ASSERT_NE(at, std::string::npos) << log;
  const size_t begin = log.rfind(' ', at - 1) + 1;
  const long split = std::strtol(log.substr(begin, at - begin).c_str(), nullptr, 10);
  EXPECT_GE(split, 6) << log;  // 2 workers x 12 steps: 12 sparse windows, most of them split
  EXPECT_NE(ReadFile(logs + ".out").find("AUC"), std::string::npos) << ReadFile(logs + ".out");
}

}  // namespace
