// Weight decay, clipping and the staleness modifiers (lr_scale,
// momentum_scale), with expected numbers computed by hand.
#include <cmath>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "server/optim/optimizer.h"

namespace osprey::server {
namespace {

std::unique_ptr<Optimizer> MakeOpt(const OptimizerConfig& c) {
  auto made = Optimizer::Make(c);
  EXPECT_TRUE(made.ok()) << made.status().ToString();
  return std::move(made).value();
}

// Applies `steps` gradients to a fresh row starting at w0; returns the weights.
std::vector<float> ApplySteps(const Optimizer& opt, std::vector<float> w0,
                       const std::vector<std::vector<float>>& steps, ApplyOptions o = {}) {
  const size_t dim = w0.size();
  std::vector<float> row(dim + opt.state_floats(dim));
  std::copy(w0.begin(), w0.end(), row.begin());
  opt.InitState(row.data() + dim, dim);
  for (const auto& g : steps) opt.Apply(row.data(), row.data() + dim, g.data(), dim, o);
  row.resize(dim);
  return row;
}

OptimizerConfig Config(OptimizerType type, float lr) {
  OptimizerConfig c;
  c.type = type;
  c.lr = lr;
  return c;
}

TEST(OptimizerOptionsTest, WeightDecayIsCoupledL2ForSgd) {
  OptimizerConfig c = Config(OptimizerType::kSgd, 0.1f);
  c.weight_decay = 0.5f;
  // g' = g + wd * w = 1 + 0.5 * 2 = 2; w = 2 - 0.1 * 2.
  EXPECT_FLOAT_EQ(ApplySteps(*MakeOpt(c), {2.0f}, {{1.0f}})[0], 1.8f);
}

TEST(OptimizerOptionsTest, WeightDecayEntersAdagradAccumulator) {
  OptimizerConfig c = Config(OptimizerType::kAdagrad, 0.1f);
  c.initial_accumulator = 0.0f;
  c.weight_decay = 1.0f;
  // g' = 0 + 1 * 3 = 3; acc = 9; w = 3 - 0.1 * 3 / 3.
  EXPECT_NEAR(ApplySteps(*MakeOpt(c), {3.0f}, {{0.0f}})[0], 2.9, 1e-6);
}

TEST(OptimizerOptionsTest, WeightDecayIsDecoupledForAdam) {
  OptimizerConfig c = Config(OptimizerType::kAdam, 0.1f);
  c.weight_decay = 0.5f;
  auto opt = MakeOpt(c);
  // Zero gradient: m = v = 0 so the Adam term is 0; only w *= 1 - lr * wd.
  EXPECT_FLOAT_EQ(ApplySteps(*opt, {2.0f}, {{0.0f}})[0], 2.0f * 0.95f);
  // Non-zero gradient: decay, then exactly lr * sign(g) on step 1; the
  // gradient is not modified by the decay (coupled L2 would give g' = 3).
  EXPECT_NEAR(ApplySteps(*opt, {2.0f}, {{-1.0f}})[0], 1.9 + 0.1, 1e-6);
}

TEST(OptimizerOptionsTest, WeightDecayIsAddedToFtrlGradient) {
  OptimizerConfig c = Config(OptimizerType::kFtrl, 0.01f);
  c.ftrl_alpha = 1.0f;
  c.ftrl_beta = 1.0f;
  auto plain = MakeOpt(c);
  c.weight_decay = 0.5f;
  auto decayed = MakeOpt(c);
  // Step 1 from w = 0 (decay term 0): z = 1, n = 1, w = -1 / (1 + 1) = -0.5.
  // Step 2, g = 0: without decay nothing moves; with it g' = 0.5 * -0.5.
  const std::vector<std::vector<float>> g = {{1.0f}, {0.0f}};
  EXPECT_FLOAT_EQ(ApplySteps(*plain, {0.0f}, g)[0], -0.5f);
  const double gd = -0.25, sigma = std::sqrt(1.0 + gd * gd) - 1.0;
  const double z = 1.0 + gd - sigma * -0.5;
  EXPECT_NEAR(ApplySteps(*decayed, {0.0f}, g)[0], -z / (1.0 + std::sqrt(1.0 + gd * gd)), 1e-6);
}

TEST(OptimizerOptionsTest, ClipValueClampsEachElement) {
  OptimizerConfig c = Config(OptimizerType::kSgd, 1.0f);
  c.clip_value = 1.0f;
  std::vector<float> g = {5.0f, -5.0f, 0.5f, -1.0f};
  auto w = ApplySteps(*MakeOpt(c), {0, 0, 0, 0}, {g});
  EXPECT_EQ(w, (std::vector<float>{-1.0f, 1.0f, -0.5f, 1.0f}));
  EXPECT_EQ(g, (std::vector<float>{5.0f, -5.0f, 0.5f, -1.0f}));  // caller's buffer untouched
}

TEST(OptimizerOptionsTest, ClipNormScalesRowToNorm) {
  OptimizerConfig c = Config(OptimizerType::kSgd, 1.0f);
  c.clip_norm = 1.0f;
  auto opt = MakeOpt(c);
  auto w = ApplySteps(*opt, {0, 0}, {{3.0f, 4.0f}});  // norm 5 -> scaled by 1/5
  EXPECT_FLOAT_EQ(w[0], -0.6f);
  EXPECT_FLOAT_EQ(w[1], -0.8f);
  w = ApplySteps(*opt, {0, 0}, {{0.3f, 0.4f}});  // norm 0.5 <= 1: unchanged
  EXPECT_FLOAT_EQ(w[0], -0.3f);
  EXPECT_FLOAT_EQ(w[1], -0.4f);
}

TEST(OptimizerOptionsTest, ClipNormOnLongChunkUsesWholeChunk) {
  OptimizerConfig c = Config(OptimizerType::kSgd, 1.0f);
  c.clip_norm = 2.0f;
  std::vector<float> g(1001, 0.1f);  // norm = 0.1 * sqrt(1001) ~ 3.164
  auto w = ApplySteps(*MakeOpt(c), std::vector<float>(1001, 0.0f), {g});
  const double expected = -0.1 * 2.0 / (0.1 * std::sqrt(1001.0));
  for (size_t i = 0; i < w.size(); ++i) ASSERT_NEAR(w[i], expected, 1e-6) << i;
}

TEST(OptimizerOptionsTest, ClipValueAppliesBeforeClipNorm) {
  OptimizerConfig c = Config(OptimizerType::kSgd, 1.0f);
  c.clip_value = 4.0f;
  c.clip_norm = 2.5f;
  // {10, 3} -> {4, 3} (norm 5) -> {2, 1.5}.
  auto w = ApplySteps(*MakeOpt(c), {0, 0}, {{10.0f, 3.0f}});
  EXPECT_FLOAT_EQ(w[0], -2.0f);
  EXPECT_FLOAT_EQ(w[1], -1.5f);
}

TEST(OptimizerOptionsTest, LrScaleScalesTheStep) {
  for (OptimizerType type : {OptimizerType::kSgd, OptimizerType::kMomentum,
                             OptimizerType::kNesterov, OptimizerType::kAdagrad,
                             OptimizerType::kAdam}) {
    auto opt = MakeOpt(Config(type, 0.1f));
    const float full = ApplySteps(*opt, {1.0f}, {{0.5f}})[0] - 1.0f;
    const float half = ApplySteps(*opt, {1.0f}, {{0.5f}}, ApplyOptions{0.5f, 1.0f})[0] - 1.0f;
    EXPECT_NEAR(half, 0.5f * full, 1e-6) << OptimizerTypeName(type);
    EXPECT_NE(full, 0.0f) << OptimizerTypeName(type);
  }
}

TEST(OptimizerOptionsTest, LrScaleZeroFreezesWeightsButUpdatesState) {
  OptimizerConfig c = Config(OptimizerType::kAdagrad, 0.1f);
  auto opt = MakeOpt(c);
  std::vector<float> row = {1.0f, 0.0f};
  opt->InitState(row.data() + 1, 1);
  const float g = 2.0f;
  opt->Apply(row.data(), row.data() + 1, &g, 1, ApplyOptions{0.0f, 1.0f});
  EXPECT_EQ(row[0], 1.0f);
  EXPECT_FLOAT_EQ(row[1], 0.1f + 4.0f);
  // Negative and NaN scales are treated as 0, never as ascent.
  opt->Apply(row.data(), row.data() + 1, &g, 1, ApplyOptions{-1.0f, 1.0f});
  opt->Apply(row.data(), row.data() + 1, &g, 1, ApplyOptions{std::nanf(""), 1.0f});
  EXPECT_EQ(row[0], 1.0f);
}

TEST(OptimizerOptionsTest, FtrlLrScaleScalesTheGradient) {
  OptimizerConfig c = Config(OptimizerType::kFtrl, 0.01f);
  c.ftrl_l1 = 0.01f;
  auto opt = MakeOpt(c);
  const std::vector<std::vector<float>> g = {{0.8f, -0.4f}, {0.2f, 0.6f}};
  std::vector<std::vector<float>> g_scaled = g;
  for (auto& v : g_scaled)
    for (float& x : v) x *= 0.25f;
  auto scaled = ApplySteps(*opt, {0.1f, 0.0f}, g, ApplyOptions{0.25f, 1.0f});
  auto direct = ApplySteps(*opt, {0.1f, 0.0f}, g_scaled);
  EXPECT_EQ(scaled, direct);
  EXPECT_NE(scaled, ApplySteps(*opt, {0.1f, 0.0f}, g));
}

TEST(OptimizerOptionsTest, MomentumScaleDecaysMomentum) {
  OptimizerConfig c = Config(OptimizerType::kMomentum, 0.1f);
  c.momentum = 0.8f;
  auto opt = MakeOpt(c);
  const std::vector<std::vector<float>> g = {{1.0f}, {1.0f}};
  // Scale 0: plain SGD, w = 1 - 0.1 - 0.1.
  EXPECT_FLOAT_EQ(ApplySteps(*opt, {1.0f}, g, ApplyOptions{1.0f, 0.0f})[0], 0.8f);
  // Scale 0.5: mu = 0.4; v = 1 then 1.4; w = 1 - 0.1 - 0.14.
  EXPECT_FLOAT_EQ(ApplySteps(*opt, {1.0f}, g, ApplyOptions{1.0f, 0.5f})[0], 0.76f);
  // Above 1 is clamped to 1: mu = 0.8; w = 1 - 0.1 - 0.18.
  EXPECT_FLOAT_EQ(ApplySteps(*opt, {1.0f}, g, ApplyOptions{1.0f, 3.0f})[0], 0.72f);
  EXPECT_FLOAT_EQ(ApplySteps(*opt, {1.0f}, g)[0], 0.72f);
}

TEST(OptimizerOptionsTest, MomentumScaleAppliesToNesterov) {
  OptimizerConfig c = Config(OptimizerType::kNesterov, 0.1f);
  c.momentum = 0.5f;
  auto opt = MakeOpt(c);
  // mu = 0.25, g = 1: v = 1, w -= 0.1 * (1 + 0.25).
  EXPECT_FLOAT_EQ(ApplySteps(*opt, {1.0f}, {{1.0f}}, ApplyOptions{1.0f, 0.5f})[0], 0.875f);
}

TEST(OptimizerOptionsTest, ConcurrentApplyOnDistinctRowsMatchesSerial) {
  OptimizerConfig c = Config(OptimizerType::kAdam, 0.01f);
  auto opt = MakeOpt(c);
  constexpr size_t kDim = 24, kRows = 64;
  const size_t stride = kDim + opt->state_floats(kDim);
  auto run = [&](std::vector<float>& table, size_t first, size_t step) {
    std::vector<float> g(kDim);
    for (size_t r = first; r < kRows; r += step) {
      for (size_t i = 0; i < kDim; ++i) g[i] = 0.01f * static_cast<float>(r + i) - 0.3f;
      for (int s = 0; s < 50; ++s)
        opt->Apply(&table[r * stride], &table[r * stride + kDim], g.data(), kDim, {});
    }
  };
  std::vector<float> serial(kRows * stride), parallel(kRows * stride);
  for (std::vector<float>* t : {&serial, &parallel})
    for (size_t r = 0; r < kRows; ++r) opt->InitState(&(*t)[r * stride + kDim], kDim);
  run(serial, 0, 1);
  std::thread a([&] { run(parallel, 0, 2); });
  std::thread b([&] { run(parallel, 1, 2); });
  a.join();
  b.join();
  EXPECT_EQ(serial, parallel);
}

}  // namespace
}  // namespace osprey::server
