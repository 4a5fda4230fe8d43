// DenseCompressor's density trajectory: bounded, evenly spaced, first and last step included,
// following the codec's warm-up schedule.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "worker/compression.h"

namespace osprey::worker {
namespace {

codec::CodecConfig WarmupTopK(uint64_t schedule_steps) {
  codec::CodecConfig c;
  c.type = "topk";
  c.density = 0.01;
  c.min_compress_bytes = 0;
  c.schedule.type = "warmup";
  c.schedule.start_density = 0.25;
  c.schedule.steps = schedule_steps;
  return c;
}

// Encodes `steps` steps of one message per server.
CompressionStats EncodeSteps(DenseCompressor* comp, int steps, int servers, size_t n) {
  std::vector<float> grad(n);
  for (size_t i = 0; i < n; ++i) grad[i] = std::sin(static_cast<float>(i) * 0.37f);
  for (int step = 0; step < steps; ++step) {
    for (int server = 0; server < servers; ++server) {
      proto::Header header;
      Buffer values;
      Status st = comp->Encode(/*table=*/1, server, grad.data(), n, &header, &values);
      EXPECT_TRUE(st.ok()) << st.ToString();
    }
  }
  return comp->stats();
}

TEST(CompressionTrajectoryTest, EvenlySpacedPointsFromTheStartDensityToTheFinalOne) {
  auto comp = DenseCompressor::Create(WarmupTopK(50), 1);
  ASSERT_TRUE(comp.ok()) << comp.status().ToString();
  CompressionStats st = EncodeSteps(comp->get(), 100, 2, 1000);
  const std::vector<DensityPoint>& t = st.density_trajectory;
  ASSERT_LE(t.size(), kMaxTrajectoryPoints);
  ASSERT_EQ(t.size(), 8u);
  const uint64_t want_steps[] = {0, 16, 32, 48, 64, 80, 96, 99};
  for (size_t i = 0; i < t.size(); ++i) EXPECT_EQ(t[i].step, want_steps[i]) << i;
  EXPECT_DOUBLE_EQ(t.front().density, 0.25) << "step 0 runs at the warm-up start density";
  EXPECT_NEAR(t[1].density, 0.25 * std::pow(0.01 / 0.25, 16.0 / 50), 0.001);
  EXPECT_DOUBLE_EQ(t.back().density, 0.01) << "after the warm-up: the final density";
  EXPECT_DOUBLE_EQ(st.last_density, 0.01);
  for (size_t i = 1; i < t.size(); ++i) EXPECT_LE(t[i].density, t[i - 1].density) << i;
}

TEST(CompressionTrajectoryTest, ShortRunKeepsEveryStepAndNoCompressionKeepsNone) {
  auto comp = DenseCompressor::Create(WarmupTopK(3), 1);
  ASSERT_TRUE(comp.ok());
  CompressionStats st = EncodeSteps(comp->get(), 5, 1, 400);
  ASSERT_EQ(st.density_trajectory.size(), 5u);
  for (size_t i = 0; i < 5; ++i) EXPECT_EQ(st.density_trajectory[i].step, i);
  EXPECT_DOUBLE_EQ(st.density_trajectory[0].density, 100.0 / 400);
  EXPECT_DOUBLE_EQ(st.density_trajectory[4].density, 4.0 / 400);

  codec::CodecConfig small = WarmupTopK(3);
  small.min_compress_bytes = 1 << 20;  // every message goes out as fp32
  auto plain = DenseCompressor::Create(small, 1);
  ASSERT_TRUE(plain.ok());
  EXPECT_TRUE(EncodeSteps(plain->get(), 5, 1, 400).density_trajectory.empty());
}

TEST(CompressionTrajectoryTest, LongRunStaysBounded) {
  auto comp = DenseCompressor::Create(WarmupTopK(10), 1);
  ASSERT_TRUE(comp.ok());
  CompressionStats st = EncodeSteps(comp->get(), 1000, 1, 200);
  const std::vector<DensityPoint>& t = st.density_trajectory;
  ASSERT_LE(t.size(), kMaxTrajectoryPoints);
  ASSERT_GE(t.size(), 4u);
  EXPECT_EQ(t.front().step, 0u);
  EXPECT_EQ(t.back().step, 999u);
  const uint64_t stride = t[1].step;
  for (size_t i = 1; i + 1 < t.size(); ++i) EXPECT_EQ(t[i].step, i * stride) << i;
}

}  // namespace
}  // namespace osprey::worker
