// The default job through the real binaries: `osprey launch` starts a coordinator, 2 servers and
// 2 workers as separate processes over ZeroMQ on loopback; the report must show real learning.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmath>
#include <cstdlib>
#include <fstream>
#include <regex>
#include <sstream>
#include <string>

#include "tests/testing/launch_util.h"

namespace {

using osprey::testing::BinDir;
using osprey::testing::JsonNumber;
using osprey::testing::RunCommand;
using osprey::testing::SourceDir;

TEST(LaunchClusterTest, DefaultJobTrainsToNearOracleAuc) {
  std::string report = ::testing::TempDir() + "/osprey-launch-report.json";
  std::string logs = ::testing::TempDir() + "/osprey-launch-logs";
  std::remove(report.c_str());
  std::string cmd = BinDir() + "/osprey launch " + SourceDir() + "/configs/local.yaml --quiet" +
                    " --log-dir " + logs + " --report-json " + report + " > " + logs + ".out 2>&1";
  ASSERT_EQ(RunCommand(cmd), 0) << "osprey launch failed; see " << logs << ".out and " << logs;
  std::ifstream in(report);
  ASSERT_TRUE(in.good()) << "no report at " << report;
  std::stringstream ss;
  ss << in.rdbuf();
  std::string json = ss.str();
  for (const char* key : {"auc", "oracle_auc", "logloss", "samples_per_sec", "steps", "bytes_pushed",
                          "bytes_pulled", "wall_seconds"}) {
    EXPECT_FALSE(std::isnan(JsonNumber(json, key))) << "report lacks " << key << ": " << json;
  }
  double auc = JsonNumber(json, "auc"), oracle = JsonNumber(json, "oracle_auc");
  EXPECT_GT(oracle, 0.7);
  EXPECT_GE(auc, 0.9 * oracle) << json;
  EXPECT_LT(JsonNumber(json, "logloss"), 0.69);
  EXPECT_EQ(JsonNumber(json, "steps"), 1000);
  EXPECT_GT(JsonNumber(json, "bytes_pushed"), 0);
  EXPECT_GT(JsonNumber(json, "bytes_pulled"), 0);
}

TEST(LaunchClusterTest, IpcTransportAndOneWorkerAlsoTrain) {
  std::string report = ::testing::TempDir() + "/osprey-launch-ipc.json";
  std::string logs = ::testing::TempDir() + "/osprey-launch-ipc-logs";
  std::string cmd = BinDir() + "/osprey launch " + SourceDir() + "/configs/local.yaml --quiet" +
                    " --set cluster.transport=ipc --set cluster.ipc_dir=" + ::testing::TempDir() +
                    "/osprey-ipc --set cluster.workers=1 --set cluster.servers=3" +
                    " --set train.steps=600 --log-dir " + logs + " --report-json " + report +
                    " > " + logs + ".out 2>&1";
  ASSERT_EQ(RunCommand(cmd), 0) << "osprey launch failed; see " << logs << ".out";
  std::ifstream in(report);
  std::stringstream ss;
  ss << in.rdbuf();
  double auc = JsonNumber(ss.str(), "auc"), oracle = JsonNumber(ss.str(), "oracle_auc");
  EXPECT_GE(auc, 0.85 * oracle) << ss.str();
}

TEST(LaunchClusterTest, BadConfigFailsBeforeStartingAnything) {
  std::string out = ::testing::TempDir() + "/osprey-bad-config.out";
  std::string cmd = BinDir() + "/osprey launch " + SourceDir() +
                    "/configs/local.yaml --set cluster.servers=0 > " + out + " 2>&1";
  EXPECT_EQ(RunCommand(cmd), 2);
  std::ifstream in(out);
  std::stringstream ss;
  ss << in.rdbuf();
  EXPECT_NE(ss.str().find("cluster.servers"), std::string::npos) << ss.str();
}

}  // namespace
