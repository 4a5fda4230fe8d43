#include "worker/data/zipf.h"

#include <gtest/gtest.h>

#include <cmath>
#include <set>
#include <vector>

#include "worker/data/fast_math.h"
#include "worker/data/random.h"

namespace osprey::data {
namespace {

TEST(FastMathTest, LogMatchesLibm) {
  Rng rng(1);
  double worst = 0;
  for (int i = 0; i < 200000; ++i) {
    // Log-uniform over the whole normal range, plus dense coverage of [0.5, 2].
    const double x = i % 2 ? std::exp((rng.NextUniform() - 0.5) * 1400.0) : 0.5 + 1.5 * rng.NextUniform();
    const double want = std::log(x);
    const double err = std::fabs(FastLog(x) - want) / std::max(std::fabs(want), 1e-300);
    worst = std::max(worst, want == 0 ? std::fabs(FastLog(x)) : err);
  }
  EXPECT_LT(worst, 1e-15);
  EXPECT_EQ(FastLog(1.0), 0.0);
}

TEST(FastMathTest, ExpMatchesLibmAndClamps) {
  Rng rng(2);
  double worst = 0;
  for (int i = 0; i < 200000; ++i) {
    const double x = (rng.NextUniform() - 0.5) * 1400.0;
    worst = std::max(worst, std::fabs(FastExp(x) - std::exp(x)) / std::exp(x));
  }
  EXPECT_LT(worst, 1e-15);
  EXPECT_EQ(FastExp(0.0), 1.0);
  EXPECT_TRUE(std::isfinite(FastExp(1e6)));
  EXPECT_GT(FastExp(-1e6), 0.0);
}

TEST(IndexPermutationTest, IsABijectionThatScatters) {
  for (uint64_t n : {1ull, 2ull, 3ull, 5ull, 16ull, 17ull, 1000ull, 20000ull, 65537ull}) {
    const IndexPermutation permutation(n, /*key=*/n * 31 + 7);
    std::vector<bool> seen(n, false);
    for (uint64_t x = 0; x < n; ++x) {
      const uint64_t y = permutation(x);
      ASSERT_LT(y, n) << "n=" << n;
      ASSERT_FALSE(seen[y]) << "n=" << n << " maps two values to " << y;
      seen[y] = true;
    }
    if (n >= 1000) {
      int fixed = 0;
      for (uint64_t x = 0; x < 10; ++x) fixed += permutation(x) < 10;
      EXPECT_LE(fixed, 2) << "hot ranks stay hot ids for n=" << n;
    }
  }
  EXPECT_NE(IndexPermutation(1000, 1)(0), IndexPermutation(1000, 2)(0));
}

// Frequencies of Sample() against the exact pmf, within 5 standard errors.
void ExpectMatchesPmf(uint64_t n, double alpha) {
  const ZipfSampler zipf(n, alpha);
  std::vector<double> pmf(n);
  double norm = 0;
  for (uint64_t k = 0; k < n; ++k) norm += pmf[k] = std::pow(static_cast<double>(k + 1), -alpha);
  const int draws = 200000;
  std::vector<int> count(n, 0);
  Rng rng(static_cast<uint64_t>(alpha * 1000) + n);
  for (int i = 0; i < draws; ++i) {
    const uint64_t k = zipf.Sample([&rng] { return rng.NextUniform(); });
    ASSERT_LT(k, n);
    ++count[k];
  }
  for (uint64_t k = 0; k < n; ++k) {
    const double p = pmf[k] / norm;
    const double freq = static_cast<double>(count[k]) / draws;
    EXPECT_NEAR(freq, p, 5 * std::sqrt(p * (1 - p) / draws) + 1e-4) << "n=" << n << " alpha=" << alpha << " k=" << k;
  }
}

TEST(ZipfSamplerTest, MatchesExactPmf) {
  ExpectMatchesPmf(10, 0.5);
  ExpectMatchesPmf(10, 1.0);
  ExpectMatchesPmf(10, 1.05);
  ExpectMatchesPmf(25, 2.5);
  ExpectMatchesPmf(1, 1.2);
}

TEST(ZipfSamplerTest, HugeCardinalityHeadProbability) {
  const uint64_t n = 10000000;
  const double alpha = 1.05;
  double norm = 0;
  for (uint64_t k = n; k >= 1; --k) norm += std::pow(static_cast<double>(k), -alpha);
  const ZipfSampler zipf(n, alpha);
  Rng rng(9);
  const int draws = 200000;
  int head = 0;
  uint64_t max_rank = 0;
  for (int i = 0; i < draws; ++i) {
    const uint64_t k = zipf.Sample([&rng] { return rng.NextUniform(); });
    ASSERT_LT(k, n);
    head += k == 0;
    max_rank = std::max(max_rank, k);
  }
  const double p0 = 1.0 / norm;
  EXPECT_NEAR(static_cast<double>(head) / draws, p0, 5 * std::sqrt(p0 * (1 - p0) / draws));
  EXPECT_GT(max_rank, n / 100) << "the tail is never reached";
}

TEST(ZipfSamplerTest, TrySampleAgreesWithCandidate) {
  const ZipfSampler zipf(5000, 1.05);
  Rng rng(3);
  int squeezed = 0;
  for (int i = 0; i < 10000; ++i) {
    const double r = rng.NextUniform();
    const double c = zipf.Candidate(r);
    uint64_t rank;
    const bool accepted = zipf.TrySample(r, &rank);
    EXPECT_EQ(rank + 1, static_cast<uint64_t>(std::fabs(c)));
    if (c > 0) {
      EXPECT_TRUE(accepted);
      ++squeezed;
    }
  }
  EXPECT_GT(squeezed, 9000) << "the squeeze should accept most candidates";
}

}  // namespace
}  // namespace osprey::data
