// The launcher's supervision (tools/supervisor.h) through the real `osprey launch` with stand-in
// binaries: small shell scripts named osprey-coordinator / osprey-server / osprey-worker that
// record their arguments and die the first time (a test seam for the launcher's process
// management: the real coordinator's --recover and the real replacement server belong to other
// parts of issue 12). Checks the restart specs: a server restarted with --rank R --restore DIR,
// the coordinator (killed by a signal) with --recover on the same endpoint, and that every
// restart is one line on stderr and a line in pids.txt.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/stat.h>

#include <fstream>
#include <string>

#include "tests/coordinator/process_test_util.h"
#include "tests/testing/wait.h"

namespace osprey::tools {
namespace {

using namespace testing;  // NOLINT: the process helpers
using osprey::testing::WaitUntil;
using Ms = std::chrono::milliseconds;

const std::string kBinDir = EnvOr("OSPREY_BIN_DIR", "");
const std::string kLocalConfig = EnvOr("OSPREY_SOURCE_DIR", ".") + "/configs/local.yaml";

void WriteScript(const std::string& path, const std::string& body) {
  std::ofstream(path) << "#!/bin/sh\n" << body;
  ::chmod(path.c_str(), 0755);
}

TEST(SupervisorTest, RestartsServerWithRankAndRestoreAndCoordinatorWithRecover) {
  TempDir tmp;
  const std::string dir = tmp.path(), bin = dir + "/bin", logs = dir + "/logs", args = dir + "/args.txt";
  ::mkdir(bin.c_str(), 0755);
  // First run: the coordinator is killed by SIGKILL, the server exits 1; later runs wait.
  auto stand_in = [&](const std::string& role, const std::string& die) {
    WriteScript(bin + "/osprey-" + role, "echo \"" + role + " $*\" | tee -a " + args + "\n" +
                                             // where it \"listens\", as the real one says once bound
                                             "prev=; for a in \"$@\"; do [ \"$prev\" = --endpoint-file ] && "
                                             "echo tcp://127.0.0.1:1 > \"$a\"; prev=$a; done\n" +
                                             "if [ ! -f " + dir + "/" + role + ".once ]; then touch " +
                                             dir + "/" + role + ".once; " + die + "; fi\n" +
                                             "exec sleep 300\n");
  };
  stand_in("coordinator", "kill -9 $$");
  stand_in("server", "exit 1");
  stand_in("worker", "true");
  Proc p = Spawn({kBinDir + "/osprey", "launch", kLocalConfig, "--set", "cluster.servers=1", "--set",
                  "cluster.workers=1", "--set", "checkpoint.dir=" + dir + "/ckpt", "--bin-dir", bin,
                  "--log-dir", logs},
                 dir);
  auto count = [&](const std::string& what) {
    const std::string text = ReadFile(args);
    size_t n = 0;
    for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
    return n;
  };
  // The launcher logs a restart after spawning it: the stand-in may record its start first.
  ASSERT_TRUE(WaitUntil([&] {
    return count("coordinator ") == 2 && count("server ") == 2 &&
           ReadFile(p.err_path).find("server-0 restarted as pid ") != std::string::npos &&
           ReadFile(p.err_path).find("coordinator-0 restarted as pid ") != std::string::npos;
  }, Ms(20000))) << ReadFile(args) << ReadFile(p.err_path);
  const std::string recorded = ReadFile(args);
  const std::string err = ReadFile(p.err_path);
  ::kill(p.pid, SIGTERM);
  std::optional<int> status = WaitExit(p.pid, std::chrono::seconds(20));
  ASSERT_TRUE(status.has_value());

  EXPECT_NE(recorded.find("worker --config"), std::string::npos) << recorded;
  EXPECT_NE(recorded.find("--rank 0"), std::string::npos) << "servers and workers start with their rank\n" << recorded;
  EXPECT_NE(recorded.find("--rank 0 --restore " + dir + "/ckpt"), std::string::npos) << recorded;
  EXPECT_NE(recorded.find("--recover --listen tcp://127.0.0.1:1"), std::string::npos)
      << "the coordinator restarts on the endpoint it bound\n" << recorded;
  EXPECT_NE(err.find("coordinator-0 (pid "), std::string::npos) << err;
  EXPECT_NE(err.find(") was killed by signal 9 (Killed); restart 1 of 3"), std::string::npos) << err;
  EXPECT_NE(err.find(") exited with status 1; restart 1 of 3"), std::string::npos) << err;
  EXPECT_NE(err.find("server-0 restarted as pid "), std::string::npos) << err;
  bool listed = false;
  for (const auto& [name, pid] : ReadPids(logs)) listed = listed || name == "server-0.restart-1";
  EXPECT_TRUE(listed) << ReadFile(logs + "/pids.txt");
  EXPECT_NE(ReadFile(logs + "/server-0.restart-1.log").find("server "), std::string::npos);
}

}  // namespace
}  // namespace osprey::tools
