// Config validation, ParseOptimizerType, state layout and AllFinite.
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "server/optim/optimizer.h"

namespace osprey::server {
namespace {

constexpr OptimizerType kAllTypes[] = {OptimizerType::kSgd,     OptimizerType::kMomentum,
                                       OptimizerType::kNesterov, OptimizerType::kAdagrad,
                                       OptimizerType::kAdam,    OptimizerType::kFtrl};

TEST(OptimizerConfigTest, DefaultsAreValidForEveryType) {
  for (OptimizerType type : kAllTypes) {
    OptimizerConfig c;
    c.type = type;
    auto made = Optimizer::Make(c);
    ASSERT_TRUE(made.ok()) << made.status().ToString();
    EXPECT_EQ((*made)->config().type, type);
  }
}

TEST(OptimizerConfigTest, BoundaryValuesAreAccepted) {
  OptimizerConfig c;
  c.momentum = 0.0f;
  c.beta1 = 0.0f;
  c.beta2 = 0.0f;
  c.initial_accumulator = 0.0f;
  c.ftrl_beta = 0.0f;
  c.ftrl_l1 = 0.0f;
  c.ftrl_l2 = 0.0f;
  c.weight_decay = 0.0f;
  c.clip_value = 0.0f;
  c.clip_norm = 0.0f;
  EXPECT_TRUE(Optimizer::Make(c).ok());
}

struct BadField {
  const char* field;
  std::function<void(OptimizerConfig&)> set;
};

TEST(OptimizerConfigTest, EachBadFieldIsInvalidArgumentNamingTheField) {
  const float inf = std::numeric_limits<float>::infinity();
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const std::vector<BadField> cases = {
      {"lr", [](OptimizerConfig& c) { c.lr = 0.0f; }},
      {"lr", [](OptimizerConfig& c) { c.lr = -0.1f; }},
      {"lr", [&](OptimizerConfig& c) { c.lr = inf; }},
      {"lr", [&](OptimizerConfig& c) { c.lr = nan; }},
      {"momentum", [](OptimizerConfig& c) { c.momentum = 1.0f; }},
      {"momentum", [](OptimizerConfig& c) { c.momentum = -0.1f; }},
      {"initial_accumulator", [](OptimizerConfig& c) { c.initial_accumulator = -1.0f; }},
      {"eps", [](OptimizerConfig& c) { c.eps = 0.0f; }},
      {"eps", [&](OptimizerConfig& c) { c.eps = nan; }},
      {"beta1", [](OptimizerConfig& c) { c.beta1 = 1.0f; }},
      {"beta1", [](OptimizerConfig& c) { c.beta1 = -0.5f; }},
      {"beta2", [](OptimizerConfig& c) { c.beta2 = 1.5f; }},
      {"ftrl_alpha", [](OptimizerConfig& c) { c.ftrl_alpha = 0.0f; }},
      {"ftrl_beta", [](OptimizerConfig& c) { c.ftrl_beta = -1.0f; }},
      {"ftrl_l1", [](OptimizerConfig& c) { c.ftrl_l1 = -0.1f; }},
      {"ftrl_l2", [&](OptimizerConfig& c) { c.ftrl_l2 = inf; }},
      {"weight_decay", [](OptimizerConfig& c) { c.weight_decay = -0.01f; }},
      {"clip_value", [](OptimizerConfig& c) { c.clip_value = -1.0f; }},
      {"clip_norm", [&](OptimizerConfig& c) { c.clip_norm = nan; }},
      {"type", [](OptimizerConfig& c) { c.type = static_cast<OptimizerType>(42); }},
  };
  for (const BadField& bad : cases) {
    OptimizerConfig c;
    c.type = OptimizerType::kAdam;
    bad.set(c);
    auto made = Optimizer::Make(c);
    ASSERT_FALSE(made.ok()) << bad.field;
    EXPECT_EQ(made.status().code(), StatusCode::kInvalidArgument) << bad.field;
    // The message starts with the field name so "lr" does not match "ftrl_l1".
    EXPECT_NE(made.status().message().find(std::string(": ") + bad.field + " "), std::string::npos)
        << made.status().message();
  }
}

TEST(OptimizerConfigTest, ErrorMessageCarriesTheValue) {
  OptimizerConfig c;
  c.lr = -0.25f;
  auto made = Optimizer::Make(c);
  ASSERT_FALSE(made.ok());
  EXPECT_NE(made.status().message().find("-0.25"), std::string::npos) << made.status().message();
}

TEST(OptimizerConfigTest, ParseOptimizerTypeAcceptsEveryNameInAnyCase) {
  for (OptimizerType type : kAllTypes) {
    auto parsed = ParseOptimizerType(OptimizerTypeName(type));
    ASSERT_TRUE(parsed.ok()) << OptimizerTypeName(type);
    EXPECT_EQ(*parsed, type);
  }
  auto upper = ParseOptimizerType("AdaGrad");
  ASSERT_TRUE(upper.ok());
  EXPECT_EQ(*upper, OptimizerType::kAdagrad);
}

TEST(OptimizerConfigTest, ParseOptimizerTypeRejectsUnknownListingValidNames) {
  for (const char* bad : {"rmsprop", "", "adam ", "sgdm"}) {
    auto parsed = ParseOptimizerType(bad);
    ASSERT_FALSE(parsed.ok()) << bad;
    EXPECT_EQ(parsed.status().code(), StatusCode::kInvalidArgument);
    const std::string& msg = parsed.status().message();
    for (OptimizerType type : kAllTypes)
      EXPECT_NE(msg.find(OptimizerTypeName(type)), std::string::npos) << msg;
  }
}

TEST(OptimizerConfigTest, StateFloatsPerType) {
  const size_t expected[] = {0, 16, 16, 16, 33, 32};  // order of kAllTypes, dim 16
  for (size_t k = 0; k < 6; ++k) {
    OptimizerConfig c;
    c.type = kAllTypes[k];
    auto opt = std::move(Optimizer::Make(c)).value();
    EXPECT_EQ(opt->state_floats(16), expected[k]) << OptimizerTypeName(c.type);
    EXPECT_EQ(opt->state_floats(0), k == 4 ? 1u : 0u);
  }
}

TEST(OptimizerConfigTest, InitStateWritesExactlyStateFloats) {
  for (OptimizerType type : kAllTypes) {
    OptimizerConfig c;
    c.type = type;
    c.initial_accumulator = 0.25f;
    auto opt = std::move(Optimizer::Make(c)).value();
    const size_t dim = 5, n = opt->state_floats(dim);
    std::vector<float> buf(n + 1, -7.0f);  // one sentinel past the end
    opt->InitState(buf.data(), dim);
    EXPECT_EQ(buf[n], -7.0f) << OptimizerTypeName(type);
    const float fill = type == OptimizerType::kAdagrad ? 0.25f : 0.0f;
    for (size_t i = 0; i < n; ++i) {
      uint32_t bits;
      std::memcpy(&bits, &buf[i], sizeof(bits));
      if (type == OptimizerType::kAdam && i == 2 * dim) {
        EXPECT_EQ(bits, 0u);  // step count
      } else {
        EXPECT_EQ(buf[i], fill) << OptimizerTypeName(type) << " i=" << i;
      }
    }
  }
}

TEST(AllFiniteTest, FiniteValuesIncludingExtremes) {
  EXPECT_TRUE(AllFinite(nullptr, 0));
  std::vector<float> g = {0.0f, -0.0f, std::numeric_limits<float>::max(),
                          -std::numeric_limits<float>::max(),
                          std::numeric_limits<float>::denorm_min(),
                          std::numeric_limits<float>::min(), 1.0f, -3.5f, 1e30f};
  EXPECT_TRUE(AllFinite(g.data(), g.size()));
}

TEST(AllFiniteTest, DetectsNanAndInfAtEveryPositionIncludingTail) {
  const float bad_values[] = {std::numeric_limits<float>::quiet_NaN(),
                              -std::numeric_limits<float>::quiet_NaN(),
                              std::numeric_limits<float>::signaling_NaN(),
                              std::numeric_limits<float>::infinity(),
                              -std::numeric_limits<float>::infinity()};
  // Sizes around the 8-wide vectors and the 1024-element early-exit blocks.
  for (size_t n : {1, 7, 8, 9, 17, 31, 1023, 1024, 1025, 3001}) {
    std::vector<size_t> positions = {0, n / 2, n - 1};
    if (n > 8) positions.push_back(n - 2);
    if (n > 1024) positions.push_back(1024);
    for (size_t pos : positions) {
      for (float bad : bad_values) {
        std::vector<float> g(n, 0.5f);
        ASSERT_TRUE(AllFinite(g.data(), n));
        g[pos] = bad;
        EXPECT_FALSE(AllFinite(g.data(), n)) << "n=" << n << " pos=" << pos << " v=" << bad;
        // A prefix that stops before the bad element is finite.
        EXPECT_TRUE(AllFinite(g.data(), pos)) << "n=" << n << " pos=" << pos;
      }
    }
  }
}

}  // namespace
}  // namespace osprey::server
