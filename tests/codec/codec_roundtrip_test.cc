#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <set>

#include "common/codec/codec.h"
#include "common/codec/dense_codecs.h"
#include "tests/codec/codec_test_util.h"

namespace osprey::codec {
namespace {

using testing::RandomGradient;
using testing::SameBits;
using testing::SparsePairs;

std::unique_ptr<Codec> Make(CodecConfig c) {
  auto codec = MakeCodec(c);
  EXPECT_TRUE(codec.ok()) << codec.status().ToString();
  return std::move(codec).value();
}

std::vector<float> Decode(const Codec& codec, const Encoded& e, size_t n) {
  std::vector<float> dst(n, 0.0f);
  const Status st = codec.DecodeAdd(e.view(), dst.data(), n, 1.0f);
  EXPECT_TRUE(st.ok()) << st.ToString();
  return dst;
}

TEST(HalfTest, KnownRoundingCases) {
  EXPECT_EQ(FloatToHalfBits(1.0f), 0x3C00);
  EXPECT_EQ(FloatToHalfBits(-2.0f), 0xC000);
  EXPECT_EQ(FloatToHalfBits(65504.0f), 0x7BFF);
  EXPECT_EQ(FloatToHalfBits(65519.0f), 0x7BFF);
  EXPECT_EQ(FloatToHalfBits(65520.0f), 0x7C00);                // tie rounds to even: inf
  EXPECT_EQ(FloatToHalfBits(std::ldexp(1.0f, -24)), 0x0001);  // smallest subnormal
  EXPECT_EQ(FloatToHalfBits(std::ldexp(1.0f, -25)), 0x0000);  // tie to even: zero
  EXPECT_EQ(FloatToHalfBits(std::ldexp(3.0f, -26)), 0x0001);  // above the tie
  EXPECT_EQ(FloatToHalfBits(1.0f + std::ldexp(1.0f, -11)), 0x3C00);        // tie, even stays
  EXPECT_EQ(FloatToHalfBits(1.0f + std::ldexp(3.0f, -11)), 0x3C02);        // tie, odd rounds up
  EXPECT_EQ(FloatToHalfBits(std::ldexp(1023.0f, -24) + std::ldexp(1.0f, -25)), 0x0400);  // into normal
  EXPECT_EQ(FloatToBf16Bits(1.0f), 0x3F80);
  EXPECT_EQ(FloatToBf16Bits(1.0f + std::ldexp(1.0f, -8)), 0x3F80);  // tie, even
  EXPECT_EQ(FloatToBf16Bits(1.0f + std::ldexp(3.0f, -8)), 0x3F82);  // tie, odd up
  EXPECT_TRUE(std::isnan(HalfBitsToFloat(FloatToHalfBits(std::nanf("")))));
  EXPECT_TRUE(std::isnan(Bf16BitsToFloat(FloatToBf16Bits(std::nanf("")))));
}

TEST(HalfTest, EveryHalfSurvivesFloatRoundTrip) {
  for (uint32_t h = 0; h < 0x10000; ++h) {
    const float f = HalfBitsToFloat(static_cast<uint16_t>(h));
    if (std::isnan(f)) continue;
    EXPECT_EQ(FloatToHalfBits(f), h) << std::hex << h;
  }
  for (uint32_t b = 0; b < 0x10000; ++b) {
    const float f = Bf16BitsToFloat(static_cast<uint16_t>(b));
    if (std::isnan(f)) continue;
    EXPECT_EQ(FloatToBf16Bits(f), b) << std::hex << b;
  }
}

TEST(CodecRoundTripTest, NoneIsExact) {
  CodecConfig c;
  auto codec = Make(c);
  const auto g = RandomGradient(1001, 1);
  CodecState state;
  Encoded e;
  ASSERT_TRUE(codec->Encode(g.data(), g.size(), &state, &e).ok());
  EXPECT_EQ(e.meta.codec, CodecId::kNone);
  EXPECT_EQ(e.payload.size(), 4 * g.size());
  const auto d = Decode(*codec, e, g.size());
  for (size_t i = 0; i < g.size(); ++i) ASSERT_TRUE(SameBits(d[i], g[i])) << i;
  EXPECT_EQ(state.step, 1u);
}

TEST(CodecRoundTripTest, CastsRoundToNearestEven) {
  for (const char* type : {"fp16", "bf16"}) {
    CodecConfig c;
    c.type = type;
    auto codec = Make(c);
    const auto g = RandomGradient(777, 2);
    CodecState state;
    Encoded e;
    ASSERT_TRUE(codec->Encode(g.data(), g.size(), &state, &e).ok());
    EXPECT_EQ(e.payload.size(), 2 * g.size());
    const ValueType vt = std::string(type) == "fp16" ? ValueType::kFp16 : ValueType::kBf16;
    const auto d = Decode(*codec, e, g.size());
    for (size_t i = 0; i < g.size(); ++i) ASSERT_TRUE(SameBits(d[i], RoundTrip(g[i], vt))) << type << " " << i;
  }
}

// The k largest magnitudes, ties to the lower index: the definition exact top-k must meet.
std::set<uint32_t> BruteForceTopK(const std::vector<float>& x, size_t k) {
  std::vector<uint32_t> order(x.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](uint32_t a, uint32_t b) {
    return MagnitudeKey(x[a]) > MagnitudeKey(x[b]);
  });
  return std::set<uint32_t>(order.begin(), order.begin() + static_cast<std::ptrdiff_t>(k));
}

TEST(CodecRoundTripTest, ExactTopKSendsTheKLargest) {
  for (auto make : {RandomGradient, testing::TiedGradient}) {
    const auto g = make(20000, 3);
    CodecConfig c;
    c.type = "topk";
    c.density = 0.013;
    auto codec = Make(c);
    CodecState state;
    Encoded e;
    ASSERT_TRUE(codec->Encode(g.data(), g.size(), &state, &e).ok());
    ASSERT_EQ(e.meta.count, 260u);
    const auto pairs = SparsePairs(e.meta, e.payload.data());
    std::set<uint32_t> sent;
    for (const auto& [index, bits] : pairs) {
      sent.insert(index);
      EXPECT_EQ(bits, FloatBits(g[index]));
    }
    EXPECT_EQ(sent, BruteForceTopK(g, 260));
    const auto d = Decode(*codec, e, g.size());
    for (size_t i = 0; i < g.size(); ++i) EXPECT_TRUE(SameBits(d[i], sent.count(i) ? g[i] : 0.0f));
  }
}

TEST(CodecRoundTripTest, ApproximateTopKMeetsToleranceAndThresholdProperty) {
  const auto g = RandomGradient(300000, 4);
  for (const char* method : {"sample", "histogram"}) {
    for (double density : {0.01, 0.001}) {
      CodecConfig c;
      c.type = "topk";
      c.topk_method = method;
      c.density = density;
      c.count_tolerance = 0.05;
      auto codec = Make(c);
      CodecState state;
      Encoded e;
      ASSERT_TRUE(codec->Encode(g.data(), g.size(), &state, &e).ok());
      const double k = density * g.size();
      EXPECT_GE(e.meta.count, std::floor(k * 0.95)) << method << " " << density;
      EXPECT_LE(e.meta.count, std::ceil(k * 1.05)) << method << " " << density;
      // Everything sent is at least as large as everything kept back.
      const auto pairs = SparsePairs(e.meta, e.payload.data());
      uint32_t min_sent = UINT32_MAX;
      uint32_t max_kept = 0;
      for (size_t i = 0; i < g.size(); ++i) {
        const uint32_t key = MagnitudeKey(g[i]);
        if (pairs.count(static_cast<uint32_t>(i))) min_sent = std::min(min_sent, key);
        else max_kept = std::max(max_kept, key);
      }
      EXPECT_GE(min_sent, max_kept) << method;
    }
  }
}

TEST(CodecRoundTripTest, SparseValuesInHalfPrecision) {
  const auto g = RandomGradient(5000, 5);
  CodecConfig c;
  c.type = "topk";
  c.density = 0.02;
  c.value_type = "fp16";
  auto codec = Make(c);
  CodecState state;
  Encoded e;
  ASSERT_TRUE(codec->Encode(g.data(), g.size(), &state, &e).ok());
  EXPECT_EQ(e.payload.size(), e.meta.count * 6);
  for (const auto& [index, bits] : SparsePairs(e.meta, e.payload.data())) {
    EXPECT_EQ(bits, FloatToHalfBits(g[index]));
  }
}

TEST(CodecRoundTripTest, RandomKIsStratifiedAndSeeded) {
  const auto g = RandomGradient(10000, 6);
  CodecConfig c;
  c.type = "randomk";
  c.density = 0.01;
  auto codec = Make(c);
  CodecState a, b, other;
  other.tensor_seed = 99;
  Encoded ea, eb, eo;
  ASSERT_TRUE(codec->Encode(g.data(), g.size(), &a, &ea).ok());
  ASSERT_TRUE(codec->Encode(g.data(), g.size(), &b, &eb).ok());
  ASSERT_TRUE(codec->Encode(g.data(), g.size(), &other, &eo).ok());
  EXPECT_EQ(ea.payload, eb.payload);  // same seed, same step
  EXPECT_NE(ea.payload, eo.payload);  // another tensor draws other indices
  ASSERT_EQ(ea.meta.count, 100u);
  for (uint32_t j = 0; j < 100; ++j) {
    const uint32_t index = testing::ReadU32(ea.payload.data() + 4 * j);
    EXPECT_EQ(index / 100, j);  // one index per stratum of 100
  }
  ASSERT_TRUE(codec->Encode(g.data(), g.size(), &a, &ea).ok());
  EXPECT_NE(ea.payload, eb.payload);  // next step, new draw
}

TEST(CodecRoundTripTest, OneBitSendsSignsAndChunkMeans) {
  for (uint32_t chunk : {32u, 96u, 1024u}) {
    const auto g = RandomGradient(2500, 7);  // not a multiple of 32 or of the chunk
    CodecConfig c;
    c.type = "onebit";
    c.onebit_chunk = chunk;
    auto codec = Make(c);
    CodecState state;
    Encoded e;
    ASSERT_TRUE(codec->Encode(g.data(), g.size(), &state, &e).ok());
    const size_t chunks = (g.size() + chunk - 1) / chunk;
    EXPECT_EQ(e.payload.size(), 4 * chunks + 4 * ((g.size() + 31) / 32));
    const auto d = Decode(*codec, e, g.size());
    for (size_t base = 0; base < g.size(); base += chunk) {
      const size_t end = std::min(g.size(), base + chunk);
      double mean = 0;
      for (size_t i = base; i < end; ++i) mean += std::fabs(g[i]);
      mean /= static_cast<double>(end - base);
      for (size_t i = base; i < end; ++i) {
        EXPECT_NEAR(std::fabs(d[i]), mean, 1e-5 * mean + 1e-12) << chunk << " " << i;
        EXPECT_EQ(d[i] < 0, g[i] < 0) << i;
      }
    }
  }
}

TEST(CodecRoundTripTest, DecodeAddScalesAndAccumulates) {
  const auto g = RandomGradient(3000, 8);
  for (const char* type : {"none", "fp16", "topk", "onebit"}) {
    CodecConfig c;
    c.type = type;
    c.density = 0.1;
    auto codec = Make(c);
    CodecState state;
    Encoded e;
    ASSERT_TRUE(codec->Encode(g.data(), g.size(), &state, &e).ok());
    const auto once = Decode(*codec, e, g.size());
    std::vector<float> dst(g.size(), 1.0f);
    ASSERT_TRUE(codec->DecodeAdd(e.view(), dst.data(), dst.size(), -0.5f).ok());
    for (size_t i = 0; i < g.size(); ++i) EXPECT_FLOAT_EQ(dst[i], 1.0f - 0.5f * once[i]) << type << " " << i;
  }
}

TEST(CodecRoundTripTest, EmptyTensors) {
  for (const char* type : {"none", "bf16", "topk", "randomk", "onebit"}) {
    CodecConfig c;
    c.type = type;
    c.error_feedback = true;
    auto codec = Make(c);
    CodecState state;
    Encoded e;
    ASSERT_TRUE(codec->Encode(nullptr, 0, &state, &e).ok()) << type;
    EXPECT_EQ(e.payload.size(), 0u);
    EXPECT_TRUE(codec->DecodeAdd(e.view(), nullptr, 0, 1.0f).ok()) << type;
  }
}

}  // namespace
}  // namespace osprey::codec
