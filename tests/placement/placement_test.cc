#include "common/placement.h"

#include <gtest/gtest.h>

#include <vector>

namespace osprey {
namespace {

TEST(PlacementTest, JumpHashIsInRangeAndDeterministic) {
  for (uint64_t k = 0; k < 10000; ++k) {
    int32_t b = JumpConsistentHash(k, 7);
    ASSERT_GE(b, 0);
    ASSERT_LT(b, 7);
    ASSERT_EQ(b, JumpConsistentHash(k, 7));
  }
  EXPECT_EQ(JumpConsistentHash(12345, 1), 0);
}

TEST(PlacementTest, KeysAreBalancedOverServers) {
  const int kServers = 8;
  const int kKeys = 200000;
  std::vector<int> count(kServers, 0);
  // Sequential keys (the worst case for weak hashes) in one table.
  for (uint64_t k = 0; k < kKeys; ++k) count[ServerForKey(0, k, kServers)]++;
  for (int c : count) {
    EXPECT_NEAR(c, kKeys / kServers, kKeys / kServers * 0.05) << "imbalanced placement";
  }
}

TEST(PlacementTest, AddingAServerMovesAboutOneNth) {
  const int kKeys = 100000;
  for (int n = 1; n < 8; ++n) {
    int moved = 0;
    for (uint64_t k = 0; k < kKeys; ++k) {
      int before = ServerForKey(3, k, n), after = ServerForKey(3, k, n + 1);
      if (before != after) {
        ++moved;
        ASSERT_EQ(after, n) << "a key may only move to the new server";
      }
    }
    double expect = static_cast<double>(kKeys) / (n + 1);
    EXPECT_NEAR(moved, expect, expect * 0.1) << "n=" << n;
  }
}

TEST(PlacementTest, TablesArePlacedIndependently) {
  int same = 0;
  for (uint64_t k = 0; k < 10000; ++k) same += ServerForKey(0, k, 4) == ServerForKey(1, k, 4);
  EXPECT_NEAR(same, 2500, 300);
}

TEST(PlacementTest, DenseChunksSpreadOverServers) {
  std::vector<int> count(4, 0);
  for (uint64_t c = 0; c < 4000; ++c) count[ServerForChunk(2, c, 4)]++;
  for (int x : count) EXPECT_NEAR(x, 1000, 150);
}

}  // namespace
}  // namespace osprey
