#include <gtest/gtest.h>

#include <algorithm>
#include <set>

#include "common/codec/radix_select.h"
#include "tests/codec/codec_test_util.h"

namespace osprey::codec {
namespace {

using testing::RandomGradient;
using testing::TiedGradient;

std::set<uint32_t> Apply(const Selection& s, const std::vector<float>& x) {
  std::set<uint32_t> out;
  for (size_t i = 0; i < x.size(); ++i) {
    if (s.Selects(MagnitudeKey(x[i]), static_cast<uint32_t>(i))) out.insert(static_cast<uint32_t>(i));
  }
  return out;
}

std::vector<uint32_t> Keys(const std::vector<float>& x) {
  std::vector<uint32_t> keys(x.size());
  for (size_t i = 0; i < x.size(); ++i) keys[i] = MagnitudeKey(x[i]);
  return keys;
}

TEST(RadixSelectTest, TargetsRoundTheDensity) {
  const SelectTargets t = MakeTargets(1000000, 0.01, 0.05);
  EXPECT_EQ(t.k, 10000u);  // not 10001: 0.01 * 1e6 is 10000.000000000002 in double
  EXPECT_EQ(t.k_lo, 9500u);
  EXPECT_EQ(t.k_hi, 10500u);
  EXPECT_EQ(MakeTargets(10, 0.001, 0.0).k, 1u);  // never zero
  EXPECT_EQ(MakeTargets(10, 1.0, 0.5).k_hi, 10u);  // never above n
}

TEST(RadixSelectTest, ExactRadixEqualsNthElement) {
  std::vector<uint32_t> scratch;
  for (auto make : {RandomGradient, TiedGradient}) {
    for (size_t n : {1ul, 7ul, 1000ul, 65537ul}) {
      const auto x = make(n, n);
      const auto keys = Keys(x);
      for (uint64_t k : {uint64_t{1}, n / 100 + 1, n / 2 + 1, uint64_t{n}}) {
        const Selection nth = SelectExact(x.data(), n, k, &scratch);
        const Selection radix = RadixSelect(keys.data(), nullptr, n, 0, SelectTargets{k, k, k});
        const auto set = Apply(nth, x);
        EXPECT_EQ(set.size(), k) << n << " " << k;
        EXPECT_EQ(nth.count, k);
        EXPECT_EQ(radix.count, k);
        EXPECT_EQ(Apply(radix, x), set) << n << " " << k;
      }
    }
  }
}

TEST(RadixSelectTest, TiesGoToTheLowestIndices) {
  std::vector<float> x(100, 1.0f);
  x[3] = 2.0f;
  const auto keys = Keys(x);
  const Selection s = RadixSelect(keys.data(), nullptr, x.size(), 0, SelectTargets{5, 5, 5});
  EXPECT_EQ(Apply(s, x), (std::set<uint32_t>{0, 1, 2, 3, 4}));
  std::vector<uint32_t> scratch;
  EXPECT_EQ(Apply(SelectExact(x.data(), x.size(), 5, &scratch), x), (std::set<uint32_t>{0, 1, 2, 3, 4}));
}

TEST(RadixSelectTest, ToleranceStopsEarlyWithinRange) {
  const auto x = RandomGradient(200000, 40);
  const auto keys = Keys(x);
  for (double density : {0.01, 0.001}) {
    const SelectTargets t = MakeTargets(x.size(), density, 0.05);
    const Selection s = RadixSelect(keys.data(), nullptr, x.size(), 0, t);
    const auto set = Apply(s, x);
    EXPECT_EQ(set.size(), s.count);
    EXPECT_GE(s.count, t.k_lo);
    EXPECT_LE(s.count, t.k_hi);
    EXPECT_EQ(s.tie_index, UINT32_MAX);  // continuous data: no tie breaking needed
  }
}

TEST(RadixSelectTest, CandidateSubsetWithIndices) {
  const auto x = RandomGradient(5000, 41);
  std::vector<uint32_t> keys, indices;
  for (uint32_t i = 0; i < x.size(); i += 3) {  // an arbitrary subset, as the GPU candidates are
    keys.push_back(MagnitudeKey(x[i]));
    indices.push_back(i);
  }
  const Selection s = RadixSelect(keys.data(), indices.data(), keys.size(), 0, SelectTargets{50, 50, 50});
  size_t selected = 0;
  for (size_t j = 0; j < keys.size(); ++j) selected += s.Selects(keys[j], indices[j]);
  EXPECT_EQ(selected, 50u);
}

TEST(RadixSelectTest, SampledWithinToleranceAndExactAtZeroTolerance) {
  const auto x = RandomGradient(1000000, 42);
  std::vector<uint32_t> scratch;
  SampleScratch sample_scratch;
  for (double density : {0.01, 0.001}) {
    const SelectTargets t = MakeTargets(x.size(), density, 0.05);
    const Selection s = SelectSampled(x.data(), x.size(), t, MakeSamplePlan(x.size(), t, 0.005, 0.05), 7,
                                      &sample_scratch);
    EXPECT_GE(s.count, t.k_lo) << density;
    EXPECT_LE(s.count, t.k_hi) << density;
    EXPECT_EQ(Apply(s, x).size(), s.count);
    const SelectTargets exact = MakeTargets(x.size(), density, 0.0);
    const Selection e = SelectSampled(x.data(), x.size(), exact, MakeSamplePlan(x.size(), exact, 0.005, 0.0), 7,
                                      &sample_scratch);
    EXPECT_EQ(Apply(e, x), Apply(SelectExact(x.data(), x.size(), exact.k, &scratch), x)) << density;
  }
}

TEST(RadixSelectTest, SampledRecoversFromATooHighFirstThreshold) {
  const auto x = RandomGradient(100000, 43);
  const SelectTargets t = MakeTargets(x.size(), 0.01, 0.05);
  SampleScratch scratch;
  // Rank 1 of a 100-draw sample: the first pass finds ~1% of k; the extra passes must widen.
  const Selection s = SelectSampled(x.data(), x.size(), t, SamplePlan{100, 1}, 9, &scratch);
  EXPECT_GE(s.count, t.k_lo);
  EXPECT_LE(s.count, t.k_hi);
}

TEST(RadixSelectTest, SampledWithFewerElementsThanK) {
  std::vector<float> x(50, 0.5f);
  SampleScratch scratch;
  const SelectTargets t{60, 57, 63};  // k above n: everything is sent
  const Selection s = SelectSampled(x.data(), x.size(), t, SamplePlan{50, 50}, 1, &scratch);
  EXPECT_EQ(s.count, 50u);
}

}  // namespace
}  // namespace osprey::codec
