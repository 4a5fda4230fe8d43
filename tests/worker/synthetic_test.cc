#include "worker/data/synthetic.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>
#include <unordered_map>

#include "worker/data/metrics.h"

namespace osprey::data {
namespace {

std::unique_ptr<SyntheticGenerator> MakeOrDie(const SyntheticConfig& config, uint64_t stream) {
  auto generator = SyntheticGenerator::Make(config, stream);
  EXPECT_TRUE(generator.ok()) << generator.status().ToString();
  return std::move(generator).value();
}

void ExpectSameBatch(const Batch& a, const Batch& b) {
  EXPECT_EQ(a.size, b.size);
  EXPECT_EQ(a.dense, b.dense);
  EXPECT_EQ(a.ids, b.ids);
  EXPECT_EQ(a.labels, b.labels);
  EXPECT_EQ(a.oracle_prob, b.oracle_prob);
}

TEST(SyntheticTest, KaggleCardinalities) {
  const auto c = SyntheticGenerator::CriteoKaggleCardinalities();
  ASSERT_EQ(c.size(), 26u);
  EXPECT_EQ(c[0], 1460u);
  EXPECT_EQ(c[2], 10131227u);
  EXPECT_EQ(c[25], 142572u);
  const auto d = DefaultSyntheticCardinalities();
  ASSERT_EQ(d.size(), 26u);
  EXPECT_EQ(*std::max_element(d.begin(), d.end()), 20000u);
  EXPECT_EQ(d[8], 3u);
}

TEST(SyntheticTest, SameSeedAndStreamGiveIdenticalBatches) {
  const SyntheticConfig config;
  auto a = MakeOrDie(config, 3);
  auto b = MakeOrDie(config, 3);
  Batch x, y;
  for (int i = 0; i < 3; ++i) {
    a->NextBatch(257, &x);
    b->NextBatch(257, &y);
    ExpectSameBatch(x, y);
  }
}

TEST(SyntheticTest, BatchingAndSeekDoNotChangeTheStream) {
  const SyntheticConfig config;
  auto whole = MakeOrDie(config, 0);
  auto split = MakeOrDie(config, 0);
  Batch all, part1, part2;
  whole->NextBatch(100, &all);
  split->NextBatch(37, &part1);
  split->NextBatch(63, &part2);
  EXPECT_EQ(split->next_sample(), 100u);
  for (int b = 0; b < 100; ++b) {
    const Batch& part = b < 37 ? part1 : part2;
    const int pb = b < 37 ? b : b - 37;
    ASSERT_EQ(all.labels[b], part.labels[pb]);
    ASSERT_EQ(all.ids[b * 26 + 5], part.ids[pb * 26 + 5]);
    ASSERT_EQ(all.dense[b * 13 + 2], part.dense[pb * 13 + 2]);
  }
  auto seeker = MakeOrDie(config, 0);
  seeker->SeekToSample(37);
  Batch sought;
  seeker->NextBatch(63, &sought);
  ExpectSameBatch(sought, part2);
}

TEST(SyntheticTest, DifferentStreamsAndSeedsDiffer) {
  SyntheticConfig config;
  Batch a, b, c;
  MakeOrDie(config, 0)->NextBatch(2000, &a);
  MakeOrDie(config, 1)->NextBatch(2000, &b);
  config.seed = 2;
  MakeOrDie(config, 0)->NextBatch(2000, &c);
  int same_ids = 0, same_labels = 0;
  for (size_t i = 0; i < a.ids.size(); ++i) same_ids += a.ids[i] == b.ids[i];
  for (int i = 0; i < 2000; ++i) same_labels += a.labels[i] == b.labels[i];
  // Zipf makes hot ids coincide often on small features; most slots must still differ.
  EXPECT_LT(same_ids, static_cast<int>(a.ids.size() * 0.6));
  EXPECT_LT(same_labels, 1900);
  EXPECT_NE(a.ids, c.ids);
  EXPECT_NE(a.oracle_prob, c.oracle_prob);
}

TEST(SyntheticTest, ShapesAndRanges) {
  SyntheticConfig config;
  config.dense_missing_prob = 0.3;
  auto generator = MakeOrDie(config, 0);
  Batch batch;
  generator->NextBatch(5000, &batch);
  ASSERT_TRUE(CheckBatchShape(batch).ok());
  EXPECT_EQ(batch.num_dense, 13);
  EXPECT_EQ(batch.num_sparse, 26);
  int zeros = 0;
  for (float x : batch.dense) {
    ASSERT_TRUE(std::isfinite(x));
    ASSERT_GE(x, 0.0f);
    zeros += x == 0.0f;
  }
  EXPECT_GE(zeros, static_cast<int>(0.3 * 0.9 * batch.dense.size()));  // missing -> 0 (plus zero counts)
  for (size_t i = 0; i < batch.ids.size(); ++i) ASSERT_LT(batch.ids[i], config.cardinalities[i % 26]);
  for (int b = 0; b < batch.size; ++b) {
    ASSERT_TRUE(batch.labels[b] == 0.0f || batch.labels[b] == 1.0f);
    ASSERT_GT(batch.oracle_prob[b], 0.0f);
    ASSERT_LT(batch.oracle_prob[b], 1.0f);
  }
  batch.oracle_prob.assign(3, 0.5f);
  generator->NextBatch(0, &batch);
  EXPECT_EQ(batch.size, 0);
  EXPECT_TRUE(CheckBatchShape(batch).ok());
}

TEST(SyntheticTest, IdsAreZipfShapedAndScrambled) {
  SyntheticConfig config;
  config.cardinalities = {20000, SyntheticGenerator::CriteoKaggleCardinalities()[2]};
  auto generator = MakeOrDie(config, 0);
  Batch batch;
  generator->NextBatch(100000, &batch);
  for (int f = 0; f < 2; ++f) {
    std::unordered_map<uint64_t, int> count;
    for (int b = 0; b < batch.size; ++b) {
      ASSERT_LT(batch.ids[b * 2 + f], config.cardinalities[f]);
      ++count[batch.ids[b * 2 + f]];
    }
    std::vector<int> freq;
    uint64_t hottest = 0;
    for (const auto& [id, c] : count) {
      freq.push_back(c);
      if (c > count[hottest]) hottest = id;
    }
    std::sort(freq.rbegin(), freq.rend());
    // Zipf(1.05): the top id alone takes several percent; the 100th is ~100x rarer.
    EXPECT_GT(freq[0], batch.size / 50) << "feature " << f;
    EXPECT_GT(freq[0], 30 * freq[std::min<size_t>(99, freq.size() - 1)]) << "feature " << f;
    EXPECT_GT(count.size(), 3000u) << "feature " << f << ": the tail is missing";
    EXPECT_GT(hottest, 100u) << "the hottest id should not be a small integer";
  }
}

TEST(SyntheticTest, OracleIsInformativeAndCalibrated) {
  auto generator = MakeOrDie(SyntheticConfig(), SyntheticGenerator::kEvalStreamId);
  Batch batch;
  generator->NextBatch(100000, &batch);
  const size_t n = batch.size;
  const double auc = Auc(batch.oracle_prob.data(), batch.labels.data(), n);
  double ctr = 0, mean_prob = 0;
  for (size_t i = 0; i < n; ++i) {
    ctr += batch.labels[i];
    mean_prob += batch.oracle_prob[i];
  }
  ctr /= n;
  mean_prob /= n;
  EXPECT_GT(auc, 0.70);
  EXPECT_LT(auc, 0.90);
  EXPECT_GT(ctr, 0.1);
  EXPECT_LT(ctr, 0.5);
  EXPECT_NEAR(mean_prob, ctr, 0.01);
  const std::vector<float> constant(n, static_cast<float>(ctr));
  EXPECT_LT(LogLoss(batch.oracle_prob.data(), batch.labels.data(), n),
            LogLoss(constant.data(), batch.labels.data(), n) - 0.03);
}

TEST(SyntheticTest, LabelFlipAddsNoise) {
  SyntheticConfig config;
  Batch clean, noisy;
  MakeOrDie(config, 0)->NextBatch(50000, &clean);
  config.label_flip_prob = 0.2;
  MakeOrDie(config, 0)->NextBatch(50000, &noisy);
  const double clean_auc = Auc(clean.oracle_prob.data(), clean.labels.data(), clean.size);
  const double noisy_auc = Auc(noisy.oracle_prob.data(), noisy.labels.data(), noisy.size);
  EXPECT_LT(noisy_auc, clean_auc - 0.05);
  EXPECT_GE(*std::min_element(noisy.oracle_prob.begin(), noisy.oracle_prob.end()), 0.2f - 1e-6f);
}

TEST(SyntheticTest, MinimalConfigs) {
  SyntheticConfig config;
  config.num_dense = 0;
  config.cardinalities = {1};
  config.interaction_rank = 0;
  auto generator = MakeOrDie(config, 0);
  Batch batch;
  generator->NextBatch(10, &batch);
  EXPECT_TRUE(CheckBatchShape(batch).ok());
  for (uint64_t id : batch.ids) EXPECT_EQ(id, 0u);
}

// FNV-1a over the ids, the dense values' bits and the labels of a batch.
uint64_t Fingerprint(const Batch& batch) {
  uint64_t h = 0xCBF29CE484222325ULL;
  auto mix = [&h](uint64_t v) {
    for (int i = 0; i < 8; ++i) h = (h ^ ((v >> (8 * i)) & 0xFF)) * 0x100000001B3ULL;
  };
  for (uint64_t id : batch.ids) mix(id);
  for (float x : batch.dense) {
    uint32_t bits;
    std::memcpy(&bits, &x, sizeof bits);
    mix(bits);
  }
  for (float y : batch.labels) mix(y > 0.5f);
  return h;
}

TEST(SyntheticTest, StreamIsPinned) {
  // The data set is part of every benchmark's definition: a change to this value changes the data
  // everyone trains on, so it must be deliberate (update the constant in the same change).
  SyntheticConfig config;
  config.cardinalities = SyntheticGenerator::CriteoKaggleCardinalities();
  auto generator = MakeOrDie(config, 7);
  Batch batch;
  generator->NextBatch(2000, &batch);
  EXPECT_EQ(Fingerprint(batch), 0x391FFD2E5EBC17FBULL) << std::hex << Fingerprint(batch);
}

void ExpectInvalid(const SyntheticConfig& config, const std::string& field) {
  auto generator = SyntheticGenerator::Make(config, 0);
  ASSERT_FALSE(generator.ok()) << field;
  EXPECT_EQ(generator.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(generator.status().message().find(field), std::string::npos) << generator.status().ToString();
}

TEST(SyntheticTest, ValidationNamesTheField) {
  SyntheticConfig c;
  c.cardinalities.clear();
  ExpectInvalid(c, "cardinalities");
  c = SyntheticConfig();
  c.cardinalities[4] = 0;
  ExpectInvalid(c, "cardinalities[4]");
  c = SyntheticConfig();
  c.cardinalities[0] = uint64_t{1} << 50;
  ExpectInvalid(c, "cardinalities[0]");
  c = SyntheticConfig();
  c.zipf_alpha = 0;
  ExpectInvalid(c, "zipf_alpha");
  c.zipf_alpha = NAN;
  ExpectInvalid(c, "zipf_alpha");
  c = SyntheticConfig();
  c.num_dense = -1;
  ExpectInvalid(c, "num_dense");
  c = SyntheticConfig();
  c.interaction_rank = 5;
  ExpectInvalid(c, "interaction_rank");
  c = SyntheticConfig();
  c.sparse_std = -0.1;
  ExpectInvalid(c, "sparse_std");
  c = SyntheticConfig();
  c.label_flip_prob = 0.5;
  ExpectInvalid(c, "label_flip_prob");
  c = SyntheticConfig();
  c.dense_missing_prob = 1.0;
  ExpectInvalid(c, "dense_missing_prob");
  c = SyntheticConfig();
  c.bias = INFINITY;
  ExpectInvalid(c, "bias");
}

}  // namespace
}  // namespace osprey::data
