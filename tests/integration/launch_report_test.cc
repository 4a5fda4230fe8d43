// The final report of a real `osprey launch` of configs/local-topk.yaml: the servers' statistics
// (sent to the coordinator before they exit) and worker 0's density trajectory under a warm-up
// schedule reach the text report and --report-json.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <cmath>
#include <cstdlib>
#include <fstream>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include "tests/testing/launch_util.h"

namespace {

using osprey::testing::BinDir;
using osprey::testing::JsonArray;
using osprey::testing::JsonNumber;
using osprey::testing::ReadFile;
using osprey::testing::SourceDir;

TEST(LaunchReportTest, TopKJobReportsServerStatsAndDensityTrajectory) {
  const std::string report = ::testing::TempDir() + "/osprey-launch-topk-report.json";
  const std::string logs = ::testing::TempDir() + "/osprey-launch-topk-logs";
  std::remove(report.c_str());
  // The warm-up is set here so that the test does not depend on the config's schedule.
  const std::string codec = " --set tables.mlp.codec.schedule.";
  const std::string cmd = BinDir() + "/osprey launch " + SourceDir() +
                          "/configs/local-topk.yaml --quiet --set train.steps=100" + codec +
                          "type=warmup" + codec + "start_density=0.25" + codec + "steps=50" +
                          " --log-dir " + logs + " --report-json " + report + " > " + logs +
                          ".out 2>&1";
  const int rc = std::system(cmd.c_str());
  ASSERT_TRUE(WIFEXITED(rc) && WEXITSTATUS(rc) == 0)
      << "osprey launch failed; see " << logs << ".out:\n" << ReadFile(logs + ".out");
  const std::string json = ReadFile(report);
  ASSERT_FALSE(json.empty()) << "no report at " << report;

  EXPECT_EQ(JsonNumber(json, "server_reports"), 2) << json;
  EXPECT_GT(JsonNumber(json, "server_windows_applied"), 0) << json;
  EXPECT_GT(JsonNumber(json, "server_pushes_applied"), 0) << json;
  EXPECT_GT(JsonNumber(json, "server_decoded_pushes"), 0) << json;
  EXPECT_GT(JsonNumber(json, "server_decode_seconds"), 0) << json;
  EXPECT_GT(JsonNumber(json, "server_decode_bytes_decoded"),
            JsonNumber(json, "server_decode_bytes_encoded")) << json;
  double staleness_entries = 0;
  for (double c : JsonArray(json, "staleness_histogram")) staleness_entries += c;
  EXPECT_GT(staleness_entries, 0) << json;

  // density_trajectory: [{"step": 0, "density": 0.25}, ...]
  std::vector<double> steps, densities;
  std::regex point("\\{\"step\": ([0-9]+), \"density\": ([-+0-9.eE]+)\\}");
  for (auto it = std::sregex_iterator(json.begin(), json.end(), point); it != std::sregex_iterator();
       ++it) {
    steps.push_back(std::stod((*it)[1]));
    densities.push_back(std::stod((*it)[2]));
  }
  ASSERT_GE(steps.size(), 2u) << json;
  ASSERT_LE(steps.size(), 8u) << json;
  EXPECT_EQ(steps.front(), 0) << json;
  EXPECT_NEAR(densities.front(), 0.25, 0.001) << "the warm-up start density: " << json;
  EXPECT_EQ(steps.back(), 99) << json;
  EXPECT_NEAR(densities.back(), 0.01, 0.001) << "the final density after the warm-up: " << json;

  const std::string text = ReadFile(logs + ".out");
  EXPECT_NE(text.find("  servers           2 reported: "), std::string::npos) << text;
  EXPECT_NE(text.find("compressed pushes"), std::string::npos) << text;
  EXPECT_NE(text.find("  staleness         0: "), std::string::npos) << text;
  EXPECT_NE(text.find("density by step {0: 0.25"), std::string::npos) << text;
}

}  // namespace
