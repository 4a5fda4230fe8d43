// Feature admission end to end through the real binaries: `osprey launch configs/local.yaml`
// (2 servers, 2 workers as processes, the planted synthetic data) once as it is and once with
// admission min_count 2 on the sparse table. The admitted job must reach an AUC within 0.003 of
// the plain one (issue #11), and its report must show the admission counters: rows admitted and
// gradients dropped (keys seen once never get a row), which the plain job's report leaves at 0.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <string>

#include "tests/testing/launch_util.h"

namespace {

using osprey::testing::BinDir;
using osprey::testing::JsonNumber;
using osprey::testing::ReadFile;
using osprey::testing::RunCommand;
using osprey::testing::SourceDir;

constexpr double kTolerance = 0.003;

// Runs the default job with `extra` --set flags; returns its JSON report ("" on failure) and
// leaves its text output in *text.
std::string Launch(const std::string& name, const std::string& extra, std::string* text) {
  const std::string base = ::testing::TempDir() + "/osprey-admission-" + name;
  const std::string report = base + ".json";
  std::remove(report.c_str());
  const std::string cmd = BinDir() + "/osprey launch " + SourceDir() +
                          "/configs/local.yaml --quiet" + extra + " --log-dir " + base +
                          "-logs --report-json " + report + " > " + base + ".out 2>&1";
  const int rc = RunCommand(cmd);
  *text = ReadFile(base + ".out");
  EXPECT_EQ(rc, 0) << "osprey launch failed:\n" << *text;
  return ReadFile(report);
}

TEST(AdmissionLaunchTest, MinCountTwoTrainsToTheSameAucAndReportsItsCounters) {
  std::string plain_text, admitted_text;
  const std::string plain = Launch("none", "", &plain_text);
  const std::string admitted =
      Launch("min2", " --set 'tables.embeddings.admission={min_count: 2, sketch_width: 1048576}'",
             &admitted_text);
  ASSERT_FALSE(plain.empty());
  ASSERT_FALSE(admitted.empty());
  const double auc_plain = JsonNumber(plain, "auc");
  const double auc_admitted = JsonNumber(admitted, "auc");
  std::printf("AUC without admission %.5f, with min_count 2 %.5f (oracle %.5f); rows admitted %.0f, "
              "gradients dropped %.0f\n",
              auc_plain, auc_admitted, JsonNumber(plain, "oracle_auc"),
              JsonNumber(admitted, "server_rows_admitted"),
              JsonNumber(admitted, "server_gradients_not_admitted"));
  EXPECT_GT(auc_plain, 0.9 * JsonNumber(plain, "oracle_auc")) << "the plain job did not learn";
  EXPECT_NEAR(auc_admitted, auc_plain, kTolerance);

  EXPECT_EQ(JsonNumber(plain, "server_rows_admitted"), 0) << plain;
  EXPECT_EQ(JsonNumber(plain, "server_gradients_not_admitted"), 0) << plain;
  const double rows = JsonNumber(admitted, "server_rows_admitted");
  const double dropped = JsonNumber(admitted, "server_gradients_not_admitted");
  EXPECT_GT(rows, 0) << admitted;
  // Every admitted key was first seen (and its gradient dropped) once at least.
  EXPECT_GE(dropped, rows) << admitted;
  EXPECT_EQ(JsonNumber(admitted, "server_rows_evicted_ttl"), 0) << admitted;
  EXPECT_NE(admitted_text.find("  admission         "), std::string::npos) << admitted_text;
  EXPECT_NE(admitted_text.find("rows admitted"), std::string::npos) << admitted_text;
  EXPECT_EQ(plain_text.find("  admission         "), std::string::npos) << plain_text;
}

}  // namespace
