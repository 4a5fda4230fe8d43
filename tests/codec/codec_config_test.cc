#include <gtest/gtest.h>

#include <cmath>

#include "common/codec/codec.h"

namespace osprey::codec {
namespace {

CodecConfig TopK() {
  CodecConfig c;
  c.type = "topk";
  return c;
}

// Expects InvalidArgument whose message names `field` and contains `value`.
void ExpectRejected(const CodecConfig& c, const std::string& field, const std::string& value) {
  auto codec = MakeCodec(c);
  ASSERT_FALSE(codec.ok()) << field;
  EXPECT_EQ(codec.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(codec.status().message().find("compression." + field), std::string::npos) << codec.status().ToString();
  EXPECT_NE(codec.status().message().find(value), std::string::npos) << codec.status().ToString();
}

TEST(CodecConfigTest, DefaultsAndEveryCodecBuild) {
  for (const char* type : {"none", "fp16", "bf16", "topk", "randomk", "onebit"}) {
    CodecConfig c;
    c.type = type;
    c.error_feedback = true;
    EXPECT_TRUE(MakeCodec(c).ok()) << type;
  }
  for (const char* method : {"exact", "sample", "histogram"}) {
    CodecConfig c = TopK();
    c.topk_method = method;
    EXPECT_TRUE(MakeCodec(c).ok()) << method;
  }
}

TEST(CodecConfigTest, RejectsUnknownNames) {
  CodecConfig c;
  c.type = "topk2";
  ExpectRejected(c, "type", "topk2");
  c = TopK();
  c.topk_method = "quickselect";
  ExpectRejected(c, "topk_method", "quickselect");
  c = TopK();
  c.value_type = "fp8";
  ExpectRejected(c, "value_type", "fp8");
  c.value_type = "fp32";
  c.granularity = "layers";
  ExpectRejected(c, "granularity", "layers");
  c.granularity = "layer";
  c.layer_min_k = 0;
  ExpectRejected(c, "layer_min_k", "0");
  c = TopK();
  c.schedule.type = "cosine";
  ExpectRejected(c, "schedule.type", "cosine");
}

TEST(CodecConfigTest, RejectsDensityOutsideUnitInterval) {
  for (double d : {0.0, -0.1, 1.5}) {
    CodecConfig c = TopK();
    c.density = d;
    ExpectRejected(c, "density", "must be in (0, 1]");
  }
  CodecConfig c = TopK();
  c.type = "randomk";
  c.density = std::nan("");
  ExpectRejected(c, "density", "nan");
  c.density = 1.0;
  EXPECT_TRUE(MakeCodec(c).ok());
}

TEST(CodecConfigTest, RejectsBadOneBitChunk) {
  CodecConfig c;
  c.type = "onebit";
  c.onebit_chunk = 0;
  ExpectRejected(c, "onebit_chunk", "0");
  c.onebit_chunk = 48;
  ExpectRejected(c, "onebit_chunk", "48");
  c.onebit_chunk = 96;
  EXPECT_TRUE(MakeCodec(c).ok());
}

TEST(CodecConfigTest, RejectsBadRatesAndTolerances) {
  CodecConfig c = TopK();
  c.sample_rate = 0.0;
  ExpectRejected(c, "sample_rate", "0");
  c = TopK();
  c.count_tolerance = 1.0;
  ExpectRejected(c, "count_tolerance", "1");
  c = TopK();
  c.clip_norm = -1.0f;
  ExpectRejected(c, "clip_norm", "-1");
}

TEST(CodecConfigTest, MomentumNeedsErrorFeedbackAndSparseCodec) {
  CodecConfig c = TopK();
  c.dgc_momentum = 0.9f;
  ExpectRejected(c, "dgc_momentum", "error_feedback");
  c.error_feedback = true;
  EXPECT_TRUE(MakeCodec(c).ok());
  c.type = "onebit";
  ExpectRejected(c, "dgc_momentum", "onebit");
  c = TopK();
  c.error_feedback = true;
  c.dgc_momentum = 1.0f;
  ExpectRejected(c, "dgc_momentum", "[0, 1)");
}

TEST(CodecConfigTest, SchedulesNeedStepsStartAndSparseCodec) {
  CodecConfig c = TopK();
  c.schedule.type = "warmup";
  ExpectRejected(c, "schedule.steps", "0");
  c.schedule.steps = 100;
  c.schedule.start_density = 0.001;  // below the final density
  ExpectRejected(c, "schedule.start_density", "0.001");
  c.schedule.start_density = 0.25;
  EXPECT_TRUE(MakeCodec(c).ok());
  c.type = "fp16";
  ExpectRejected(c, "schedule.type", "fp16");
}

TEST(CodecConfigTest, BucketBytesMustHoldWholeFloats) {
  CodecConfig c = TopK();
  c.granularity = "bucket";
  c.bucket_bytes = 0;
  ExpectRejected(c, "bucket_bytes", "0");
  c.bucket_bytes = 6;
  ExpectRejected(c, "bucket_bytes", "6");
}

// adaptive_ratio (issue 18): bounds around density, a sparse codec.
TEST(CodecConfigTest, AdaptiveRatioBoundsAndCodecAreChecked) {
  CodecConfig c = TopK();
  c.density = 0.05;
  c.adaptive_ratio.enabled = true;
  c.adaptive_ratio.min_density = 0.01;
  c.adaptive_ratio.max_density = 0.2;
  EXPECT_TRUE(MakeCodec(c).ok());
  CodecConfig bad = c;
  bad.adaptive_ratio.min_density = 0.3;  // min > max, and above density
  ExpectRejected(bad, "adaptive_ratio.min_density", "must be in (0, density = 0.05");
  bad = c;
  bad.adaptive_ratio.min_density = 0;
  ExpectRejected(bad, "adaptive_ratio.min_density", "0");
  bad = c;
  bad.adaptive_ratio.max_density = 0.02;  // below density
  ExpectRejected(bad, "adaptive_ratio.max_density", "must be in [density = 0.05");
  bad = c;
  bad.adaptive_ratio.max_density = 1.5;
  ExpectRejected(bad, "adaptive_ratio.max_density", "1.5");
  bad = c;
  bad.adaptive_ratio.factor = 1.0;
  ExpectRejected(bad, "adaptive_ratio.factor", "must be in (1, 10]");
  bad = c;
  bad.adaptive_ratio.margin = 0;
  ExpectRejected(bad, "adaptive_ratio.margin", "must be in (0, 1)");
  bad = c;
  bad.adaptive_ratio.interval_steps = 0;
  ExpectRejected(bad, "adaptive_ratio.interval_steps", "must be >= 1");
  bad = c;
  bad.adaptive_ratio.target = "mean_step_time";
  ExpectRejected(bad, "adaptive_ratio.target", "median_step_time");
  CodecConfig barrier = c;  // the table's consistency decides (config::ValidateTableCodecs)
  barrier.adaptive_ratio.async_barrier = true;
  EXPECT_TRUE(MakeCodec(barrier).ok());
  for (const char* type : {"none", "fp16", "onebit"}) {
    bad = c;
    bad.type = type;
    ExpectRejected(bad, "adaptive_ratio", std::string("(a density to move), not ") + type);
  }
  c.type = "randomk";
  EXPECT_TRUE(MakeCodec(c).ok());
}

}  // namespace
}  // namespace osprey::codec
