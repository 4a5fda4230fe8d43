#include <gtest/gtest.h>

#include <cmath>

#include "common/codec/codec.h"
#include "tests/codec/codec_test_util.h"

namespace osprey::codec {
namespace {

using testing::RandomGradient;
using testing::SameBits;

std::unique_ptr<Codec> Make(CodecConfig c) {
  auto codec = MakeCodec(c);
  EXPECT_TRUE(codec.ok()) << codec.status().ToString();
  return std::move(codec).value();
}

// g + r_old == decoded + r_new, to float rounding, for every lossy codec and several steps.
TEST(ErrorFeedbackTest, ResidualKeepsWhatWasNotSent) {
  for (const char* type : {"fp16", "bf16", "topk", "randomk", "onebit"}) {
    CodecConfig c;
    c.type = type;
    c.density = 0.05;
    c.error_feedback = true;
    auto codec = Make(c);
    CodecState state;
    Encoded e;
    for (int step = 0; step < 4; ++step) {
      const auto g = RandomGradient(4099, 10 + step);
      const std::vector<float> r_old = state.residual.empty() ? std::vector<float>(g.size()) : state.residual;
      ASSERT_TRUE(codec->Encode(g.data(), g.size(), &state, &e).ok());
      std::vector<float> decoded(g.size(), 0.0f);
      ASSERT_TRUE(codec->DecodeAdd(e.view(), decoded.data(), g.size(), 1.0f).ok());
      for (size_t i = 0; i < g.size(); ++i) {
        const float p = g[i] + r_old[i];
        const float back = decoded[i] + state.residual[i];
        EXPECT_NEAR(back, p, 1e-6f * (std::fabs(p) + std::fabs(decoded[i])) + 1e-9f) << type << " step " << step << " i " << i;
      }
    }
    EXPECT_EQ(state.step, 4u);
  }
}

TEST(ErrorFeedbackTest, SparseResidualIsExact) {
  CodecConfig c;
  c.type = "topk";
  c.density = 0.01;
  c.error_feedback = true;
  auto codec = Make(c);
  CodecState state;
  Encoded e;
  auto g = RandomGradient(10000, 20);
  ASSERT_TRUE(codec->Encode(g.data(), g.size(), &state, &e).ok());
  auto pairs = testing::SparsePairs(e.meta, e.payload.data());
  for (size_t i = 0; i < g.size(); ++i) {
    // Sent: residual restarts at zero. Kept: the residual is the whole gradient.
    EXPECT_TRUE(SameBits(state.residual[i], pairs.count(i) ? 0.0f : g[i])) << i;
  }
}

TEST(ErrorFeedbackTest, EverythingIsEventuallySent) {
  CodecConfig c;
  c.type = "topk";
  c.density = 0.1;
  c.error_feedback = true;
  auto codec = Make(c);
  CodecState state;
  Encoded e;
  const auto g = RandomGradient(1000, 21);
  std::vector<double> sent(g.size(), 0.0);
  const int steps = 50;
  for (int s = 0; s < steps; ++s) {
    ASSERT_TRUE(codec->Encode(g.data(), g.size(), &state, &e).ok());
    for (const auto& [index, bits] : testing::SparsePairs(e.meta, e.payload.data())) sent[index] += BitsToFloat(bits);
  }
  for (size_t i = 0; i < g.size(); ++i) {
    EXPECT_NEAR(sent[i] + state.residual[i], steps * static_cast<double>(g[i]), 1e-4 * std::fabs(steps * g[i]) + 1e-7);
  }
}

TEST(ErrorFeedbackTest, DgcMomentumMasksSentCoordinates) {
  CodecConfig c;
  c.type = "topk";
  c.density = 0.05;
  c.error_feedback = true;
  c.dgc_momentum = 0.9f;
  auto codec = Make(c);
  CodecState state;
  Encoded e;
  const auto g1 = RandomGradient(2000, 22);
  const auto g2 = RandomGradient(2000, 23);
  ASSERT_TRUE(codec->Encode(g1.data(), g1.size(), &state, &e).ok());
  const std::vector<float> u1 = state.momentum;
  const std::vector<float> r1 = state.residual;
  ASSERT_TRUE(codec->Encode(g2.data(), g2.size(), &state, &e).ok());
  const auto pairs = testing::SparsePairs(e.meta, e.payload.data());
  for (size_t i = 0; i < g2.size(); ++i) {
    const float u = std::fma(0.9f, u1[i], g2[i]);
    const float p = r1[i] + u;
    if (pairs.count(i)) {
      EXPECT_EQ(state.momentum[i], 0.0f) << i;
      EXPECT_EQ(state.residual[i], 0.0f) << i;
      EXPECT_TRUE(SameBits(BitsToFloat(pairs.at(i)), p)) << i;
    } else {
      EXPECT_TRUE(SameBits(state.momentum[i], u)) << i;
      EXPECT_TRUE(SameBits(state.residual[i], p)) << i;
    }
  }
}

TEST(ErrorFeedbackTest, ClipBoundsTheEncodedNorm) {
  CodecConfig c;
  c.type = "none";
  c.clip_norm = 0.01f;
  auto codec = Make(c);
  CodecState state;
  Encoded e;
  const auto g = RandomGradient(5000, 24);
  ASSERT_TRUE(codec->Encode(g.data(), g.size(), &state, &e).ok());
  std::vector<float> d(g.size(), 0.0f);
  ASSERT_TRUE(codec->DecodeAdd(e.view(), d.data(), d.size(), 1.0f).ok());
  double norm = 0;
  for (float v : d) norm += static_cast<double>(v) * v;
  EXPECT_NEAR(std::sqrt(norm), 0.01, 1e-6);
  const double factor = 0.01 / std::sqrt([&] {
    double s = 0;
    for (float v : g) s += static_cast<double>(v) * v;
    return s;
  }());
  for (size_t i = 0; i < g.size(); ++i) {
    EXPECT_NEAR(d[i], g[i] * factor, 1e-6 * std::fabs(g[i] * factor) + 1e-12) << i;  // direction kept
  }
}

TEST(ErrorFeedbackTest, StateOfAnotherLengthIsRejectedUnchanged) {
  CodecConfig c;
  c.type = "topk";
  c.error_feedback = true;
  auto codec = Make(c);
  CodecState state;
  Encoded e;
  const auto g = RandomGradient(100, 25);
  ASSERT_TRUE(codec->Encode(g.data(), g.size(), &state, &e).ok());
  const auto before = state.residual;
  const Status st = codec->Encode(g.data(), 50, &state, &e);
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("100"), std::string::npos) << st.ToString();
  EXPECT_EQ(state.residual, before);
  EXPECT_EQ(state.step, 1u);
}

}  // namespace
}  // namespace osprey::codec
