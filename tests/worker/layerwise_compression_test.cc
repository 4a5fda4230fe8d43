// Layer-wise compression (granularity "layer": k per model tensor) and the compression
// diagnostics (worker/compression_diagnostics.h), on DenseCompressor with the real codec stack.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "common/codec/layer_stats.h"
#include "common/codec/tensor_layout.h"
#include "worker/compression.h"

namespace osprey::worker {
namespace {

using codec::TensorLayout;

TEST(TensorLayoutTest, ValidatesCoverage) {
  EXPECT_TRUE(codec::ValidateTensorLayout({{"a", 0, 4}, {"b", 4, 2}}, 6).ok());
  Status gap = codec::ValidateTensorLayout({{"a", 0, 4}, {"b", 5, 2}}, 7);
  EXPECT_EQ(gap.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(gap.message().find("tensor 1 'b' starts at 5, expected 4"), std::string::npos) << gap.ToString();
  EXPECT_FALSE(codec::ValidateTensorLayout({{"a", 0, 0}}, 0).ok()) << "empty tensor";
  Status short_cover = codec::ValidateTensorLayout({{"a", 0, 4}}, 6);
  EXPECT_NE(short_cover.message().find("covers 4 floats, the vector has 6"), std::string::npos);
}

TEST(TensorLayoutTest, SegmentsFollowTensorsAcrossChunks) {
  const TensorLayout layout = {{"a", 0, 10}, {"b", 10, 5}, {"c", 15, 20}};
  // Chunks of 8 floats; this server owns chunks 0, 1 and 3: table floats [0, 16) and [24, 32).
  std::vector<codec::LayerSegment> s = codec::LayerSegments(layout, {{0, 8}, {8, 8}, {24, 8}});
  ASSERT_EQ(s.size(), 3u);
  EXPECT_EQ(s[0].tensor, 0u);  // a: [0, 10) -> message [0, 10), across chunks 0 and 1
  EXPECT_EQ(s[0].begin, 0u);
  EXPECT_EQ(s[0].size, 10u);
  EXPECT_EQ(s[1].tensor, 1u);  // b: [10, 15)
  EXPECT_EQ(s[1].size, 5u);
  // c: table [15, 16) and [24, 32) (chunk 2 is another server's) are message [15, 24): one run.
  EXPECT_EQ(s[2].tensor, 2u);
  EXPECT_EQ(s[2].begin, 15u);
  EXPECT_EQ(s[2].size, 9u);
  // A message starting inside a tensor (this server owns only chunk 1).
  s = codec::LayerSegments(layout, {{8, 8}});
  ASSERT_EQ(s.size(), 3u);
  EXPECT_EQ(s[0].size, 2u);
  EXPECT_EQ(s[1].size, 5u);
  EXPECT_EQ(s[2].size, 1u);
}

TEST(LayerStepStatsTest, NormsDotAndCountPerLayer) {
  std::vector<float> g(10);
  for (size_t i = 0; i < g.size(); ++i) g[i] = static_cast<float>(i + 1);
  const std::vector<uint32_t> begin = {0, 4, 10};
  const uint32_t idx[] = {1, 5, 7};
  const float val[] = {2.0f, -1.0f, 0.0f};
  std::vector<codec::LayerStepStats> s = codec::ComputeLayerStepStats(g.data(), begin, idx, val, 3, 4096);
  ASSERT_EQ(s.size(), 2u);
  EXPECT_EQ(s[0].raw_sq, 1 + 4 + 9 + 16);
  EXPECT_EQ(s[0].sent_sq, 4);
  EXPECT_EQ(s[0].dot, 2 * 2);
  EXPECT_EQ(s[0].sent, 1u);
  EXPECT_EQ(s[1].raw_sq, 25 + 36 + 49 + 64 + 81 + 100);
  EXPECT_EQ(s[1].dot, -6);
  EXPECT_EQ(s[1].sent, 1u) << "a zero value is no update";
  EXPECT_NEAR(codec::StepCosine(s[0]), 4 / std::sqrt(30.0 * 4), 1e-12);
  // Sampled: layer 0 at stride 2 (positions 0, 2), scaled by 4 / 2.
  s = codec::ComputeLayerStepStats(g.data(), begin, idx, val, 3, 2);
  EXPECT_EQ(s[0].raw_sq, (1 + 9) * 2);
}

constexpr size_t kBig = 20000;
constexpr size_t kSmall = 2000;

// A two-layer gradient: "big" ~ N(0, 1), "small" ~ N(0, 0.01^2): 100x smaller. With `signal`,
// each element also has a fixed mean (drawn once from N(0, 1) times the layer's scale): the
// persistent direction that training follows and error feedback must deliver.
std::vector<float> TwoLayerGradient(std::mt19937* rng, bool signal = false) {
  static const std::vector<float> mean = [] {
    std::mt19937 r(7);
    std::normal_distribution<float> normal(0.0f, 1.0f);
    std::vector<float> m(kBig + kSmall);
    for (float& x : m) x = normal(r);
    return m;
  }();
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> g(kBig + kSmall);
  for (size_t i = 0; i < g.size(); ++i) {
    g[i] = (normal(*rng) + (signal ? mean[i] : 0.0f)) * (i < kBig ? 1.0f : 0.01f);
  }
  return g;
}

const TensorLayout kTwoLayers = {{"big", 0, kBig}, {"small", kBig, kSmall}};

codec::CodecConfig TopK(const std::string& granularity, double density, bool ef) {
  codec::CodecConfig c;
  c.type = "topk";
  c.density = density;
  c.error_feedback = ef;
  c.min_compress_bytes = 0;
  c.granularity = granularity;
  c.bucket_bytes = size_t{1} << 20;  // one bucket holds both layers
  return c;
}

// Encodes `steps` fresh gradients as one message of table 1 to server 0; returns the stats and
// the selected count of the last message.
CompressionStats EncodeRun(const codec::CodecConfig& c, int steps, uint64_t* last_count, const TensorLayout& layout,
                     bool signal = false) {
  auto comp = DenseCompressor::Create(c, 1, layout);
  EXPECT_TRUE(comp.ok()) << comp.status().ToString();
  if (!comp.ok()) return {};
  std::mt19937 rng(42);
  for (int s = 0; s < steps; ++s) {
    std::vector<float> g = TwoLayerGradient(&rng, signal);
    proto::Header header;
    Buffer values;
    Status st = (*comp)->Encode(1, 0, g.data(), g.size(), &header, &values);
    EXPECT_TRUE(st.ok()) << st.ToString();
    *last_count = header.codec_count();
  }
  return (*comp)->stats();
}

const LayerDiagnostics* Layer(const CompressionStats& st, const std::string& name) {
  for (const LayerDiagnostics& l : st.diagnostics.layers) {
    if (l.name == name) return &l;
  }
  return nullptr;
}

TEST(LayerwiseCompressionTest, BucketWiseStarvesTheSmallLayerAndLayerWiseDoesNot) {
  uint64_t bucket_count = 0, layer_count = 0;
  CompressionStats bucket = EncodeRun(TopK("bucket", 0.01, false), 20, &bucket_count, kTwoLayers);
  CompressionStats layer = EncodeRun(TopK("layer", 0.01, false), 20, &layer_count, kTwoLayers);
  EXPECT_EQ(bucket_count, 220u);  // k = 1% of the bucket
  EXPECT_EQ(layer_count, 200u + 20u) << "k_l = 1% of each layer";
  const LayerDiagnostics* bs = Layer(bucket, "small");
  const LayerDiagnostics* ls = Layer(layer, "small");
  ASSERT_NE(bs, nullptr);
  ASSERT_NE(ls, nullptr);
  EXPECT_EQ(bucket.diagnostics.steps, 20u);
  // Bucket-wise: every selected element is in the big layer; the small one gets nothing.
  EXPECT_LT(bs->norm_ratio(), 1e-3) << bs->sent_norm << " / " << bs->raw_norm;
  EXPECT_DOUBLE_EQ(bs->no_update_share, 1.0);
  EXPECT_DOUBLE_EQ(bucket.diagnostics.no_update_share, 0.5) << "one of two layers starved";
  // Layer-wise: the small layer's top 1% carries a real share of its norm (~10% for a Gaussian).
  EXPECT_GT(ls->norm_ratio(), 0.05);
  EXPECT_DOUBLE_EQ(ls->no_update_share, 0.0);
  EXPECT_NEAR(ls->raw_norm, 0.01 * std::sqrt(double{kSmall}), 0.01 * std::sqrt(double{kSmall}) * 0.05);
  // The big layer is treated alike by both.
  EXPECT_NEAR(Layer(layer, "big")->norm_ratio(), Layer(bucket, "big")->norm_ratio(), 0.02);
}

TEST(LayerwiseCompressionTest, LayerMinKFloorsSmallLayers) {
  codec::CodecConfig c = TopK("layer", 0.0001, false);  // 2 in big, 0.2 -> 1 in small
  uint64_t count = 0;
  EncodeRun(c, 1, &count, kTwoLayers);
  EXPECT_EQ(count, 2u + 1u);
  c.layer_min_k = 50;
  EncodeRun(c, 1, &count, kTwoLayers);
  EXPECT_EQ(count, 50u + 50u);
  c.layer_min_k = 5000;  // capped at each layer's size: everything
  EncodeRun(c, 1, &count, kTwoLayers);
  EXPECT_EQ(count, kBig / 4 + kSmall) << "big: floor 5000; small: all 2000";
}

TEST(LayerwiseCompressionTest, LayerGranularityNeedsALayout) {
  auto comp = DenseCompressor::Create(TopK("layer", 0.01, true), 1);
  ASSERT_FALSE(comp.ok());
  EXPECT_NE(comp.status().message().find("granularity = layer needs the model's tensor list"), std::string::npos);
}

TEST(CompressionDiagnosticsTest, ErrorFeedbackIsHealthyAndABrokenCodecWarns) {
  uint64_t count = 0;
  // A gradient with a persistent direction plus as much noise, for 600 steps (3 horizons).
  CompressionStats ef = EncodeRun(TopK("layer", 0.01, true), 600, &count, kTwoLayers, true);
  CompressionStats broken = EncodeRun(TopK("tensor", 1e-4, false), 600, &count, kTwoLayers, true);
  std::printf("cosine: top-1%% + EF %.3f, top-0.01%% no EF %.3f\n", ef.diagnostics.cosine, broken.diagnostics.cosine);
  EXPECT_EQ(CompressionWarning(ef.diagnostics), "");
  EXPECT_LT(broken.diagnostics.cosine, kHealthyCosine);
  const std::string w = CompressionWarning(broken.diagnostics);
  EXPECT_NE(w.find("compression unhealthy: cosine"), std::string::npos) << w;
  EXPECT_NE(w.find("< 0.85"), std::string::npos) << w;
}

TEST(CompressionDiagnosticsTest, LosslessCastsHaveCosineOneAndSampledNormsAreClose) {
  // fp16 of N(0,1) values: the decoded vector is the raw one up to rounding. The big layer (20000
  // floats) is sampled (4096 positions): its raw-norm estimate stays within 5%.
  codec::CodecConfig c;
  c.type = "fp16";
  c.min_compress_bytes = 0;
  uint64_t count = 0;
  CompressionStats st = EncodeRun(c, 5, &count, kTwoLayers);
  EXPECT_NEAR(st.diagnostics.cosine, 1.0, 1e-4);
  const LayerDiagnostics* big = Layer(st, "big");
  ASSERT_NE(big, nullptr);
  EXPECT_NEAR(big->raw_norm, std::sqrt(double{kBig}), 0.05 * std::sqrt(double{kBig}));
  EXPECT_NEAR(big->norm_ratio(), 1.0, 1e-3);
  EXPECT_EQ(st.diagnostics.no_update_share, 0.0);
}

}  // namespace
}  // namespace osprey::worker
