#include <gtest/gtest.h>

#include <cmath>

#include "common/codec/codec.h"
#include "common/codec/schedule.h"

namespace osprey::codec {
namespace {

DensityScheduleConfig Schedule(const char* type, double start, uint64_t steps) {
  DensityScheduleConfig s;
  s.type = type;
  s.start_density = start;
  s.steps = steps;
  return s;
}

TEST(ScheduleTest, NoneIsConstant) {
  DensitySchedule s(DensityScheduleConfig{}, 0.01);
  EXPECT_EQ(s.DensityAt(0), 0.01);
  EXPECT_EQ(s.DensityAt(1000000), 0.01);
}

TEST(ScheduleTest, WarmupFallsGeometricallyToTheTarget) {
  DensitySchedule s(Schedule("warmup", 0.25, 4), 0.001);
  EXPECT_DOUBLE_EQ(s.DensityAt(0), 0.25);
  const double ratio = std::pow(0.001 / 0.25, 0.25);
  for (uint64_t t = 1; t < 4; ++t) EXPECT_NEAR(s.DensityAt(t) / s.DensityAt(t - 1), ratio, 1e-12) << t;
  EXPECT_DOUBLE_EQ(s.DensityAt(4), 0.001);
  EXPECT_DOUBLE_EQ(s.DensityAt(400), 0.001);
}

TEST(ScheduleTest, AnnealIsQuadratic) {
  DensitySchedule s(Schedule("anneal", 0.5, 100), 0.1);
  EXPECT_DOUBLE_EQ(s.DensityAt(0), 0.5);
  EXPECT_DOUBLE_EQ(s.DensityAt(50), 0.1 + 0.4 * 0.25);
  EXPECT_DOUBLE_EQ(s.DensityAt(90), 0.1 + 0.4 * 0.01);
  EXPECT_DOUBLE_EQ(s.DensityAt(100), 0.1);
  for (uint64_t t = 1; t <= 100; ++t) EXPECT_LE(s.DensityAt(t), s.DensityAt(t - 1));
}

TEST(ScheduleTest, TopKFollowsTheScheduleStepByStep) {
  CodecConfig c;
  c.type = "topk";
  c.density = 0.01;
  c.schedule = Schedule("warmup", 0.25, 3);
  auto codec = MakeCodec(c);
  ASSERT_TRUE(codec.ok());
  std::vector<float> g(10000);
  for (size_t i = 0; i < g.size(); ++i) g[i] = static_cast<float>(i % 97) - 48.0f;
  CodecState state;
  Encoded e;
  DensitySchedule expected(c.schedule, c.density);
  for (uint64_t step = 0; step < 5; ++step) {
    ASSERT_TRUE((*codec)->Encode(g.data(), g.size(), &state, &e).ok());
    EXPECT_EQ(e.meta.count, static_cast<uint64_t>(std::llround(expected.DensityAt(step) * 10000))) << step;
  }
  EXPECT_EQ(e.meta.count, 100u);
}

}  // namespace
}  // namespace osprey::codec
