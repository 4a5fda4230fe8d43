// KeyRouter: the one partition of sparse keys by server that Pull, Push and PushByServer share.
#include "worker/client/key_router.h"

#include <gtest/gtest.h>

#include <numeric>
#include <set>

#include "common/placement.h"

namespace osprey::worker {
namespace {

TEST(KeyRouterTest, RouteGivesEveryKeyToItsOwnerOnceInCallOrder) {
  std::vector<uint64_t> keys(500);
  std::iota(keys.begin(), keys.end(), 1 << 20);
  keys.push_back(keys[3]);  // a duplicate goes with its twin's server, at its own position
  const KeyRouter router(4);
  const std::vector<KeySlice> slices = router.Route(7, keys.data(), keys.size(), nullptr);
  ASSERT_EQ(slices.size(), 4u);
  std::set<uint32_t> seen;
  for (size_t i = 0; i < slices.size(); ++i) {
    const KeySlice& s = slices[i];
    if (i > 0) {
      EXPECT_LT(slices[i - 1].server, s.server);
    }
    ASSERT_EQ(s.keys.size(), s.count * sizeof(uint64_t));
    ASSERT_EQ(s.positions.count<uint32_t>(), s.count);
    const uint32_t* pos = s.position_data();
    for (size_t j = 0; j < s.count; ++j) {
      EXPECT_EQ(s.keys.as<uint64_t>()[j], keys[pos[j]]);
      EXPECT_EQ(ServerForKey(7, keys[pos[j]], 4), s.server);
      if (j > 0) {
        EXPECT_LT(pos[j - 1], pos[j]);
      }
      EXPECT_TRUE(seen.insert(pos[j]).second) << "position " << pos[j] << " twice";
    }
  }
  EXPECT_EQ(seen.size(), keys.size());
}

TEST(KeyRouterTest, OneServerIsTheCallsKeysAsTheyAre) {
  std::vector<uint64_t> keys = {9, 3, 9};
  Buffer kb = Buffer::Copy(keys.data(), keys.size() * sizeof(uint64_t));
  const std::vector<KeySlice> slices = KeyRouter(1).Route(0, keys.data(), keys.size(), &kb);
  ASSERT_EQ(slices.size(), 1u);
  EXPECT_EQ(slices[0].count, 3u);
  EXPECT_EQ(slices[0].first, 0u);
  EXPECT_TRUE(slices[0].positions.empty());
  EXPECT_EQ(slices[0].keys.data(), kb.data());  // a view, not a copy
  const std::vector<KeySlice> copied = KeyRouter(1).Route(0, keys.data(), keys.size(), nullptr);
  EXPECT_NE(copied[0].keys.data(), reinterpret_cast<const uint8_t*>(keys.data()));
  EXPECT_EQ(copied[0].keys.as<uint64_t>()[2], 9u);
}

TEST(KeyRouterTest, GroupedSlicesAreContiguousRunsAndBadCountsAreRefused) {
  std::vector<uint64_t> keys(10);
  std::iota(keys.begin(), keys.end(), 0);
  Buffer kb = Buffer::Copy(keys.data(), keys.size() * sizeof(uint64_t));
  const KeyRouter router(3);
  const std::vector<int32_t> counts = {4, 0, 6};
  auto slices = router.Grouped(keys.data(), keys.size(), counts.data(), &kb, "emb");
  ASSERT_TRUE(slices.ok()) << slices.status().ToString();
  ASSERT_EQ(slices->size(), 2u);
  EXPECT_EQ((*slices)[0].server, 0);
  EXPECT_EQ((*slices)[1].server, 2);
  EXPECT_EQ((*slices)[1].first, 4u);
  EXPECT_EQ((*slices)[1].keys.data(), kb.data() + 4 * sizeof(uint64_t));
  const std::vector<int32_t> short_counts = {4, 0, 5}, negative = {4, -1, 7};
  auto bad = router.Grouped(keys.data(), keys.size(), short_counts.data(), nullptr, "emb");
  EXPECT_EQ(bad.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(bad.status().message().find("sum to 9, not to the 10 keys"), std::string::npos) << bad.status().ToString();
  bad = router.Grouped(keys.data(), keys.size(), negative.data(), nullptr, "emb");
  EXPECT_EQ(bad.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(bad.status().message().find("server 1 has a negative count -1"), std::string::npos);
}

}  // namespace
}  // namespace osprey::worker
