// Moved rows (server/migration/moved_rows.h): which records a scale step moves, and where.
#include "server/migration/moved_rows.h"

#include <gtest/gtest.h>

#include <numeric>

#include "common/placement.h"

namespace osprey::server::migration {
namespace {

std::vector<uint64_t> KeysOf(uint32_t table, int rank, int servers, size_t want) {
  std::vector<uint64_t> keys;
  for (uint64_t k = 1; keys.size() < want; ++k) {
    if (ServerForKey(table, k * 7919, servers) == rank) keys.push_back(k * 7919);
  }
  return keys;
}

TEST(MovedRowsTest, GrowingMovesAboutOneInMOnlyToTheNewRank) {
  size_t moved = 0, total = 0;
  for (int self = 0; self < 2; ++self) {
    std::vector<uint64_t> keys = KeysOf(0, self, 2, 20000);
    MovePlan plan = PlanKeyMoves(0, keys.data(), keys.size(), self, 3);
    ASSERT_EQ(plan.by_dest.size(), 3u);
    EXPECT_TRUE(plan.by_dest[0].empty());
    EXPECT_TRUE(plan.by_dest[1].empty()) << "no key moves between surviving servers";
    for (uint64_t k : plan.by_dest[2]) EXPECT_EQ(ServerForKey(0, k, 3), 2);
    EXPECT_EQ(plan.kept + plan.moved(), keys.size());
    moved += plan.moved();
    total += keys.size();
  }
  const double frac = static_cast<double>(moved) / static_cast<double>(total);
  EXPECT_NEAR(frac, 1.0 / 3, 0.02);
}

TEST(MovedRowsTest, ShrinkingMovesEverythingOfTheRemovedRankAndNothingElse) {
  std::vector<uint64_t> keys = KeysOf(1, 2, 3, 9000);
  MovePlan plan = PlanKeyMoves(1, keys.data(), keys.size(), 2, 2);
  ASSERT_EQ(plan.by_dest.size(), 3u) << "room for self even when it leaves the map";
  EXPECT_EQ(plan.kept, 0u);
  EXPECT_EQ(plan.moved(), keys.size());
  EXPECT_NEAR(static_cast<double>(plan.by_dest[0].size()) / keys.size(), 0.5, 0.03);
  for (uint64_t k : plan.by_dest[1]) EXPECT_EQ(ServerForKey(1, k, 2), 1);
  for (int self = 0; self < 2; ++self) {
    std::vector<uint64_t> stay = KeysOf(1, self, 3, 3000);
    EXPECT_EQ(PlanKeyMoves(1, stay.data(), stay.size(), self, 2).moved(), 0u);
  }
}

TEST(MovedRowsTest, DenseChunksFollowServerForChunk) {
  const uint64_t num_chunks = 300;
  size_t owned_total = 0;
  for (int r = 0; r < 3; ++r) owned_total += OwnedChunks(5, num_chunks, r, 3).size();
  EXPECT_EQ(owned_total, num_chunks);
  for (int r = 0; r < 3; ++r) {
    for (uint64_t c : OwnedChunks(5, num_chunks, r, 3)) EXPECT_EQ(ServerForChunk(5, c, 3), r) << c;
  }
  std::vector<uint64_t> all = OwnedChunks(5, num_chunks, 0, 1);
  EXPECT_EQ(all.size(), num_chunks);  // one server owns every chunk, in order
  EXPECT_TRUE(std::is_sorted(all.begin(), all.end()));
}

TEST(MovedRowsTest, EmptyInput) {
  MovePlan plan = PlanKeyMoves(0, nullptr, 0, 0, 4);
  EXPECT_EQ(plan.moved(), 0u);
  EXPECT_EQ(plan.kept, 0u);
}

}  // namespace
}  // namespace osprey::server::migration
