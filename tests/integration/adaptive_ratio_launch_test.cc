// The adaptive per-node ratio (issue 18) through the real binaries: `osprey launch` of a 2-worker
// top-k job whose worker 1 pushes through a slow uplink (the test-only ThrottledTransport,
// worker.debug_throttle_rank / debug_throttle_bytes_per_sec), once with a fixed density and once
// with codec.adaptive_ratio, in bsp (the slowest worker sets every step's pace, and the fixed run
// is repeatable bit for bit, so the AUC comparison is not run-to-run noise). Worker 1 is
// network-bound and slower than the median, so its density must fall within [min_density,
// max_density] while worker 0's stays; the job's samples/s must beat the fixed ratio's (a
// comparison of two runs on the same machine, not a timed bound), and the held-out AUC must not
// fall more than 0.003 below the fixed run's.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <cstdlib>
#include <regex>
#include <string>

#include "tests/testing/launch_util.h"

namespace {

using osprey::testing::BinDir;
using osprey::testing::JsonNumber;
using osprey::testing::ReadFile;
using osprey::testing::SourceDir;

// A job whose dense pushes dominate the bytes a worker sends: a wide top MLP (~92k floats),
// narrow embeddings (dim 4) and small batches.
const char* const kJob =
    " --set cluster.workers=2 --set cluster.heartbeat_interval_ms=100 --set train.steps=300"
    " --set train.batch_size=64 --set train.eval_samples=20000"
    " --set tables.embeddings.dim=4 --set model.embedding_dim=4 --set model.bottom_mlp=[64,4]"
    " --set model.top_mlp=[256,1] --set tables.mlp.codec.density=0.2"
    " --set worker.debug_throttle_rank=1 --set worker.debug_throttle_bytes_per_sec=4000000"
    " --set tables.embeddings.consistency.mode=bsp --set tables.mlp.consistency.mode=bsp";

struct Launched {
  std::string json, out;
};

Launched Launch(const std::string& name, const std::string& sets) {
  const std::string report = ::testing::TempDir() + "/osprey-" + name + "-report.json";
  const std::string logs = ::testing::TempDir() + "/osprey-" + name + "-logs";
  std::remove(report.c_str());
  const std::string cmd = BinDir() + "/osprey launch " + SourceDir() + "/configs/local-topk.yaml" + kJob + sets +
                          " --log-dir " + logs + " --report-json " + report + " > " + logs + ".out 2>&1";
  const int rc = std::system(cmd.c_str());
  EXPECT_TRUE(WIFEXITED(rc) && WEXITSTATUS(rc) == 0) << "osprey launch failed; see " << logs << ".out:\n"
                                                     << ReadFile(logs + ".out");
  return {ReadFile(report), ReadFile(logs + ".out")};
}

// The number `key` of the adaptive_ratio entry of worker `rank` in the report JSON; NaN if none.
double AdaptiveField(const std::string& json, int rank, const std::string& key) {
  std::smatch m;
  const std::regex entry("\\{\"rank\": " + std::to_string(rank) + ", \"final_density\"[^}]*\\}");
  if (!std::regex_search(json, m, entry)) return std::nan("");
  return JsonNumber(m.str(), key);
}

TEST(AdaptiveRatioLaunchTest, SlowWorkerLowersItsDensityAndTheJobGetsFaster) {
  Launched fixed = Launch("ratio-fixed", "");
  ASSERT_FALSE(fixed.json.empty()) << fixed.out;
  EXPECT_NE(fixed.json.find("\"adaptive_ratio\": []"), std::string::npos) << fixed.json;

  const std::string a = " --set tables.mlp.codec.adaptive_ratio.";
  Launched adaptive = Launch("ratio-adaptive", a + "min_density=0.01" + a + "max_density=0.2" + a +
                                                   "interval_steps=10" + a + "factor=2");
  ASSERT_FALSE(adaptive.json.empty()) << adaptive.out;

  // Worker 1 (throttled, network-bound) moved down, within the bounds.
  const double slow_final = AdaptiveField(adaptive.json, 1, "final_density");
  const double slow_min = AdaptiveField(adaptive.json, 1, "min_density");
  EXPECT_LT(slow_final, 0.2) << adaptive.json;
  EXPECT_GE(slow_min, 0.01) << adaptive.json;
  EXPECT_LE(AdaptiveField(adaptive.json, 1, "max_density"), 0.2) << adaptive.json;
  EXPECT_GE(AdaptiveField(adaptive.json, 1, "changes"), 1) << adaptive.json;
  // Worker 0 (fast, not throttled) kept the configured density, or nearly: on a loaded machine
  // it can be briefly slower than the median, but never network-bound for long.
  EXPECT_GE(AdaptiveField(adaptive.json, 0, "final_density"), 0.1) << adaptive.json;
  EXPECT_GE(AdaptiveField(adaptive.json, 0, "min_density"), 0.1) << adaptive.json;
  EXPECT_NE(adaptive.out.find("adaptive ratio    worker 1: density"), std::string::npos) << adaptive.out;

  // The job is as fast as its slowest worker: the throttled one now sends fewer bytes.
  const double fixed_rate = JsonNumber(fixed.json, "samples_per_sec");
  const double adaptive_rate = JsonNumber(adaptive.json, "samples_per_sec");
  EXPECT_GT(adaptive_rate, fixed_rate) << "fixed " << fixed_rate << " adaptive " << adaptive_rate;
  EXPECT_LT(JsonNumber(adaptive.json, "bytes_pushed"), JsonNumber(fixed.json, "bytes_pushed"));
  const double fixed_auc = JsonNumber(fixed.json, "auc");
  const double adaptive_auc = JsonNumber(adaptive.json, "auc");
  EXPECT_GE(adaptive_auc, fixed_auc - 0.003) << "fixed " << fixed_auc << " adaptive " << adaptive_auc;
  std::printf("fixed: %.0f samples/s, AUC %.4f; adaptive: %.0f samples/s, AUC %.4f, worker 1 density %.4f (min %.4f)\n",
              fixed_rate, fixed_auc, adaptive_rate, adaptive_auc, slow_final, slow_min);
}

// async_barrier: worker 1's uplink is so slow (1 MB/s) that even at min_density it stays far
// slower than the median. With adaptive_ratio alone the bsp job still runs at its pace; with
// async_barrier it leaves the step barrier once it cannot move further, the servers stop waiting
// for it and it skips ahead to worker 0's clock (a backup worker: its skipped batches go
// untrained). The job must be faster than the adaptive-only run (two runs on one machine, not a
// timed bound), worker 1 must report its exit and skipped clocks, worker 0 none, and the AUC must
// stay within 0.01 of the adaptive-only run (worker 1 trains far fewer batches).
TEST(AdaptiveRatioLaunchTest, AsyncBarrierLetsTheFastWorkerGoOn) {
  const std::string a = " --set tables.mlp.codec.adaptive_ratio.";
  const std::string adaptive_sets = " --set worker.debug_throttle_bytes_per_sec=1000000" + a + "min_density=0.01" + a +
                                    "max_density=0.2" + a + "interval_steps=10" + a + "factor=2";
  Launched adaptive = Launch("barrier-held", adaptive_sets);
  ASSERT_FALSE(adaptive.json.empty()) << adaptive.out;
  Launched barrier = Launch("barrier-left", adaptive_sets + a + "async_barrier=true");
  ASSERT_FALSE(barrier.json.empty()) << barrier.out;

  EXPECT_EQ(AdaptiveField(adaptive.json, 1, "barrier_exits"), 0) << "no async_barrier: never leaves";
  EXPECT_EQ(AdaptiveField(adaptive.json, 1, "clocks_skipped"), 0) << adaptive.json;
  EXPECT_DOUBLE_EQ(AdaptiveField(barrier.json, 1, "min_density"), 0.01) << "it left only at its bound";
  EXPECT_GE(AdaptiveField(barrier.json, 1, "barrier_exits"), 1) << barrier.json;
  const double skipped = AdaptiveField(barrier.json, 1, "clocks_skipped");
  const double outside = AdaptiveField(barrier.json, 1, "steps_outside_barrier");
  EXPECT_GT(skipped, 0) << barrier.json;
  EXPECT_GT(outside, 0) << barrier.json;
  EXPECT_LT(outside + skipped, 300) << "steps before it left were inside the barrier";
  EXPECT_EQ(AdaptiveField(barrier.json, 0, "barrier_exits"), 0) << barrier.json;
  EXPECT_EQ(AdaptiveField(barrier.json, 0, "clocks_skipped"), 0) << barrier.json;
  EXPECT_NE(barrier.out.find("left the barrier"), std::string::npos) << barrier.out;

  const double held_rate = JsonNumber(adaptive.json, "samples_per_sec");
  const double left_rate = JsonNumber(barrier.json, "samples_per_sec");
  EXPECT_GT(left_rate, held_rate) << "adaptive " << held_rate << " async_barrier " << left_rate;
  const double held_auc = JsonNumber(adaptive.json, "auc");
  const double left_auc = JsonNumber(barrier.json, "auc");
  EXPECT_GE(left_auc, held_auc - 0.01) << "adaptive " << held_auc << " async_barrier " << left_auc;
  std::printf("adaptive: %.0f samples/s, AUC %.4f, %.1f s; async_barrier: %.0f samples/s, AUC %.4f, %.1f s, worker 1 "
              "skipped %.0f clocks, trained %.0f outside the barrier\n",
              held_rate, held_auc, JsonNumber(adaptive.json, "wall_seconds"), left_rate, left_auc,
              JsonNumber(barrier.json, "wall_seconds"), skipped, outside);
}

}  // namespace
