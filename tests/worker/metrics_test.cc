#include "worker/data/metrics.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

namespace osprey::data {
namespace {

// O(n^2) definition: P(score+ > score-) + 0.5 P(score+ == score-).
double BruteForceAuc(const std::vector<float>& scores, const std::vector<float>& labels) {
  double wins = 0, pairs = 0;
  for (size_t i = 0; i < scores.size(); ++i) {
    for (size_t j = 0; j < scores.size(); ++j) {
      if (labels[i] > 0.5f && labels[j] <= 0.5f) {
        pairs += 1;
        wins += scores[i] > scores[j] ? 1.0 : scores[i] == scores[j] ? 0.5 : 0.0;
      }
    }
  }
  return wins / pairs;
}

TEST(AucTest, KnownValues) {
  const std::vector<float> perfect_s = {0.1f, 0.2f, 0.8f, 0.9f}, perfect_y = {0, 0, 1, 1};
  EXPECT_DOUBLE_EQ(Auc(perfect_s.data(), perfect_y.data(), 4), 1.0);
  const std::vector<float> inverted_y = {1, 1, 0, 0};
  EXPECT_DOUBLE_EQ(Auc(perfect_s.data(), inverted_y.data(), 4), 0.0);
  const std::vector<float> tied = {0.5f, 0.5f, 0.5f, 0.5f};
  EXPECT_DOUBLE_EQ(Auc(tied.data(), perfect_y.data(), 4), 0.5);
  // The sklearn doc example: roc_auc_score([0, 0, 1, 1], [0.1, 0.4, 0.35, 0.8]) == 0.75.
  const std::vector<float> s = {0.1f, 0.4f, 0.35f, 0.8f}, y = {0, 0, 1, 1};
  EXPECT_DOUBLE_EQ(Auc(s.data(), y.data(), 4), 0.75);
}

TEST(AucTest, MatchesBruteForceWithTies) {
  std::mt19937 rng(7);
  for (int trial = 0; trial < 20; ++trial) {
    const int n = 50 + trial * 37;
    std::vector<float> scores(n), labels(n);
    for (int i = 0; i < n; ++i) {
      scores[i] = static_cast<float>(rng() % 23) / 22.0f;  // coarse: many ties
      labels[i] = (rng() % 3 == 0) ? 1.0f : 0.0f;
    }
    labels[0] = 1;
    labels[1] = 0;
    EXPECT_NEAR(Auc(scores.data(), labels.data(), n), BruteForceAuc(scores, labels), 1e-12) << "trial " << trial;
  }
}

TEST(AucTest, NanWhenUndefined) {
  const std::vector<float> s = {0.1f, 0.7f, 0.3f};
  const std::vector<float> all_pos = {1, 1, 1}, all_neg = {0, 0, 0};
  EXPECT_TRUE(std::isnan(Auc(s.data(), all_pos.data(), 3)));
  EXPECT_TRUE(std::isnan(Auc(s.data(), all_neg.data(), 3)));
  EXPECT_TRUE(std::isnan(Auc(s.data(), all_pos.data(), 0)));
  const std::vector<float> nan_s = {0.1f, NAN, 0.3f}, y = {0, 1, 1};
  EXPECT_TRUE(std::isnan(Auc(nan_s.data(), y.data(), 3)));
}

TEST(LogLossTest, KnownValuesAndClamping) {
  const std::vector<float> p = {0.5f, 0.5f}, y = {0, 1};
  EXPECT_NEAR(LogLoss(p.data(), y.data(), 2), std::log(2.0), 1e-7);
  const std::vector<float> p2 = {0.9f, 0.2f}, y2 = {1, 0};
  EXPECT_NEAR(LogLoss(p2.data(), y2.data(), 2), -(std::log(0.9) + std::log(0.8)) / 2, 1e-6);
  // Confident mistakes are clamped at 1e-7, not infinite.
  const std::vector<float> p3 = {0.0f, 1.0f}, y3 = {1, 0};
  EXPECT_NEAR(LogLoss(p3.data(), y3.data(), 2), -std::log(1e-7), 1e-6);
  const std::vector<float> p4 = {1.0f, 0.0f}, y4 = {1, 0};
  EXPECT_NEAR(LogLoss(p4.data(), y4.data(), 2), -std::log(1 - 1e-7), 1e-9);
  EXPECT_TRUE(std::isnan(LogLoss(p.data(), y.data(), 0)));
}

}  // namespace
}  // namespace osprey::data
