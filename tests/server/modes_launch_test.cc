// The three consistency modes through the real binaries: `osprey launch
// configs/{bsp,ssp,async,async-momentum}.yaml`
// (2 servers, 2 workers, separate processes) must finish (no deadlock at the end: evaluation pulls
// carry clock 0), learn, and in bsp apply exactly one optimizer step per clock and table.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <algorithm>
#include <cmath>
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

constexpr int kSteps = 200;

double JsonNumber(const std::string& json, const std::string& key) {
  std::smatch m;
  if (!std::regex_search(json, m, std::regex("\"" + key + "\"\\s*:\\s*([-+0-9.eE]+)"))) {
    return std::nan("");
  }
  return std::stod(m[1]);
}

class ModesLaunchTest : public ::testing::TestWithParam<std::string> {};

TEST_P(ModesLaunchTest, FinishesAndLearns) {
  std::string mode = GetParam();
  std::string base = ::testing::TempDir() + "/osprey-modes-" + mode;
  std::string report = base + ".json", logs = base + "-logs";
  std::filesystem::remove_all(logs);
  std::remove(report.c_str());
  std::string cmd = BinDir() + "/osprey launch " +
                    SourceDir() + "/configs/" + mode + ".yaml --quiet" +
                    " --set train.steps=" + std::to_string(kSteps) + " --stall-timeout 60" +
                    " --log-dir " + logs + " --report-json " + report + " > " + base + ".out 2>&1";
  int rc = std::system(cmd.c_str());
  ASSERT_TRUE(WIFEXITED(rc) && WEXITSTATUS(rc) == 0) << "osprey launch failed; see " << base << ".out";
  std::string json = ReadFile(report);
  EXPECT_EQ(JsonNumber(json, "steps"), kSteps) << json;
  EXPECT_GT(JsonNumber(json, "auc"), 0.6) << json;
  if (mode != "bsp") return;
  // "server R: N optimizer steps": per server, kSteps per table it holds a part of.
  std::regex re(R"(server (\d+): (\d+) optimizer steps)");
  int servers = 0;
  for (const auto& e : std::filesystem::directory_iterator(logs)) {
    std::string text = ReadFile(e.path().string());
    for (std::sregex_iterator it(text.begin(), text.end(), re), end; it != end; ++it) {
      long steps = std::stol((*it)[2]);
      EXPECT_GT(steps, 0);
      EXPECT_EQ(steps % kSteps, 0) << "server " << (*it)[1] << " applied " << steps
                                   << " steps, not one per clock and table";
      ++servers;
    }
  }
  EXPECT_EQ(servers, 2);
}

// async-momentum: the dense table uses SGD with momentum 0.9 and momentum_decay, so the policy
// acts on real stale pushes (async.yaml's Adagrad has no momentum to decay).
INSTANTIATE_TEST_SUITE_P(Modes, ModesLaunchTest,
                         ::testing::Values("bsp", "ssp", "async", "async-momentum"),
                         [](const auto& info) {
                           std::string name = info.param;
                           std::replace(name.begin(), name.end(), '-', '_');
                           return name;
                         });

}  // namespace
