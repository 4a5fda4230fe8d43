// select "importance" of the top-k codec (codec_config.h): the ranking is p^2 / sqrt(F) with F the
// Fisher estimate; it equals the magnitude ranking where F is uniform and differs where F
// reorders.
#include <gtest/gtest.h>

#include <cstring>
#include <set>
#include <vector>

#include "common/codec/codec.h"

namespace osprey::codec {
namespace {

CodecConfig TopK(const std::string& select, double density) {
  CodecConfig c;
  c.type = "topk";
  c.density = density;
  c.select = select;
  return c;
}

std::set<uint32_t> Indices(const Encoded& e) {
  std::set<uint32_t> out;
  for (size_t j = 0; j < e.meta.count; ++j) {
    uint32_t idx;
    std::memcpy(&idx, e.payload.data() + 4 * j, 4);
    out.insert(idx);
  }
  return out;
}

// Distinct magnitudes (no two round to the same score), in a shuffled order.
std::vector<float> Distinct(size_t n, float scale) {
  std::vector<float> g(n);
  for (size_t i = 0; i < n; ++i) g[i] = scale * (1.0f + static_cast<float>((i * 7919) % n)) * ((i & 1) ? -1.0f : 1.0f);
  return g;
}

TEST(ImportanceSelectTest, EqualsMagnitudeWhileTheFisherEstimateIsUniform) {
  auto mag = MakeCodec(TopK("magnitude", 0.05));
  auto imp = MakeCodec(TopK("importance", 0.05));
  ASSERT_TRUE(mag.ok() && imp.ok());
  CodecState sm, si;
  // First step: F = (1 - d) g^2, so p^2 / sqrt(F) is monotone in |p|.
  const std::vector<float> g = Distinct(1000, 1e-3f);
  Encoded em, ei;
  ASSERT_TRUE((*mag)->Encode(g.data(), g.size(), &sm, &em).ok());
  ASSERT_TRUE((*imp)->Encode(g.data(), g.size(), &si, &ei).ok());
  EXPECT_EQ(Indices(ei), Indices(em));
  EXPECT_EQ(ei.payload, em.payload) << "same pairs, same values";
  // Every element with the same history (here: the same |g| each step, signs alternating): F
  // stays proportional to g^2 elementwise and the rankings still agree.
  for (int step = 0; step < 5; ++step) {
    std::vector<float> h = g;
    for (float& x : h) x = step % 2 ? -x : x;
    ASSERT_TRUE((*mag)->Encode(h.data(), h.size(), &sm, &em).ok());
    ASSERT_TRUE((*imp)->Encode(h.data(), h.size(), &si, &ei).ok());
    EXPECT_EQ(Indices(ei), Indices(em)) << step;
  }
}

TEST(ImportanceSelectTest, AnElementLargeOnlyAgainstItsUsualSizeOutranksAnAlwaysLargeOne) {
  auto mag = MakeCodec(TopK("magnitude", 0.5));  // k = 1 of 2
  auto imp = MakeCodec(TopK("importance", 0.5));
  ASSERT_TRUE(mag.ok() && imp.ok());
  CodecState sm, si;
  Encoded em, ei;
  // 50 steps in which element 0 is 1.0 and element 1 is 0.01: F_0 ~ 1, F_1 ~ 1e-4.
  for (int step = 0; step < 50; ++step) {
    const float g[2] = {1.0f, 0.01f};
    ASSERT_TRUE((*mag)->Encode(g, 2, &sm, &em).ok());
    ASSERT_TRUE((*imp)->Encode(g, 2, &si, &ei).ok());
    EXPECT_EQ(Indices(ei), Indices(em)) << "both send element 0 while it dominates";
  }
  // Now element 1 jumps to 0.5: smaller than element 0's 1.0, but 50x its usual size.
  const float g[2] = {1.0f, 0.5f};
  ASSERT_TRUE((*mag)->Encode(g, 2, &sm, &em).ok());
  ASSERT_TRUE((*imp)->Encode(g, 2, &si, &ei).ok());
  EXPECT_EQ(Indices(em), (std::set<uint32_t>{0}));
  EXPECT_EQ(Indices(ei), (std::set<uint32_t>{1}));
  float v;
  std::memcpy(&v, ei.payload.data() + 4, 4);
  EXPECT_EQ(v, 0.5f) << "the value sent is p, not its score";
}

TEST(ImportanceSelectTest, ConfigNeedsTopKExact) {
  CodecConfig c = TopK("importance", 0.01);
  c.topk_method = "sample";
  auto codec = MakeCodec(c);
  ASSERT_FALSE(codec.ok());
  EXPECT_NE(codec.status().message().find("compression.select"), std::string::npos);
  c = TopK("fisher", 0.01);
  EXPECT_FALSE(MakeCodec(c).ok());
  c = TopK("importance", 0.01);
  c.type = "randomk";
  EXPECT_FALSE(MakeCodec(c).ok());
}

}  // namespace
}  // namespace osprey::codec
