#include <gtest/gtest.h>

#include "common/codec/gradient_compressor.h"
#include "tests/codec/codec_test_util.h"

namespace osprey::codec {
namespace {

TEST(GradientCompressorTest, TensorGranularityLeavesSmallTensorsUncompressed) {
  CodecConfig c;
  c.type = "topk";
  c.min_compress_bytes = 4096;
  const auto units = PlanUnits(c, {10, 5000, 1024, 1023});
  ASSERT_EQ(units.size(), 4u);
  EXPECT_FALSE(units[0].compressed);
  EXPECT_TRUE(units[1].compressed);
  EXPECT_TRUE(units[2].compressed);  // exactly min_compress_bytes
  EXPECT_FALSE(units[3].compressed);
  EXPECT_EQ(units[1].offset, 10u);
  EXPECT_EQ(units[3].offset, 6034u);
}

TEST(GradientCompressorTest, BucketGranularityIgnoresTensorBoundaries) {
  CodecConfig c;
  c.type = "onebit";
  c.granularity = "bucket";
  c.bucket_bytes = 4000;  // 1000 floats
  c.min_compress_bytes = 2000;
  const auto units = PlanUnits(c, {700, 700, 900});
  ASSERT_EQ(units.size(), 3u);
  EXPECT_EQ(units[0].length, 1000u);
  EXPECT_EQ(units[2].offset, 2000u);
  EXPECT_EQ(units[2].length, 300u);
  EXPECT_TRUE(units[1].compressed);
  EXPECT_FALSE(units[2].compressed);  // 1200 bytes < 2000
}

TEST(GradientCompressorTest, EncodesEveryUnitAndDecodesBack) {
  CodecConfig c;
  c.type = "topk";
  c.density = 0.1;
  c.error_feedback = true;
  c.min_compress_bytes = 400;
  const std::vector<size_t> lengths = {50, 3000, 20, 1000};
  auto made = GradientCompressor::Create(c, lengths, 5);
  ASSERT_TRUE(made.ok()) << made.status().ToString();
  GradientCompressor& gc = **made;
  const auto g = testing::RandomGradient(gc.total_length(), 50);
  std::vector<float> decoded(gc.total_length(), 0.0f);
  Encoded e;
  for (size_t u = 0; u < gc.units().size(); ++u) {
    ASSERT_TRUE(gc.EncodeUnitAt(u, g.data(), &e).ok());
    EXPECT_EQ(e.meta.codec, gc.units()[u].compressed ? CodecId::kTopK : CodecId::kNone);
    ASSERT_TRUE(gc.DecodeAddUnit(u, e.view(), decoded.data(), 1.0f).ok());
  }
  for (size_t i = 0; i < 50; ++i) EXPECT_EQ(decoded[i], g[i]);  // uncompressed unit: exact
  const EncodeUnit& big = gc.units()[1];
  size_t sent = 0;
  for (size_t i = big.offset; i < big.offset + big.length; ++i) sent += decoded[i] != 0.0f;
  EXPECT_EQ(sent, 300u);  // its own k: 10% of 3000
  EXPECT_EQ(gc.EncodeUnitAt(9, g.data(), &e).code(), StatusCode::kOutOfRange);
  EXPECT_EQ(gc.state(1).step, 1u);
}

TEST(GradientCompressorTest, RejectsBadConfig) {
  CodecConfig c;
  c.type = "zstd";
  EXPECT_EQ(GradientCompressor::Create(c, {10}, 1).status().code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace osprey::codec
