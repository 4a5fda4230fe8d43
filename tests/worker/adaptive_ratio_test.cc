// AdaptiveRatio (worker/adaptive_ratio.h): the per-node density controller, fed synthetic step
// samples; and DenseCompressor::SetAdaptive, which carries its decision into the encoded count.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "worker/adaptive_ratio.h"
#include "worker/compression.h"

namespace osprey::worker {
namespace {

codec::CodecConfig Adaptive(double density = 0.05) {
  codec::CodecConfig c;
  c.type = "topk";
  c.density = density;
  c.min_compress_bytes = 0;
  c.adaptive_ratio.enabled = true;
  c.adaptive_ratio.min_density = 0.01;
  c.adaptive_ratio.max_density = 0.2;
  c.adaptive_ratio.factor = 2.0;
  c.adaptive_ratio.margin = 0.15;
  c.adaptive_ratio.interval_steps = 10;
  return c;
}

StepSample Sample(int64_t step, double own, double push, double encode, double median) {
  StepSample s;
  s.step = step;
  s.own_seconds = own;
  s.push_seconds = push;
  s.encode_seconds = encode;
  s.median_seconds = median;
  return s;
}

TEST(AdaptiveRatioTest, NetworkBoundSlowWorkerLowersDensityDownToTheBound) {
  AdaptiveRatio a(Adaptive());
  // 2x the median, 80% of it in pushes: every interval halves the density until min_density.
  std::vector<double> seen;
  for (int64_t step = 0; step < 100; ++step) {
    if (a.Update(Sample(step, 0.02, 0.016, 0.001, 0.01))) seen.push_back(a.density());
  }
  ASSERT_EQ(seen.size(), 3u);
  EXPECT_DOUBLE_EQ(seen[0], 0.025);
  EXPECT_DOUBLE_EQ(seen[1], 0.0125);
  EXPECT_DOUBLE_EQ(seen[2], 0.01);  // clamped at the bound
  EXPECT_DOUBLE_EQ(a.min_reached(), 0.01);
  EXPECT_DOUBLE_EQ(a.max_reached(), 0.05);
  EXPECT_EQ(a.changes(), 3u);
  EXPECT_FALSE(a.cheap_select());
}

TEST(AdaptiveRatioTest, StillSlowAtTheBoundLeavesTheBarrierOnlyWithAsyncBarrier) {
  codec::CodecConfig c = Adaptive();
  AdaptiveRatio plain(c);
  c.adaptive_ratio.async_barrier = true;
  AdaptiveRatio barrier(c);
  // Network-bound at 2x the median: moves at steps 0, 10, 20 reach min_density 0.01; at step 30
  // nothing is left to move.
  int64_t left_at = -1;
  for (int64_t step = 0; step < 60; ++step) {
    plain.Update(Sample(step, 0.02, 0.016, 0.001, 0.01));
    barrier.Update(Sample(step, 0.02, 0.016, 0.001, 0.01));
    if (left_at < 0 && barrier.barrier_exempt()) left_at = step;
  }
  EXPECT_EQ(left_at, 30) << "one interval after the last move, still slow at the bound";
  EXPECT_TRUE(barrier.barrier_exempt());
  EXPECT_EQ(barrier.barrier_exits(), 1u);
  EXPECT_DOUBLE_EQ(barrier.density(), 0.01);
  EXPECT_FALSE(plain.barrier_exempt()) << "without async_barrier a worker never leaves";
  EXPECT_EQ(plain.barrier_exits(), 0u);
  // Back within the band (the link recovered): it rejoins first, and relaxes the density later.
  EXPECT_FALSE(barrier.Update(Sample(60, 0.0105, 0.002, 0.001, 0.01)));
  EXPECT_FALSE(barrier.barrier_exempt());
  EXPECT_DOUBLE_EQ(barrier.density(), 0.01);
  EXPECT_TRUE(barrier.Update(Sample(70, 0.005, 0.001, 0.001, 0.01)));
  EXPECT_DOUBLE_EQ(barrier.density(), 0.02);
  EXPECT_EQ(barrier.barrier_exits(), 1u);
}

TEST(AdaptiveRatioTest, MovesAtMostOncePerInterval) {
  AdaptiveRatio a(Adaptive());
  EXPECT_TRUE(a.Update(Sample(5, 0.02, 0.016, 0.001, 0.01)));
  for (int64_t step = 6; step < 15; ++step) EXPECT_FALSE(a.Update(Sample(step, 0.02, 0.016, 0.001, 0.01))) << step;
  EXPECT_TRUE(a.Update(Sample(15, 0.02, 0.016, 0.001, 0.01)));
}

TEST(AdaptiveRatioTest, SelectionBoundSlowWorkerCheapensThenRaisesDensity) {
  AdaptiveRatio a(Adaptive());
  // Encoding dominates: first the sampled threshold, then the guide's higher density (x2 up to
  // max_density 0.2).
  ASSERT_TRUE(a.Update(Sample(0, 0.02, 0.002, 0.012, 0.01)));
  EXPECT_TRUE(a.cheap_select());
  EXPECT_DOUBLE_EQ(a.density(), 0.05);
  ASSERT_TRUE(a.Update(Sample(10, 0.02, 0.002, 0.012, 0.01)));
  EXPECT_DOUBLE_EQ(a.density(), 0.1);
  ASSERT_TRUE(a.Update(Sample(20, 0.02, 0.002, 0.012, 0.01)));
  EXPECT_DOUBLE_EQ(a.density(), 0.2);
  EXPECT_FALSE(a.Update(Sample(30, 0.02, 0.002, 0.012, 0.01)));  // at max_density
  EXPECT_DOUBLE_EQ(a.max_reached(), 0.2);
  EXPECT_EQ(a.changes(), 3u);
}

TEST(AdaptiveRatioTest, ImportanceSelectionCannotBeCheapenedSoDensityRises) {
  codec::CodecConfig c = Adaptive();
  c.select = "importance";
  AdaptiveRatio a(c);
  ASSERT_TRUE(a.Update(Sample(0, 0.02, 0.002, 0.012, 0.01)));
  EXPECT_FALSE(a.cheap_select());
  EXPECT_DOUBLE_EQ(a.density(), 0.1);
}

TEST(AdaptiveRatioTest, HoldsNearTheMedianAndWithoutOne) {
  AdaptiveRatio a(Adaptive());
  for (int64_t step = 0; step < 100; ++step) {
    EXPECT_FALSE(a.Update(Sample(step, 0.0105, 0.008, 0.001, 0.01)));  // within the margin
    EXPECT_FALSE(a.Update(Sample(step, 0.05, 0.04, 0.001, 0)));       // no median yet
    EXPECT_FALSE(a.Update(Sample(step, 0.005, 0.001, 0.001, 0.01)));  // faster, at the configured density
  }
  EXPECT_DOUBLE_EQ(a.density(), 0.05);
  EXPECT_EQ(a.changes(), 0u);
}

TEST(AdaptiveRatioTest, FastWorkerRelaxesBackToTheConfiguredDensityNotPastIt) {
  AdaptiveRatio a(Adaptive());
  ASSERT_TRUE(a.Update(Sample(0, 0.02, 0.016, 0.001, 0.01)));
  ASSERT_TRUE(a.Update(Sample(10, 0.02, 0.016, 0.001, 0.01)));
  EXPECT_DOUBLE_EQ(a.density(), 0.0125);
  // Now clearly faster than the median (the slow link went away): back in two moves, then hold.
  ASSERT_TRUE(a.Update(Sample(20, 0.005, 0.001, 0.001, 0.01)));
  EXPECT_DOUBLE_EQ(a.density(), 0.025);
  ASSERT_TRUE(a.Update(Sample(30, 0.005, 0.001, 0.001, 0.01)));
  EXPECT_DOUBLE_EQ(a.density(), 0.05);
  EXPECT_FALSE(a.Update(Sample(40, 0.005, 0.001, 0.001, 0.01)));
  EXPECT_DOUBLE_EQ(a.min_reached(), 0.0125);
}

// SetAdaptive scales the message's k, keeps the warm-up's shape, and switches the selection.
TEST(AdaptiveRatioTest, CompressorSendsTheAdaptiveDensity) {
  constexpr size_t n = 100000;
  std::vector<float> grad(n);
  for (size_t i = 0; i < n; ++i) grad[i] = std::sin(static_cast<float>(i) * 0.37f) * (1.0f + (i % 97));
  auto count = [&](DenseCompressor* comp) {
    proto::Header header;
    Buffer values;
    Status st = comp->Encode(/*table=*/1, /*server=*/0, grad.data(), n, &header, &values);
    EXPECT_TRUE(st.ok()) << st.ToString();
    return header.codec_count();
  };
  auto comp = DenseCompressor::Create(Adaptive(), 1);
  ASSERT_TRUE(comp.ok()) << comp.status().ToString();
  EXPECT_EQ(count(comp->get()), 5000u);
  (*comp)->SetAdaptive(0.01, false);
  EXPECT_EQ(count(comp->get()), 1000u);
  (*comp)->SetAdaptive(0.2, false);
  EXPECT_EQ(count(comp->get()), 20000u);
  // The sampled threshold lands within count_tolerance (5%) of k, not exactly on it.
  (*comp)->SetAdaptive(0.01, true);
  const uint64_t sampled = count(comp->get());
  EXPECT_NEAR(static_cast<double>(sampled), 1000.0, 100.0);

  codec::CodecConfig warm = Adaptive();
  warm.schedule.type = "warmup";
  warm.schedule.start_density = 0.5;
  warm.schedule.steps = 100;
  auto scheduled = DenseCompressor::Create(warm, 1);
  ASSERT_TRUE(scheduled.ok());
  (*scheduled)->SetAdaptive(0.025, false);  // half the configured end point: half the step-0 density
  EXPECT_EQ(count(scheduled->get()), 25000u);
}

}  // namespace
}  // namespace osprey::worker
