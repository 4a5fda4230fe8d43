// Restore through the launcher, with the real binaries: a bsp job writes periodic checkpoints (a
// cut at one clock on every server), a second `osprey launch --restore DIR` on ANOTHER server
// count resumes from them (every server logs the versions and the clock it restored), a corrupt
// checkpoint makes the launch fail naming the problem, and a missing directory is refused before
// anything starts.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>
#include <string>

#include "tests/testing/launch_util.h"

namespace {

using osprey::testing::BinDir;
using osprey::testing::ReadFile;
using osprey::testing::SourceDir;

namespace fs = std::filesystem;

// Runs `osprey launch configs/bsp.yaml ARGS`; returns the exit code, output in *out.
int Launch(const std::string& args, const std::string& name, std::string* out) {
  std::string base = ::testing::TempDir() + "/osprey-restore-" + name;
  std::string cmd = BinDir() + "/osprey launch " +
                    SourceDir() + "/configs/bsp.yaml --quiet --stall-timeout 60 " +
                    args + " > " + base + ".out 2>&1";
  int rc = std::system(cmd.c_str());
  *out = ReadFile(base + ".out");
  return WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
}

TEST(RestoreLaunchTest, ResumesFromACheckpointOnAnotherServerCount) {
  const std::string tmp = ::testing::TempDir() + "/osprey-restore-" + std::to_string(::getpid());
  const std::string ckpt = tmp + "/ckpt", logs1 = tmp + "/logs1", logs2 = tmp + "/logs2";
  fs::remove_all(tmp);
  std::string out;
  ASSERT_EQ(Launch("--set train.steps=60 --set checkpoint.dir=" + ckpt +
                       " --set checkpoint.every_steps=20 --log-dir " + logs1,
                   "first", &out), 0)
      << out;
  ASSERT_TRUE(fs::exists(ckpt + "/server-0-of-2.ckpt")) << out;
  ASSERT_TRUE(fs::exists(ckpt + "/server-1-of-2.ckpt")) << out;
  // The first job logged each cut it wrote: find the last clock both servers saved.
  std::regex cut_re(R"(checkpoint cut at bsp clock (\d+) written to .*server-(\d)-of-2)");
  long last_cut[2] = {-1, -1};
  for (int s = 0; s < 2; ++s) {
    std::string text = ReadFile(logs1 + "/server-" + std::to_string(s) + ".log");
    for (std::sregex_iterator it(text.begin(), text.end(), cut_re), end; it != end; ++it) {
      last_cut[s] = std::stol((*it)[1]);
    }
  }
  EXPECT_GE(last_cut[0], 20);
  EXPECT_EQ(last_cut[0], last_cut[1]) << "servers saved different clocks";

  ASSERT_EQ(Launch("--restore " + ckpt + " --set cluster.servers=3 --set train.steps=20 --log-dir " +
                       logs2,
                   "second", &out), 0)
      << out;
  EXPECT_NE(out.find("servers restore from"), std::string::npos) << out;
  std::regex re(R"(server (\d) restored checkpoint .* \(2 of 2 files read, clock (\d+)\): versions \[embeddings=(\d+), mlp=(\d+)\])");
  int restored = 0;
  std::string versions;
  for (int s = 0; s < 3; ++s) {
    std::string text = ReadFile(logs2 + "/server-" + std::to_string(s) + ".log");
    std::smatch m;
    ASSERT_TRUE(std::regex_search(text, m, re)) << "server " << s << " log:\n" << text;
    EXPECT_EQ(std::stol(m[2]), last_cut[0]) << "restored clock is not the last cut";
    EXPECT_GT(std::stol(m[3]), 0) << "restored embeddings version";
    EXPECT_GT(std::stol(m[4]), 0) << "restored mlp version";
    if (versions.empty()) versions = m[3].str() + "/" + m[4].str();
    EXPECT_EQ(m[3].str() + "/" + m[4].str(), versions) << "servers restored different versions";
    ++restored;
  }
  EXPECT_EQ(restored, 3);

  // A flipped byte in the middle of a file: the launch fails and says why.
  const std::string bad = tmp + "/bad";
  fs::copy(ckpt, bad);
  {
    std::fstream f(bad + "/server-1-of-2.ckpt", std::ios::in | std::ios::out | std::ios::binary);
    f.seekg(0, std::ios::end);
    std::streamoff size = f.tellg();
    f.seekp(size / 2);
    char c = 0;
    f.seekg(size / 2);
    f.read(&c, 1);
    c = static_cast<char>(c ^ 0x40);
    f.seekp(size / 2);
    f.write(&c, 1);
  }
  EXPECT_EQ(Launch("--restore " + bad + " --set train.steps=5 --log-dir " + tmp + "/logs3",
                   "corrupt", &out), 1)
      << out;
  EXPECT_NE(out.find("server-1-of-2.ckpt"), std::string::npos) << out;
  EXPECT_NE(out.find("refusing to restore"), std::string::npos) << out;

  // A missing directory: refused before anything starts.
  EXPECT_EQ(Launch("--restore " + tmp + "/nope --log-dir " + tmp + "/logs4", "missing", &out), 2)
      << out;
  EXPECT_NE(out.find("no such directory"), std::string::npos) << out;
  fs::remove_all(tmp);
}

}  // namespace
