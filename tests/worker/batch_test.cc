#include "worker/data/batch.h"

#include <gtest/gtest.h>

#include <map>
#include <set>

namespace osprey::data {
namespace {

Batch MakeBatch(int size, int num_sparse, const std::vector<uint64_t>& ids) {
  Batch batch;
  batch.size = size;
  batch.num_sparse = num_sparse;
  batch.ids = ids;
  batch.labels.assign(size, 0.0f);
  return batch;
}

TEST(FeatureKeyTest, PutsFeatureInTopBitsAndMasksId) {
  EXPECT_EQ(FeatureKey(0, 5), 5u);
  EXPECT_EQ(FeatureKey(3, 5), (uint64_t{3} << 48) | 5u);
  EXPECT_EQ(FeatureKey(1, uint64_t{1} << 48 | 7), (uint64_t{1} << 48) | 7u);  // bit 48 of the id dropped
  EXPECT_NE(FeatureKey(1, 42), FeatureKey(2, 42));
  EXPECT_EQ(FeatureKey(65535, 0xFFFFFFFFFFFFull), ~uint64_t{0});
}

TEST(DedupeKeysTest, EmptyBatch) {
  std::vector<uint64_t> keys = {1, 2};
  std::vector<int32_t> index = {3};
  DedupeKeys(MakeBatch(0, 3, {}), &keys, &index);
  EXPECT_TRUE(keys.empty());
  EXPECT_TRUE(index.empty());
}

TEST(DedupeKeysTest, SmallBatchInFirstAppearanceOrder) {
  // 3 samples x 2 features. Id 7 appears in both features: two different keys.
  const Batch batch = MakeBatch(3, 2, {7, 7, 9, 7, 7, 1});
  std::vector<uint64_t> keys;
  std::vector<int32_t> index;
  DedupeKeys(batch, &keys, &index);
  const std::vector<uint64_t> want_keys = {FeatureKey(0, 7), FeatureKey(1, 7), FeatureKey(0, 9), FeatureKey(1, 1)};
  EXPECT_EQ(keys, want_keys);
  EXPECT_EQ(index, (std::vector<int32_t>{0, 1, 2, 1, 0, 3}));
}

TEST(DedupeKeysTest, LargeRandomBatchMatchesReference) {
  const int size = 4096, num_sparse = 26;
  std::vector<uint64_t> ids(size * num_sparse);
  uint64_t state = 12345;
  for (auto& id : ids) {
    state = state * 6364136223846793005ULL + 1442695040888963407ULL;
    id = (state >> 33) % 500;  // many repeats
  }
  const Batch batch = MakeBatch(size, num_sparse, ids);
  std::vector<uint64_t> keys;
  std::vector<int32_t> index;
  DedupeKeys(batch, &keys, &index);

  std::set<uint64_t> distinct;
  for (int i = 0; i < size * num_sparse; ++i) distinct.insert(FeatureKey(i % num_sparse, ids[i]));
  EXPECT_EQ(keys.size(), distinct.size());
  EXPECT_EQ(std::set<uint64_t>(keys.begin(), keys.end()).size(), keys.size()) << "keys not unique";
  ASSERT_EQ(index.size(), ids.size());
  for (int i = 0; i < size * num_sparse; ++i) {
    ASSERT_GE(index[i], 0);
    ASSERT_LT(static_cast<size_t>(index[i]), keys.size());
    ASSERT_EQ(keys[index[i]], FeatureKey(i % num_sparse, ids[i])) << "at " << i;
  }
}

TEST(CheckBatchShapeTest, AcceptsConsistentAndNamesBadField) {
  Batch batch = MakeBatch(2, 3, std::vector<uint64_t>(6, 1));
  batch.num_dense = 2;
  batch.dense.assign(4, 0.0f);
  EXPECT_TRUE(CheckBatchShape(batch).ok());
  batch.oracle_prob.assign(2, 0.5f);
  EXPECT_TRUE(CheckBatchShape(batch).ok());

  batch.ids.pop_back();
  Status status = CheckBatchShape(batch);
  EXPECT_EQ(status.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(status.message().find("ids"), std::string::npos) << status.ToString();
  batch.ids.push_back(1);
  batch.labels.push_back(1);
  status = CheckBatchShape(batch);
  EXPECT_NE(status.message().find("labels"), std::string::npos) << status.ToString();
}

}  // namespace
}  // namespace osprey::data
