// Layer-wise top-k (granularity "layer": k per model tensor) against bucket-wise top-k on the
// planted-data DLRM of configs/local.yaml, through the real Trainer and servers (the in-process
// cluster of compression_convergence_test: 2 servers, 1 worker, so runs are repeatable), and the
// compression diagnostics each run reports.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>

#include "job/job_config.h"
#include "tests/testing/inproc_training.h"
#include "tests/testing/test_env.h"
#include "worker/trainer.h"

namespace osprey {
namespace {

struct RunResult {
  worker::EvalResult eval;
  worker::CompressionStats comp;
};

RunResult Train(const std::vector<std::string>& overrides) {
  RunResult out;
  const char* src = testing::SourceDirFromEnv();
  EXPECT_NE(src, nullptr);
  if (src == nullptr) return out;
  std::vector<std::string> sets = {"train.eval_samples=10000", "train.steps=1000"};
  sets.insert(sets.end(), overrides.begin(), overrides.end());
  auto job = config::LoadJobConfig(std::string(src) + "/configs/local.yaml", sets);
  EXPECT_TRUE(job.ok()) << job.status().ToString();
  if (!job.ok()) return out;
  testing::InprocTraining training(*job, /*servers=*/2, /*workers=*/1);
  Status init = training.Init();
  EXPECT_TRUE(init.ok()) << init.ToString();
  if (!init.ok()) return out;
  Status run = training.RunAll();
  EXPECT_TRUE(run.ok()) << run.ToString();
  auto eval = training.trainer(0).Evaluate();
  EXPECT_TRUE(eval.ok()) << eval.status().ToString();
  if (eval.ok()) out.eval = *eval;
  out.comp = training.trainer(0).compression_stats();
  return out;
}

void Print(const char* name, const RunResult& r) {
  const worker::DiagnosticsSummary& d = r.comp.diagnostics;
  double min_ratio = 1;
  for (const worker::LayerDiagnostics& l : d.layers) min_ratio = std::min(min_ratio, l.norm_ratio());
  std::printf("%-22s AUC %.4f logloss %.4f  dense %llu -> %llu B  cosine %.3f  no-update %.3f  min ratio %.4f\n", name,
              r.eval.auc, r.eval.logloss, static_cast<unsigned long long>(r.comp.bytes_raw),
              static_cast<unsigned long long>(r.comp.bytes_encoded), d.cosine, d.no_update_share, min_ratio);
}

std::vector<std::string> TopK(const std::string& granularity, const std::string& density, bool ef) {
  const std::string c = "tables.mlp.codec.";
  return {c + "type=topk", c + "density=" + density, c + "min_compress_bytes=4096", c + "granularity=" + granularity,
          c + "error_feedback=" + (ef ? "true" : "false")};
}

TEST(LayerwiseConvergenceTest, LayerWiseTopPointOnePercentKeepsTheAucAndFeedsEveryLayer) {
  RunResult none = Train({});
  Print("none", none);
  RunResult bucket = Train(TopK("bucket", "0.001", true));
  Print("bucket top-0.1%+EF", bucket);
  RunResult layer = Train(TopK("layer", "0.001", true));
  Print("layer top-0.1%+EF", layer);
  RunResult bucket_no_ef = Train(TopK("bucket", "0.001", false));
  Print("bucket top-0.1%", bucket_no_ef);
  RunResult layer_no_ef = Train(TopK("layer", "0.001", false));
  Print("layer top-0.1%", layer_no_ef);
  ASSERT_EQ(layer.eval.samples, 10000u);
  EXPECT_EQ(layer.comp.compressed_messages, layer.comp.messages);
  // The DLRM's 8 tensors each send at least one element per step.
  EXPECT_EQ(layer.comp.diagnostics.layers.size(), 8u);
  EXPECT_DOUBLE_EQ(layer.comp.diagnostics.no_update_share, 0.0);
  // Bucket-wise (the whole MLP in one bucket, k = 26 of 25.6k): the small tensors are starved in
  // most steps; error feedback delivers them late, in bursts.
  EXPECT_GT(bucket.comp.diagnostics.no_update_share, 0.3);
  // Without error feedback starvation is final: bucket-wise never updates some tensors (their
  // norm ratio is 0), layer-wise updates every tensor every step. Layer-wise does NOT train better
  // here without EF: measured AUC 0.7483 layer-wise vs 0.7619 bucket-wise (its k for the large
  // top.0.weight is 23 instead of 26, and the biases it feeds matter less on this model).
  auto min_ratio = [](const RunResult& r) {
    double m = 1;
    for (const worker::LayerDiagnostics& l : r.comp.diagnostics.layers) m = std::min(m, l.norm_ratio());
    return m;
  };
  EXPECT_LT(min_ratio(bucket_no_ef), 1e-6);
  EXPECT_GT(min_ratio(layer_no_ef), 0.1);
  EXPECT_DOUBLE_EQ(layer_no_ef.comp.diagnostics.no_update_share, 0.0);
  // With error feedback both keep the uncompressed AUC. On this DLRM one tensor (top.0.weight)
  // holds 92% of the floats and EF delivers the starved ones anyway, so layer-wise is not better
  // here: measured AUC 0.7706 layer-wise, 0.7711 bucket-wise, 0.7703 uncompressed (repeatable).
  EXPECT_NEAR(layer.eval.auc, bucket.eval.auc, 0.001);
  EXPECT_GE(layer.eval.auc, none.eval.auc - 0.001);
}

TEST(LayerwiseConvergenceTest, ImportanceSelectionConvergesWithinTwoThousandthsOfUncompressed) {
  RunResult none = Train({});
  Print("none", none);
  std::vector<std::string> sets = TopK("layer", "0.01", true);
  sets.push_back("tables.mlp.codec.select=importance");
  RunResult imp = Train(sets);
  Print("layer top-1% importance", imp);
  RunResult mag = Train(TopK("layer", "0.01", true));
  Print("layer top-1% magnitude", mag);
  ASSERT_EQ(imp.eval.samples, 10000u);
  EXPECT_NEAR(imp.eval.auc, none.eval.auc, 0.002);
  EXPECT_NE(imp.comp.bytes_encoded, 0u);
  EXPECT_EQ(imp.comp.bytes_encoded, mag.comp.bytes_encoded) << "the same k per layer, other elements";
  EXPECT_NE(imp.eval.auc, mag.eval.auc) << "a different selection trains a different model";
}

}  // namespace
}  // namespace osprey
