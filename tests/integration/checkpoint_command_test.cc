// `osprey checkpoint` against a running job: a real `osprey launch` in the background, the command
// asks its coordinator for the servers and each writes its checkpoint file.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>
#include <string>
#include <thread>

#include "tests/testing/launch_util.h"

namespace {

using osprey::testing::BinDir;
using osprey::testing::ReadFile;
using osprey::testing::SourceDir;

// Runs `osprey launch CONFIG` in the background, `osprey checkpoint` against it into BASE/ckpt,
// stops the job; the checkpoint command's output is in BASE/ckpt.out, the job's logs in BASE/logs.
void CheckpointRunningJob(const std::string& config, const std::string& base,
                          bool curve = false) {
  namespace fs = std::filesystem;
  const std::string bin = BinDir();
  const std::string src = SourceDir();
  fs::remove_all(base);
  fs::create_directories(base);
  const std::string out = base + "/launch.out";
  pid_t launcher = fork();
  ASSERT_GE(launcher, 0);
  if (launcher == 0) {
    std::freopen(out.c_str(), "w", stderr);
    std::freopen(out.c_str(), "a", stdout);
    execl((bin + "/osprey").c_str(), "osprey", "launch", (src + "/configs/" + config).c_str(),
          "--quiet", "--set", "train.steps=1000000", "--log-dir", (base + "/logs").c_str(),
          // A request may name only the job's checkpoint.dir (or beneath it).
          "--set", ("checkpoint.dir=" + base + "/ckpt").c_str(),
          static_cast<char*>(nullptr));
    _exit(127);
  }
  // The launcher prints the coordinator endpoint first; servers register within seconds.
  std::string endpoint;
  std::regex re("coordinator (tcp://[0-9.]+:[0-9]+)");
  for (int i = 0; i < 200 && endpoint.empty(); ++i) {
    std::smatch m;
    std::string text = ReadFile(out);
    if (std::regex_search(text, m, re)) endpoint = m[1];
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  int rc = -1;
  if (!endpoint.empty()) {
    // Retry while the job is still starting (no servers registered yet).
    for (int i = 0; i < 30 && rc != 0; ++i) {
      std::string cmd = bin + "/osprey checkpoint --coordinator " + endpoint + " --dir " + base +
                        "/ckpt" + (curve ? " --keys " + base + "/logs/keys" : std::string()) +
                        " >> " + base + "/ckpt.out 2>&1";
      int status = std::system(cmd.c_str());
      rc = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
      if (rc != 0) std::this_thread::sleep_for(std::chrono::milliseconds(500));
    }
  }
  kill(launcher, SIGINT);
  int status = 0;
  for (int i = 0; i < 100 && waitpid(launcher, &status, WNOHANG) == 0; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  if (waitpid(launcher, &status, WNOHANG) == 0) {
    kill(launcher, SIGKILL);
    waitpid(launcher, &status, 0);
  }
  ASSERT_FALSE(endpoint.empty()) << ReadFile(out);
  ASSERT_EQ(rc, 0) << ReadFile(base + "/ckpt.out");
}

TEST(CheckpointCommandTest, WritesOneFilePerServerOfARunningJob) {
  namespace fs = std::filesystem;
  const std::string base = ::testing::TempDir() + "/osprey-ckpt-cmd-" + std::to_string(getpid());
  CheckpointRunningJob("local.yaml", base);
  if (HasFatalFailure()) return;
  for (const char* f : {"/ckpt/server-0-of-2.ckpt", "/ckpt/server-1-of-2.ckpt"}) {
    ASSERT_TRUE(fs::exists(base + f)) << f;
    EXPECT_GT(fs::file_size(base + f), 1000u) << f;
  }
  EXPECT_NE(ReadFile(base + "/ckpt.out").find("server 1"), std::string::npos);
}

// security: curve: the command connects with the admin keys the launcher generated.
TEST(CheckpointCommandTest, CurveJobWithTheAdminKeys) {
  namespace fs = std::filesystem;
  const std::string base = ::testing::TempDir() + "/osprey-ckpt-curve-" + std::to_string(getpid());
  CheckpointRunningJob("local-curve.yaml", base, /*curve=*/true);
  if (HasFatalFailure()) return;
  for (const char* f : {"/ckpt/server-0-of-2.ckpt", "/ckpt/server-1-of-2.ckpt"}) {
    EXPECT_TRUE(fs::exists(base + f)) << f;
  }
}

// bsp: the command picks one clock and every server saves right after closing it.
TEST(CheckpointCommandTest, BspJobGetsACutAtOneClockOnEveryServer) {
  namespace fs = std::filesystem;
  const std::string base = ::testing::TempDir() + "/osprey-ckpt-bsp-" + std::to_string(getpid());
  CheckpointRunningJob("bsp.yaml", base);
  if (HasFatalFailure()) return;
  const std::string text = ReadFile(base + "/ckpt.out");
  std::regex said(R"(server (\d) \(.*\): checkpoint written \(bsp cut at clock (\d+)\))");
  std::regex logged(R"(checkpoint cut at bsp clock (\d+) written to .*/ckpt/server-(\d)-of-2)");
  std::string clock;
  int servers = 0;
  for (std::sregex_iterator it(text.begin(), text.end(), said), end; it != end; ++it) {
    if (clock.empty()) clock = (*it)[2];
    EXPECT_EQ((*it)[2], clock) << text;
    ++servers;
    // The server's own log names the same clock for the file it wrote. The command may have
    // retried with a later clock after another server passed the first one, so this server's log
    // can hold an earlier cut too; the last cut it logged is the file on disk.
    std::string log = ReadFile(base + "/logs/server-" + (*it)[1].str() + ".log");
    std::string last;
    for (std::sregex_iterator l(log.begin(), log.end(), logged), lend; l != lend; ++l) {
      last = (*l)[1];
    }
    ASSERT_FALSE(last.empty()) << log;
    EXPECT_EQ(last, clock) << log;
  }
  EXPECT_EQ(servers, 2) << text;
  for (const char* f : {"/ckpt/server-0-of-2.ckpt", "/ckpt/server-1-of-2.ckpt"}) {
    EXPECT_TRUE(fs::exists(base + f)) << f;
  }
}

TEST(CheckpointCommandTest, UnreachableCoordinatorFailsWithAMessage) {
  const std::string bin = BinDir();
  const std::string out = ::testing::TempDir() + "/osprey-ckpt-unreachable.out";
  std::string cmd = bin + "/osprey checkpoint --coordinator tcp://127.0.0.1:1 --timeout-ms 300 > " +
                    out + " 2>&1";
  int status = std::system(cmd.c_str());
  EXPECT_EQ(WIFEXITED(status) ? WEXITSTATUS(status) : -1, 1);
  EXPECT_NE(ReadFile(out).find("cannot reach the coordinator"), std::string::npos) << ReadFile(out);
  status = std::system((bin + "/osprey checkpoint > /dev/null 2>&1").c_str());
  EXPECT_EQ(WIFEXITED(status) ? WEXITSTATUS(status) : -1, 2);  // --coordinator is required
}

}  // namespace
