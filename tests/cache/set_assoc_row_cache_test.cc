// SetAssocRowCache: the rules of the GPU worker's device index (set_assoc_row_cache.h), on the
// CPU. gpu_sparse_test holds cuda::DeviceRowCache to this reference call for call.
#include "worker/cache/set_assoc_row_cache.h"

#include <gtest/gtest.h>

#include <set>
#include <string>
#include <vector>

namespace osprey::worker {
namespace {

using set_assoc::kWays;

struct Planned {
  std::vector<int32_t> slots;
  std::vector<uint64_t> miss_keys;
  std::vector<int32_t> miss_slots;
};

std::unique_ptr<SetAssocRowCache> MakeCache(uint64_t capacity, int64_t bound, int pinned, int max_keys) {
  auto made = SetAssocRowCache::Make({capacity, bound, pinned, max_keys});
  EXPECT_TRUE(made.ok()) << made.status().ToString();
  return made.ok() ? std::move(made).value() : nullptr;
}

Planned Plan(SetAssocRowCache* cache, int64_t step, const std::vector<uint64_t>& keys) {
  Planned p;
  p.slots.assign(keys.size(), -7);
  Status s = cache->Plan(step, keys.data(), static_cast<int>(keys.size()), p.slots.data(), &p.miss_keys, &p.miss_slots);
  EXPECT_TRUE(s.ok()) << s.ToString();
  return p;
}

// n distinct keys that all fall into `set` of `sets`, from `from` on.
std::vector<uint64_t> KeysOfSet(uint32_t set, uint32_t sets, int n, uint64_t from) {
  std::vector<uint64_t> keys;
  for (uint64_t k = from; static_cast<int>(keys.size()) < n; ++k) {
    if (set_assoc::SetOf(k, sets) == set) keys.push_back(k);
  }
  return keys;
}

TEST(SetAssocRowCacheTest, MakeRejectsBadOptionsNamingTheField) {
  struct Case {
    SetAssocOptions options;
    const char* field;
  };
  const Case cases[] = {
      {{64, -1, 2, 10}, "staleness_bound"},
      {{64, 0, 0, 10}, "pinned_steps"},
      {{64, 0, 2, 0}, "max_keys"},
      {{uint64_t{1} << 31, 0, 2, 10}, "exceed 2^31"},
      {{0, 0, 4, 1 << 29}, "exceed 2^31"},
  };
  for (const Case& c : cases) {
    auto made = SetAssocRowCache::Make(c.options);
    ASSERT_FALSE(made.ok());
    EXPECT_EQ(made.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(made.status().message().find(c.field), std::string::npos) << made.status().message();
  }
  auto made = SetAssocRowCache::Make({100, 0, 3, 7});
  ASSERT_TRUE(made.ok());
  EXPECT_EQ(made.value()->sets(), 3u);  // 100 rows: 3 whole sets
  EXPECT_EQ(made.value()->slot_count(), 3u * kWays + 3 * 7);
}

TEST(SetAssocRowCacheTest, HitsStaleMissesAndSlotsInTheKeysSet) {
  for (int64_t bound : {0, 1, 3}) {
    SCOPED_TRACE("bound " + std::to_string(bound));
    auto cache = MakeCache(64 * kWays, bound, 2, 100);
    std::vector<uint64_t> keys;
    for (uint64_t k = 0; k < 40; ++k) keys.push_back(k * 7919 + 3);
    Planned first = Plan(cache.get(), 0, keys);
    EXPECT_EQ(first.miss_keys, keys);  // all absent, input order
    EXPECT_EQ(first.miss_slots, first.slots);
    std::set<int32_t> distinct(first.slots.begin(), first.slots.end());
    EXPECT_EQ(distinct.size(), keys.size());
    for (size_t i = 0; i < keys.size(); ++i) {
      EXPECT_EQ(static_cast<uint32_t>(first.slots[i] / kWays), set_assoc::SetOf(keys[i], 64));
    }
    int64_t pulled_for = 0;
    for (int64_t step = 1; step < 10; ++step) {
      Planned p = Plan(cache.get(), step, keys);
      EXPECT_EQ(p.slots, first.slots);  // a held key keeps its way
      const bool stale = step - pulled_for > bound;
      EXPECT_EQ(p.miss_keys.size(), stale ? keys.size() : 0u) << "step " << step;
      if (stale) pulled_for = step;
    }
    const SetAssocStats& s = cache->stats();
    EXPECT_EQ(s.cache.lookups, 10u * keys.size());
    EXPECT_EQ(s.cache.misses_absent, keys.size());
    EXPECT_EQ(s.cache.hits + s.cache.misses_stale + s.cache.misses_absent, s.cache.lookups);
    EXPECT_EQ(s.overflows, 0u);
  }
}

TEST(SetAssocRowCacheTest, NoSetsServesEveryKeyFromTheStepsScratch) {
  auto cache = MakeCache(31, 4, 3, 5);  // below one set: no reuse
  ASSERT_EQ(cache->sets(), 0u);
  const std::vector<uint64_t> keys = {9, 8, 7};
  for (int64_t step = 0; step < 4; ++step) {
    Planned p = Plan(cache.get(), step, keys);
    const int32_t base = static_cast<int32_t>((step % 3) * 5);
    EXPECT_EQ(p.slots, (std::vector<int32_t>{base, base + 1, base + 2}));
    EXPECT_EQ(p.miss_keys, keys);
  }
  EXPECT_EQ(cache->stats().overflows, 12u);
  EXPECT_EQ(cache->stats().cache.hits, 0u);
}

TEST(SetAssocRowCacheTest, PinnedWaysAreNeverEvictedAndOverflowGoesToScratch) {
  auto cache = MakeCache(kWays, 100, 2, 64);  // one set, rows never stale
  const std::vector<uint64_t> old_keys = KeysOfSet(0, 1, kWays, 1);
  const std::vector<uint64_t> new_keys = KeysOfSet(0, 1, 5, 1000);
  Planned full = Plan(cache.get(), 0, old_keys);
  EXPECT_EQ(cache->stats().overflows, 0u);
  // Step 1: every way was used at step 0 > 1 - 2, so pinned: the new keys go to step 1's scratch.
  Planned over = Plan(cache.get(), 1, new_keys);
  for (size_t i = 0; i < new_keys.size(); ++i) {
    EXPECT_EQ(over.slots[i], static_cast<int32_t>(cache->ScratchBase(1) + i));
  }
  EXPECT_EQ(over.miss_keys, new_keys);
  EXPECT_EQ(cache->stats().overflows, 5u);
  EXPECT_EQ(cache->stats().cache.evictions, 0u);
  // Step 2: step 0's ways are free to go; the old keys are still held (nothing evicted them).
  Planned hit = Plan(cache.get(), 2, std::vector<uint64_t>(old_keys.begin(), old_keys.begin() + 3));
  EXPECT_TRUE(hit.miss_keys.empty());
  Planned in = Plan(cache.get(), 3, new_keys);
  EXPECT_EQ(cache->stats().cache.evictions, 5u);
  for (int32_t s : in.slots) EXPECT_LT(s, kWays);
  // The three keys used at step 2 are pinned at step 3 and were not the victims.
  Planned again = Plan(cache.get(), 4, std::vector<uint64_t>(old_keys.begin(), old_keys.begin() + 3));
  EXPECT_TRUE(again.miss_keys.empty());
}

TEST(SetAssocRowCacheTest, FrequentKeysOutliveOneOffKeys) {
  auto cache = MakeCache(kWays, 1000, 1, 64);  // one set; pinned only within the step
  const std::vector<uint64_t> hot = KeysOfSet(0, 1, 4, 1);
  std::vector<uint64_t> fill = KeysOfSet(0, 1, kWays - 4, 500);
  std::vector<uint64_t> first = hot;
  first.insert(first.end(), fill.begin(), fill.end());
  Plan(cache.get(), 0, first);
  for (int64_t step = 1; step <= 20; ++step) Plan(cache.get(), step, hot);  // counters 20
  // A scan of one-off keys, a few per step: 120 evictions, each of a one-off key, never a hot one
  // (their counters, 20, are halved every kWays evictions: 10, 5, 2).
  uint64_t next = 100000;
  for (int64_t step = 21; step < 61; ++step) {
    std::vector<uint64_t> scan = KeysOfSet(0, 1, 3, next);
    next = scan.back() + 1;
    Planned p = Plan(cache.get(), step, scan);
    EXPECT_EQ(p.miss_keys.size(), 3u);
  }
  Planned p = Plan(cache.get(), 61, hot);
  EXPECT_TRUE(p.miss_keys.empty()) << p.miss_keys.size() << " hot keys were evicted";
  EXPECT_EQ(cache->stats().overflows, 0u);
}

TEST(SetAssocRowCacheTest, RefusesBadPlansAndResetForgetsEverythingButTheCounters) {
  auto cache = MakeCache(4 * kWays, 0, 2, 4);
  std::vector<uint64_t> keys = {1, 2, 3, 4, 5};
  std::vector<int32_t> slots(5);
  std::vector<uint64_t> mk;
  std::vector<int32_t> ms;
  Status s = cache->Plan(0, keys.data(), 5, slots.data(), &mk, &ms);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("at most 4"), std::string::npos) << s.message();
  EXPECT_EQ(cache->Plan(-1, keys.data(), 1, slots.data(), &mk, &ms).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(cache->Plan(0, nullptr, 1, slots.data(), &mk, &ms).code(), StatusCode::kInvalidArgument);
  ASSERT_TRUE(cache->Plan(3, keys.data(), 4, slots.data(), &mk, &ms).ok());
  s = cache->Plan(2, keys.data(), 4, slots.data(), &mk, &ms);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("comes after step 3"), std::string::npos) << s.message();
  EXPECT_EQ(cache->stats().cache.lookups, 4u);  // refused plans count nothing
  cache->Reset();
  ASSERT_TRUE(cache->Plan(0, keys.data(), 4, slots.data(), &mk, &ms).ok());  // any step after Reset
  EXPECT_EQ(mk.size(), 4u);
  EXPECT_EQ(cache->stats().cache.misses_absent, 8u);
}

}  // namespace
}  // namespace osprey::worker
