#include "common/placement.h"

#include <gtest/gtest.h>

#include <random>
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
// The batched owners are ServerForKey's, bit for bit: both implementations (the AVX-512 one where
// this CPU has it), for server counts from 1 to 1000, tables 0 and 9, lengths that are and are not
// a multiple of the 8 lanes, and keys that make long jump chains (small mixes) as well as random.
TEST(PlacementTest, BatchedOwnersEqualServerForKey) {
  std::mt19937_64 rng(42);
  std::vector<uint64_t> keys(4099);
  for (size_t i = 0; i < keys.size(); ++i) keys[i] = i % 3 == 0 ? i : rng();
  using Fn = void (*)(uint32_t, const uint64_t*, size_t, int32_t, int32_t*);
  std::vector<std::pair<const char*, Fn>> impls = {{"ServersForKeys", &ServersForKeys},
                                                   {"lanes", &placement_internal::ServersForKeysLanes}};
  if (placement_internal::HaveAvx512()) impls.emplace_back("avx512", &placement_internal::ServersForKeysAvx512);
  for (const auto& [name, fn] : impls) {
    for (int32_t servers : {1, 2, 3, 7, 8, 16, 24, 300, 1000}) {
      for (uint32_t table : {0u, 9u}) {
        for (size_t n : {size_t{0}, size_t{5}, size_t{8}, size_t{4096}, keys.size()}) {
          std::vector<int32_t> owners(n + 1, -7);
          fn(table, keys.data(), n, servers, owners.data());
          size_t wrong = 0;
          for (size_t i = 0; i < n; ++i) wrong += owners[i] != ServerForKey(table, keys[i], servers);
          EXPECT_EQ(wrong, 0u) << name << " servers " << servers << " table " << table << " n " << n;
          EXPECT_EQ(owners[n], -7) << name << ": wrote past n";
        }
      }
    }
  }
}

}  // namespace osprey
