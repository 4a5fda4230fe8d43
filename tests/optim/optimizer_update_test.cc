// Checks every update rule against references written here, in double
// precision, straight from the papers / torch.optim docs (not from the code
// under test), plus hand-computed numbers for the first steps.
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include <gtest/gtest.h>

#include "server/optim/optimizer.h"

namespace osprey::server {
namespace {

using Vec = std::vector<double>;

// A row as the store lays it out: dim weights, then the optimizer state.
struct Row {
  Row(const Optimizer& opt, const std::vector<float>& w0) : dim(w0.size()) {
    data.resize(dim + opt.state_floats(dim));
    std::copy(w0.begin(), w0.end(), data.begin());
    opt.InitState(data.data() + dim, dim);
  }
  void Step(const Optimizer& opt, const std::vector<float>& g, ApplyOptions o = {}) {
    opt.Apply(data.data(), data.data() + dim, g.data(), dim, o);
  }
  float w(size_t i) const { return data[i]; }
  size_t dim;
  std::vector<float> data;
};

std::unique_ptr<Optimizer> MakeOpt(const OptimizerConfig& c) {
  auto made = Optimizer::Make(c);
  EXPECT_TRUE(made.ok()) << made.status().ToString();
  return std::move(made).value();
}

// dim 19: one 16-wide AVX2 body plus a scalar tail of 3 in every loop.
constexpr size_t kDim = 19;
constexpr int kSteps = 5;

// Gradients in +-[0.05, 2] so that no denominator is near eps.
std::vector<std::vector<float>> RandomGrads(uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> mag(0.05f, 2.0f);
  std::vector<std::vector<float>> out(kSteps, std::vector<float>(kDim));
  for (auto& g : out)
    for (float& x : g) x = (rng() & 1) ? mag(rng) : -mag(rng);
  return out;
}

std::vector<float> RandomWeights(uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  std::vector<float> w(kDim);
  for (float& x : w) x = u(rng);
  return w;
}

void ExpectRowNear(const Row& row, const Vec& ref, const char* what) {
  for (size_t i = 0; i < ref.size(); ++i) {
    EXPECT_NEAR(row.w(i), ref[i], 2e-5 * std::max(1.0, std::fabs(ref[i]))) << what << " i=" << i;
  }
}

// Runs kSteps of `opt` and of `ref_step(w, state, g)` from the same start.
template <typename RefStep>
void CompareWithReference(const OptimizerConfig& c, Vec ref_state, RefStep ref_step,
                          const char* what) {
  auto opt = MakeOpt(c);
  std::vector<float> w0 = RandomWeights(7);
  Row row(*opt, w0);
  Vec w(w0.begin(), w0.end());
  for (const auto& g : RandomGrads(11)) {
    row.Step(*opt, g);
    for (size_t i = 0; i < kDim; ++i) ref_step(w, ref_state, i, static_cast<double>(g[i]));
    ExpectRowNear(row, w, what);
  }
}

TEST(OptimizerUpdateTest, SgdHandComputed) {
  OptimizerConfig c;
  c.lr = 0.1f;
  auto opt = MakeOpt(c);
  EXPECT_EQ(opt->state_floats(3), 0u);
  Row row(*opt, {1.0f, -2.0f, 0.5f});
  row.Step(*opt, {0.5f, -1.0f, 2.0f});
  EXPECT_FLOAT_EQ(row.w(0), 0.95f);
  EXPECT_FLOAT_EQ(row.w(1), -1.9f);
  EXPECT_FLOAT_EQ(row.w(2), 0.3f);
}

TEST(OptimizerUpdateTest, MomentumMatchesTorchForm) {
  OptimizerConfig c;
  c.type = OptimizerType::kMomentum;
  c.lr = 0.05f;
  c.momentum = 0.8f;
  CompareWithReference(c, Vec(kDim, 0.0), [](Vec& w, Vec& v, size_t i, double g) {
    v[i] = 0.8 * v[i] + g;
    w[i] -= 0.05 * v[i];
  }, "momentum");
}

TEST(OptimizerUpdateTest, MomentumTwoStepsByHand) {
  OptimizerConfig c;
  c.type = OptimizerType::kMomentum;
  c.lr = 0.1f;
  c.momentum = 0.5f;
  auto opt = MakeOpt(c);
  Row row(*opt, {1.0f});
  row.Step(*opt, {1.0f});  // v = 1, w = 0.9
  EXPECT_FLOAT_EQ(row.w(0), 0.9f);
  row.Step(*opt, {1.0f});  // v = 1.5, w = 0.75
  EXPECT_FLOAT_EQ(row.w(0), 0.75f);
  EXPECT_FLOAT_EQ(row.data[1], 1.5f);
}

TEST(OptimizerUpdateTest, NesterovMatchesTorchForm) {
  OptimizerConfig c;
  c.type = OptimizerType::kNesterov;
  c.lr = 0.05f;
  c.momentum = 0.9f;
  CompareWithReference(c, Vec(kDim, 0.0), [](Vec& w, Vec& v, size_t i, double g) {
    v[i] = 0.9 * v[i] + g;
    w[i] -= 0.05 * (g + 0.9 * v[i]);
  }, "nesterov");
}

TEST(OptimizerUpdateTest, AdagradMatchesReference) {
  OptimizerConfig c;
  c.type = OptimizerType::kAdagrad;
  c.lr = 0.1f;
  c.initial_accumulator = 0.1f;
  c.eps = 1e-8f;
  CompareWithReference(c, Vec(kDim, 0.1), [](Vec& w, Vec& a, size_t i, double g) {
    a[i] += g * g;
    w[i] -= 0.1 * g / (std::sqrt(a[i]) + 1e-8);
  }, "adagrad");
}

TEST(OptimizerUpdateTest, AdagradFirstStepByHand) {
  OptimizerConfig c;
  c.type = OptimizerType::kAdagrad;
  c.lr = 0.5f;
  c.initial_accumulator = 0.0f;
  auto opt = MakeOpt(c);
  Row row(*opt, {1.0f, 1.0f});
  row.Step(*opt, {2.0f, -0.25f});  // acc = g^2, step = lr * sign(g)
  EXPECT_FLOAT_EQ(row.w(0), 0.5f);
  EXPECT_FLOAT_EQ(row.w(1), 1.5f);
  EXPECT_FLOAT_EQ(row.data[2], 4.0f);
}

// Reference Adam (Kingma & Ba, Algorithm 1, torch's eps placement), one row.
struct RefAdam {
  double lr, b1, b2, eps;
  Vec m = Vec(kDim, 0.0), v = Vec(kDim, 0.0);
  int t = 0;
  void Step(Vec& w, const std::vector<float>& g) {
    ++t;
    for (size_t i = 0; i < w.size(); ++i) {
      m[i] = b1 * m[i] + (1 - b1) * g[i];
      v[i] = b2 * v[i] + (1 - b2) * double(g[i]) * g[i];
      const double m_hat = m[i] / (1 - std::pow(b1, t));
      const double v_hat = v[i] / (1 - std::pow(b2, t));
      w[i] -= lr * m_hat / (std::sqrt(v_hat) + eps);
    }
  }
};

uint32_t AdamStepCount(const Row& row) {
  uint32_t t;
  std::memcpy(&t, &row.data[row.dim + 2 * row.dim], sizeof(t));
  return t;
}

TEST(OptimizerUpdateTest, AdamMatchesReferenceWithBiasCorrection) {
  OptimizerConfig c;
  c.type = OptimizerType::kAdam;
  c.lr = 0.01f;
  c.beta1 = 0.9f;
  c.beta2 = 0.999f;
  auto opt = MakeOpt(c);
  std::vector<float> w0 = RandomWeights(3);
  Row row(*opt, w0);
  Vec w(w0.begin(), w0.end());
  RefAdam ref{0.01, double(0.9f), double(0.999f), double(1e-8f)};
  for (const auto& g : RandomGrads(5)) {
    row.Step(*opt, g);
    ref.Step(w, g);
    ExpectRowNear(row, w, "adam");
  }
  EXPECT_EQ(AdamStepCount(row), static_cast<uint32_t>(kSteps));
}

TEST(OptimizerUpdateTest, AdamStepOneAndTwoByHand) {
  OptimizerConfig c;
  c.type = OptimizerType::kAdam;
  c.lr = 0.1f;
  c.beta1 = 0.5f;
  c.beta2 = 0.75f;
  c.eps = 1e-8f;
  auto opt = MakeOpt(c);
  Row row(*opt, {0.0f});
  // t=1: m = 0.5*2 = 1, v = 0.25*4 = 1; m_hat = 2, v_hat = 4; w = -0.1 * 2/2.
  row.Step(*opt, {2.0f});
  EXPECT_NEAR(row.w(0), -0.1, 1e-7);
  EXPECT_EQ(AdamStepCount(row), 1u);
  // t=2, g=-2: m = 0.5 - 1 = -0.5, v = 0.75 + 1 = 1.75; m_hat = -0.5/0.75,
  // v_hat = 1.75/0.4375 = 4; w = -0.1 + 0.1 * (2/3) / 2.
  row.Step(*opt, {-2.0f});
  EXPECT_NEAR(row.w(0), -0.1 + 0.1 / 3.0, 1e-7);
  EXPECT_EQ(AdamStepCount(row), 2u);
}

TEST(OptimizerUpdateTest, AdamBiasCorrectionUsesEachRowsOwnStepCount) {
  OptimizerConfig c;
  c.type = OptimizerType::kAdam;
  c.lr = 0.1f;
  c.beta1 = 0.5f;
  c.beta2 = 0.75f;
  auto opt = MakeOpt(c);
  Row old_row(*opt, {0.0f});
  old_row.Step(*opt, {1.0f});
  old_row.Step(*opt, {1.0f});  // step 2 of a constant gradient: m_hat = v_hat^0.5 = 1
  Row new_row(*opt, {0.0f});   // created later: its first step must be corrected as t = 1
  const float before = old_row.w(0);
  old_row.Step(*opt, {3.0f});
  new_row.Step(*opt, {3.0f});
  EXPECT_EQ(AdamStepCount(old_row), 3u);
  EXPECT_EQ(AdamStepCount(new_row), 1u);
  // New row, t = 1: exactly lr * sign(g) (up to eps).
  EXPECT_NEAR(new_row.w(0), -0.1, 1e-6);
  // Old row, t = 3: m = 0.5*0.75 + 1.5 = 1.875, v = 0.75*0.4375 + 0.25*9 = 2.578125.
  const double m_hat = 1.875 / (1 - 0.125), v_hat = 2.578125 / (1 - 0.421875);
  EXPECT_NEAR(old_row.w(0), before - 0.1 * m_hat / std::sqrt(v_hat), 1e-6);
  EXPECT_GT(std::fabs(old_row.w(0) - before - new_row.w(0)), 1e-3);
}

TEST(OptimizerUpdateTest, AdamWithZeroBetasNeedsNoBiasCorrection) {
  OptimizerConfig c;
  c.type = OptimizerType::kAdam;
  c.lr = 0.1f;
  c.beta1 = 0.0f;  // log(beta) = -inf: corrections must come out as exactly 1
  c.beta2 = 0.0f;
  auto opt = MakeOpt(c);
  Row row(*opt, {1.0f, 1.0f});
  for (int step = 0; step < 3; ++step) row.Step(*opt, {4.0f, -0.5f});  // m = g, v = g^2
  EXPECT_NEAR(row.w(0), 1.0 - 3 * 0.1, 1e-6);
  EXPECT_NEAR(row.w(1), 1.0 + 3 * 0.1, 1e-6);
}

// Reference FTRL-proximal, McMahan et al. 2013, Algorithm 1, per coordinate,
// with the stored weight used in the z update.
struct RefFtrl {
  double alpha, beta, l1, l2;
  Vec z = Vec(kDim, 0.0), n = Vec(kDim, 0.0);
  void Step(Vec& w, const std::vector<float>& g) {
    for (size_t i = 0; i < w.size(); ++i) {
      const double gi = g[i];
      const double sigma = (std::sqrt(n[i] + gi * gi) - std::sqrt(n[i])) / alpha;
      z[i] += gi - sigma * w[i];
      n[i] += gi * gi;
      const double sgn = z[i] < 0 ? -1.0 : 1.0;
      w[i] = std::fabs(z[i]) <= l1 ? 0.0
                                   : -(z[i] - sgn * l1) / ((beta + std::sqrt(n[i])) / alpha + l2);
    }
  }
};

TEST(OptimizerUpdateTest, FtrlMatchesPaperReference) {
  OptimizerConfig c;
  c.type = OptimizerType::kFtrl;
  c.ftrl_alpha = 0.3f;
  c.ftrl_beta = 1.0f;
  c.ftrl_l1 = 0.2f;
  c.ftrl_l2 = 0.5f;
  auto opt = MakeOpt(c);
  std::vector<float> w0 = RandomWeights(9);
  Row row(*opt, w0);
  Vec w(w0.begin(), w0.end());
  RefFtrl ref{0.3, 1.0, double(0.2f), 0.5};
  for (const auto& g : RandomGrads(13)) {
    row.Step(*opt, g);
    ref.Step(w, g);
    ExpectRowNear(row, w, "ftrl");
  }
}

TEST(OptimizerUpdateTest, FtrlFirstStepByHand) {
  OptimizerConfig c;
  c.type = OptimizerType::kFtrl;
  c.ftrl_alpha = 0.5f;
  c.ftrl_beta = 1.0f;
  auto opt = MakeOpt(c);
  // sigma = (0.5 - 0) / 0.5 = 1. Row 0 starts at w = 0: z = 0.5, w = -0.5 / 3.
  // Row 1 starts at w = 0.2 (initializer): z = 0.5 - 0.2 = 0.3, w = -0.3 / 3.
  Row row(*opt, {0.0f, 0.2f});
  row.Step(*opt, {0.5f, 0.5f});
  EXPECT_FLOAT_EQ(row.w(0), -0.5f / 3.0f);
  EXPECT_FLOAT_EQ(row.w(1), -0.1f);
  EXPECT_FLOAT_EQ(row.data[2], 0.5f);   // z
  EXPECT_FLOAT_EQ(row.data[4], 0.25f);  // n
}

TEST(OptimizerUpdateTest, FtrlL1KeepsWeightsExactlyZeroUntilZExceedsL1) {
  OptimizerConfig c;
  c.type = OptimizerType::kFtrl;
  c.ftrl_alpha = 1.0f;
  c.ftrl_beta = 1.0f;
  c.ftrl_l1 = 1.0f;
  auto opt = MakeOpt(c);
  Row row(*opt, {0.0f, 0.0f});
  // With w = 0, z is the plain sum of gradients: 0.3, 0.6, 0.9 stay <= l1.
  for (int step = 0; step < 3; ++step) {
    row.Step(*opt, {0.3f, -0.3f});
    EXPECT_EQ(row.w(0), 0.0f) << "step " << step;
    EXPECT_EQ(row.w(1), 0.0f) << "step " << step;
    EXPECT_FALSE(std::signbit(row.w(0)));
  }
  // z = 1.2 > l1: w = -(1.2 - 1) / (1 + sqrt(0.36)) = -0.125, and symmetric.
  row.Step(*opt, {0.3f, -0.3f});
  EXPECT_NEAR(row.w(0), -0.125, 1e-6);
  EXPECT_NEAR(row.w(1), 0.125, 1e-6);
}

TEST(OptimizerUpdateTest, FtrlZeroBetaAndTinyGradientNeverDividesByZero) {
  OptimizerConfig c;
  c.type = OptimizerType::kFtrl;
  c.ftrl_beta = 0.0f;
  auto opt = MakeOpt(c);
  Row row(*opt, {0.0f});
  row.Step(*opt, {1e-30f});  // g^2 underflows: n stays 0 while z != 0
  EXPECT_EQ(row.w(0), 0.0f);
  row.Step(*opt, {0.0f});
  EXPECT_EQ(row.w(0), 0.0f);
}

}  // namespace
}  // namespace osprey::server
