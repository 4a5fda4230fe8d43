// The compression diagnostics through the real binaries: `osprey launch` of the top-k job with a
// deliberately broken codec (no error feedback, density 1e-4) reports the warning (text report
// and --report-json) and a healthy one (top-1% + error feedback) does not; the progress line shows
// a worker's warning (ProgressMeter, fed the ClusterState the coordinator builds from heartbeats).
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <cstdlib>
#include <string>

#include "tests/testing/launch_util.h"
#include "tools/progress.h"

namespace {

using osprey::testing::BinDir;
using osprey::testing::JsonNumber;
using osprey::testing::ReadFile;
using osprey::testing::SourceDir;

struct Launched {
  std::string json, out;
};

Launched Launch(const std::string& name, const std::string& sets) {
  const std::string report = ::testing::TempDir() + "/osprey-" + name + "-report.json";
  const std::string logs = ::testing::TempDir() + "/osprey-" + name + "-logs";
  std::remove(report.c_str());
  const std::string cmd = BinDir() + "/osprey launch " + SourceDir() +
                          "/configs/local-topk.yaml --set cluster.workers=1 --set train.steps=600" + sets +
                          " --log-dir " + logs + " --report-json " + report + " > " + logs + ".out 2>&1";
  const int rc = std::system(cmd.c_str());
  EXPECT_TRUE(WIFEXITED(rc) && WEXITSTATUS(rc) == 0) << "osprey launch failed; see " << logs << ".out:\n"
                                                     << ReadFile(logs + ".out");
  return {ReadFile(report), ReadFile(logs + ".out")};
}

std::string JsonString(const std::string& json, const std::string& key) {
  const std::string k = "\"" + key + "\": \"";
  const size_t at = json.find(k);
  if (at == std::string::npos) return "<missing>";
  const size_t end = json.find('"', at + k.size());
  return json.substr(at + k.size(), end - at - k.size());
}

TEST(CompressionWarningTest, BrokenCodecWarnsAndHealthyOneDoesNot) {
  const std::string c = " --set tables.mlp.codec.";
  Launched broken = Launch("broken-codec", c + "error_feedback=false" + c + "density=0.0001");
  ASSERT_FALSE(broken.json.empty());
  EXPECT_LT(JsonNumber(broken.json, "compression_cosine"), 0.85) << broken.json;
  EXPECT_NE(JsonString(broken.json, "compression_warning").find("compression unhealthy: cosine"), std::string::npos)
      << broken.json;
  EXPECT_NE(broken.out.find("WARNING           compression unhealthy"), std::string::npos) << broken.out;
  EXPECT_NE(broken.out.find("compression diag  cosine"), std::string::npos) << broken.out;

  Launched healthy = Launch("healthy-codec", "");
  ASSERT_FALSE(healthy.json.empty());
  EXPECT_GT(JsonNumber(healthy.json, "compression_cosine"), 0.85) << healthy.json;
  EXPECT_EQ(JsonString(healthy.json, "compression_warning"), "") << healthy.json;
  EXPECT_EQ(healthy.out.find("WARNING"), std::string::npos) << healthy.out;
  EXPECT_NE(healthy.out.find("compression diag  cosine"), std::string::npos) << healthy.out;
}

TEST(CompressionWarningTest, ProgressLineShowsTheFirstWorkersWarning) {
  osprey::tools::ProgressMeter meter(100);
  osprey::proto::ClusterState s;
  s.set_epoch(1);
  s.set_num_workers(2);
  for (int r = 0; r < 2; ++r) {
    osprey::proto::NodeState* n = s.add_nodes();
    n->set_role(osprey::proto::ROLE_WORKER);
    n->set_rank(r);
    n->set_alive(true);
    n->set_clock(10);
  }
  meter.Update(s, std::chrono::steady_clock::now());
  EXPECT_EQ(meter.Line().find("WARNING"), std::string::npos) << meter.Line();
  s.mutable_nodes(1)->set_compression_warning("compression unhealthy: cosine 0.10 < 0.85");
  meter.Update(s, std::chrono::steady_clock::now());
  EXPECT_NE(meter.Line().find("  WARNING worker 1: compression unhealthy: cosine 0.10 < 0.85"), std::string::npos)
      << meter.Line();
}

}  // namespace
