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

// The other half of the question: does bucket-wise top-k starve a layer whose gradients are
// small? On a wide bottom MLP (13 -> 1024 -> 4, embedding dim 4, top MLP one logit: 19k floats,
// 13k of them in bottom.0.weight) it does. Measured (seed 1, repeatable): per-layer raw gradient
// norm top.0.weight 0.417 vs bottom.1.bias 0.0053 (~78x, bucket + EF; 0.349 vs 0.0045 layer + EF;
// per element 60-120x vs bottom.0.*); bucket-wise + EF leaves bottom.0.weight without update in
// 99.4% of steps (norm ratio 0.082), without EF its ratio is exactly 0; layer-wise + EF feeds it
// (ratio 0.69, every layer every step) for ~10% more bytes (168 vs 152 kB). But on this planted
// data the starvation costs no AUC: the planted dense signal is linear and 1024 random ReLU
// features carry it, so bottom.0.weight barely needs training, and layer-wise is not better than
// bucket-wise here. AUC none 0.7581, bucket+EF 0.7677, layer+EF 0.7662, bucket 0.7650, layer
// 0.7621 (layer without EF: the earlier search, not run here).
// A search over ~145 planted-data configs (widths, depths, optimizers, learning rates, data shapes)
// found no honest setup where layer-wise beat bucket-wise on AUC beyond seed noise.
TEST(LayerwiseConvergenceTest, BucketWiseStarvesTheSmallGradientLayerWithoutCostingAuc) {
  const std::vector<std::string> wide = {"model.embedding_dim=4", "tables.embeddings.dim=4",
                                         "model.bottom_mlp=[1024,4]", "model.top_mlp=[1]"};
  auto with = [&](std::vector<std::string> codec) {
    codec.insert(codec.begin(), wide.begin(), wide.end());
    return codec;
  };
  auto layer_of = [](const RunResult& r, const std::string& name) {
    for (const worker::LayerDiagnostics& l : r.comp.diagnostics.layers)
      if (l.name == name) return l;
    ADD_FAILURE() << "no layer " << name;
    return worker::LayerDiagnostics{};
  };
  auto print_layers = [](const RunResult& r) {
    for (const worker::LayerDiagnostics& l : r.comp.diagnostics.layers)
      std::printf("    %-16s raw %.4g sent %.4g ratio %.4f no-update %.3f\n", l.name.c_str(), l.raw_norm,
                  l.sent_norm, l.norm_ratio(), l.no_update_share);
  };
  RunResult none = Train(wide);
  Print("none", none);
  RunResult bucket = Train(with(TopK("bucket", "0.001", true)));
  Print("bucket top-0.1%+EF", bucket);
  print_layers(bucket);
  RunResult layer = Train(with(TopK("layer", "0.001", true)));
  Print("layer top-0.1%+EF", layer);
  print_layers(layer);
  RunResult bucket_no_ef = Train(with(TopK("bucket", "0.001", false)));
  Print("bucket top-0.1%", bucket_no_ef);
  print_layers(bucket_no_ef);
  ASSERT_EQ(layer.eval.samples, 10000u);
  ASSERT_FALSE(layer.comp.diagnostics.layers.empty());
  // The gradient-scale gap between the layers (of the raw gradients, in both EF runs).
  for (const RunResult* r : {&bucket, &layer}) {
    double lo = 1e300, hi = 0;
    for (const worker::LayerDiagnostics& l : r->comp.diagnostics.layers) {
      lo = std::min(lo, l.raw_norm);
      hi = std::max(hi, l.raw_norm);
    }
    EXPECT_GE(hi, 50 * lo) << "largest per-layer gradient norm " << hi << ", smallest " << lo;
  }
  // Bucket-wise: bottom.0.weight is starved; error feedback delivers a little of it late, without
  // EF nothing at all.
  const worker::LayerDiagnostics starved = layer_of(bucket, "bottom.0.weight");
  EXPECT_GT(starved.no_update_share, 0.95);
  EXPECT_LT(starved.norm_ratio(), 0.2);
  EXPECT_LT(layer_of(bucket_no_ef, "bottom.0.weight").norm_ratio(), 1e-6);
  // Layer-wise feeds every layer in every step.
  for (const worker::LayerDiagnostics& l : layer.comp.diagnostics.layers)
    EXPECT_DOUBLE_EQ(l.no_update_share, 0.0) << l.name;
  EXPECT_GT(layer_of(layer, "bottom.0.weight").norm_ratio(), 0.5);
  // ... and that buys no AUC here: both keep the uncompressed AUC, within seed noise of each
  // other (measured 0.0015 apart; other seeds move either by 0.002-0.01).
  EXPECT_NEAR(layer.eval.auc, bucket.eval.auc, 0.003);
  EXPECT_GE(layer.eval.auc, none.eval.auc - 0.002);
  EXPECT_GE(bucket.eval.auc, none.eval.auc - 0.002);
}

}  // namespace
}  // namespace osprey
