#include "worker/cache/row_cache.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <random>
#include <set>
#include <vector>

#include "tests/cache/row_cache_reference.h"

namespace osprey::worker {
namespace {

using cache_testing::CheckPlan;
using cache_testing::Planned;
using cache_testing::PlanStep;
using cache_testing::Reference;

std::unique_ptr<RowCache> MakeCache(uint64_t capacity, int64_t bound, int pinned) {
  RowCacheOptions options;
  options.capacity_rows = capacity;
  options.staleness_bound = bound;
  options.pinned_steps = pinned;
  auto made = RowCache::Make(options);
  EXPECT_TRUE(made.ok()) << made.status().ToString();
  return made.ok() ? std::move(made).value() : nullptr;
}

TEST(RowCacheTest, MakeRejectsBadOptionsNamingTheField) {
  struct Case {
    RowCacheOptions options;
    const char* field;
  };
  const Case cases[] = {
      {{0, 0, 2}, "capacity_rows"},
      {{uint64_t{1} << 31, 0, 2}, "capacity_rows"},
      {{10, -1, 2}, "staleness_bound"},
      {{10, 0, 0}, "pinned_steps"},
  };
  for (const Case& c : cases) {
    auto made = RowCache::Make(c.options);
    ASSERT_FALSE(made.ok());
    EXPECT_EQ(made.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(made.status().message().find(c.field), std::string::npos) << made.status().message();
  }
  EXPECT_TRUE(RowCache::Make({1, 0, 1}).ok());
}

TEST(RowCacheTest, HitsMissesAndStalenessAcrossSteps) {
  for (int64_t bound : {0, 1, 3}) {
    SCOPED_TRACE("bound " + std::to_string(bound));
    auto cache = MakeCache(100, bound, 2);
    const std::vector<uint64_t> keys = {11, 22, 33};
    std::vector<int32_t> first_slots;
    int64_t pulled_for = -1;
    uint64_t stale = 0;
    for (int64_t step = 0; step < 12; ++step) {
      Planned p = PlanStep(cache.get(), step, keys);
      ASSERT_TRUE(p.status.ok()) << p.status.ToString();
      if (step == 0) first_slots = p.slots;
      EXPECT_EQ(p.slots, first_slots) << "a held key keeps its slot";
      const bool expect_miss = step == 0 || step - pulled_for > bound;
      if (expect_miss) {
        EXPECT_EQ(p.miss_keys, keys) << "step " << step;
        EXPECT_EQ(p.miss_slots, p.slots);
        pulled_for = step;
        stale += step > 0 ? keys.size() : 0;
      } else {
        EXPECT_TRUE(p.miss_keys.empty()) << "step " << step;
      }
    }
    const RowCacheStats stats = cache->stats();
    EXPECT_EQ(stats.lookups, 36u);
    EXPECT_EQ(stats.misses_absent, 3u);
    EXPECT_EQ(stats.misses_stale, stale);
    EXPECT_EQ(stats.hits, 36u - 3u - stale);
    EXPECT_EQ(stats.evictions, 0u);
    EXPECT_EQ(cache->size(), 3u);
    // bound 0: every step re-pulls; 1: every other step; 3: every fourth.
    EXPECT_EQ(stale, bound == 0 ? 33u : bound == 1 ? 15u : 6u);
  }
}

TEST(RowCacheTest, BoundZeroMissesEveryKeyEveryStep) {
  auto cache = MakeCache(64, 0, 2);
  std::mt19937_64 rng(3);
  std::vector<uint64_t> keys;
  for (int64_t step = 0; step < 30; ++step) {
    std::set<uint64_t> distinct;
    while (distinct.size() < 20) distinct.insert(rng() % 40);
    keys.assign(distinct.begin(), distinct.end());
    Planned p = PlanStep(cache.get(), step, keys);
    ASSERT_TRUE(p.status.ok()) << p.status.ToString();
    EXPECT_EQ(std::set<uint64_t>(p.miss_keys.begin(), p.miss_keys.end()), distinct) << "step " << step;
  }
  EXPECT_EQ(cache->stats().hits, 0u);
  EXPECT_EQ(cache->stats().lookups, 600u);
  // Planning the same step again is served by the rows just pulled for it.
  Planned again = PlanStep(cache.get(), 29, keys);
  ASSERT_TRUE(again.status.ok());
  EXPECT_TRUE(again.miss_keys.empty());
  EXPECT_EQ(cache->stats().hits, 20u);
}

TEST(RowCacheTest, HotKeySurvivesOneOffKeysThatEvictColdOnes) {
  constexpr uint64_t kCapacity = 8;
  auto cache = MakeCache(kCapacity, 1 << 30, 1);
  constexpr uint64_t kHot = 1000, kCold = 2000;
  ASSERT_TRUE(PlanStep(cache.get(), 0, {kHot, kCold}).status.ok());
  int64_t step = 1;
  for (; step < 50; ++step) ASSERT_TRUE(PlanStep(cache.get(), step, {kHot}).status.ok());
  // Four capacities' worth of keys used once: LRU would have dropped the hot key after 7.
  uint64_t next = 1;
  for (int i = 0; i < 4 * static_cast<int>(kCapacity); ++i, ++step) {
    ASSERT_TRUE(PlanStep(cache.get(), step, {next++}).status.ok());
  }
  Planned p = PlanStep(cache.get(), step++, {kHot, kCold});
  ASSERT_TRUE(p.status.ok());
  EXPECT_FALSE(p.Missed(kHot)) << "the hot key was evicted";
  EXPECT_TRUE(p.Missed(kCold)) << "the cold key outlived one-off keys";
  EXPECT_GT(cache->stats().evictions, 0u);
  // Aging: with no further use the hot key's counter halves on every pass of the hand.
  for (int i = 0; i < 40 * static_cast<int>(kCapacity); ++i, ++step) {
    ASSERT_TRUE(PlanStep(cache.get(), step, {next++}).status.ok());
  }
  EXPECT_TRUE(PlanStep(cache.get(), step, {kHot}).Missed(kHot)) << "a formerly hot key never ages out";
}

TEST(RowCacheTest, SlotsOfThePinnedStepsAreNotReused) {
  auto cache = MakeCache(4, 1 << 30, 2);
  Planned s0 = PlanStep(cache.get(), 0, {1, 2});
  Planned s1 = PlanStep(cache.get(), 1, {3, 4});
  ASSERT_TRUE(s0.status.ok() && s1.status.ok());
  // Step 2 pins what step 1 used, so the new keys must take step 0's slots.
  Planned s2 = PlanStep(cache.get(), 2, {5, 6});
  ASSERT_TRUE(s2.status.ok()) << s2.status.ToString();
  EXPECT_EQ(std::set<int32_t>(s2.slots.begin(), s2.slots.end()), std::set<int32_t>(s0.slots.begin(), s0.slots.end()));
  Planned s3 = PlanStep(cache.get(), 3, {3, 4});
  EXPECT_TRUE(s3.miss_keys.empty());
  EXPECT_EQ(s3.slots, s1.slots);

  // Randomised: with pinned_steps 2, a slot planned at step t never holds another key at t + 1.
  auto tight = MakeCache(48, 2, 2);
  std::mt19937_64 rng(5);
  std::map<int32_t, uint64_t> previous;  // slot -> key at the previous step
  for (int64_t step = 0; step < 400; ++step) {
    std::set<uint64_t> distinct;
    while (distinct.size() < 20) distinct.insert(rng() % 200);
    const std::vector<uint64_t> keys(distinct.begin(), distinct.end());
    Planned p = PlanStep(tight.get(), step, keys);
    ASSERT_TRUE(p.status.ok()) << p.status.ToString();
    std::map<int32_t, uint64_t> current;
    for (size_t i = 0; i < keys.size(); ++i) {
      auto it = previous.find(p.slots[i]);
      ASSERT_TRUE(it == previous.end() || it->second == keys[i])
          << "step " << step << ": slot " << p.slots[i] << " of key " << it->second << " given to " << keys[i];
      current[p.slots[i]] = keys[i];
    }
    previous = current;
  }
  EXPECT_GT(tight->stats().evictions, 1000u);
}

TEST(RowCacheTest, CapacityErrorLeavesTheCacheUnchanged) {
  auto cache = MakeCache(4, 1 << 30, 2);
  Planned s5 = PlanStep(cache.get(), 5, {1, 2, 3, 4});
  ASSERT_TRUE(s5.status.ok());
  const RowCacheStats before = cache->stats();

  Planned too_many = PlanStep(cache.get(), 7, {5, 6, 7, 8, 9});
  EXPECT_EQ(too_many.status.code(), StatusCode::kResourceExhausted);
  EXPECT_EQ(too_many.status.message(), "row cache: capacity 4 rows cannot hold the 5 distinct keys of the last 2 steps");
  // Step 6 still pins step 5's four keys: the failed step 7 must not have unpinned them.
  Planned pinned = PlanStep(cache.get(), 6, {1, 9});
  EXPECT_EQ(pinned.status.code(), StatusCode::kResourceExhausted);
  EXPECT_NE(pinned.status.message().find("cannot hold the 5 distinct keys"), std::string::npos);
  EXPECT_EQ(cache->size(), 4u);
  const RowCacheStats after = cache->stats();
  EXPECT_EQ(after.lookups, before.lookups);
  EXPECT_EQ(after.hits, before.hits);
  EXPECT_EQ(after.evictions, before.evictions);

  Planned same = PlanStep(cache.get(), 6, {1, 2, 3, 4});
  ASSERT_TRUE(same.status.ok());
  EXPECT_EQ(same.slots, s5.slots);
  EXPECT_TRUE(same.miss_keys.empty());
  // At step 8 nothing of step 6 is pinned any more.
  Planned later = PlanStep(cache.get(), 8, {5, 6, 7, 8});
  ASSERT_TRUE(later.status.ok()) << later.status.ToString();
  EXPECT_EQ(later.miss_keys.size(), 4u);
  EXPECT_EQ(cache->stats().evictions, 4u);
}

TEST(RowCacheTest, InvalidateFreesSlots) {
  auto cache = MakeCache(2, 1 << 30, 2);
  Planned s0 = PlanStep(cache.get(), 0, {1, 2});
  ASSERT_TRUE(s0.status.ok());
  EXPECT_EQ(PlanStep(cache.get(), 1, {3}).status.code(), StatusCode::kResourceExhausted);
  const int32_t slot_of_1 = s0.SlotOf({1, 2}, 1);
  const int32_t junk[] = {slot_of_1, slot_of_1, -1, 2, 1000};  // repeats and out-of-range are ignored
  cache->Invalidate(junk, 5);
  EXPECT_EQ(cache->size(), 1u);
  Planned s1 = PlanStep(cache.get(), 1, {3});
  ASSERT_TRUE(s1.status.ok()) << s1.status.ToString();
  EXPECT_EQ(s1.slots[0], slot_of_1);
  EXPECT_EQ(cache->stats().evictions, 0u);
  // Key 1 is gone: it misses as absent, and key 2 still hits.
  auto cache2 = MakeCache(4, 1 << 30, 1);
  ASSERT_TRUE(PlanStep(cache2.get(), 0, {1, 2}).status.ok());
  const int32_t first = 0;
  cache2->Invalidate(&first, 1);
  Planned again = PlanStep(cache2.get(), 1, {1, 2});
  ASSERT_TRUE(again.status.ok());
  EXPECT_EQ(again.miss_keys, std::vector<uint64_t>{1});
  EXPECT_EQ(cache2->stats().misses_absent, 3u);
  EXPECT_EQ(cache2->stats().hits, 1u);
}

TEST(RowCacheTest, RejectsDecreasingOrNegativeSteps) {
  auto cache = MakeCache(8, 0, 2);
  ASSERT_TRUE(PlanStep(cache.get(), 3, {1}).status.ok());
  EXPECT_EQ(PlanStep(cache.get(), 2, {1}).status.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(PlanStep(cache.get(), -1, {1}).status.code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(PlanStep(cache.get(), 3, {1}).status.ok());
  EXPECT_EQ(cache->Plan(4, nullptr, 1, nullptr, nullptr, nullptr).code(), StatusCode::kInvalidArgument);
}

TEST(RowCacheTest, RepeatedKeysShareASlot) {
  auto cache = MakeCache(8, 0, 2);
  Planned p = PlanStep(cache.get(), 0, {5, 6, 5, 6, 5});
  ASSERT_TRUE(p.status.ok());
  EXPECT_EQ(p.slots[0], p.slots[2]);
  EXPECT_EQ(p.slots[0], p.slots[4]);
  EXPECT_EQ(p.slots[1], p.slots[3]);
  EXPECT_NE(p.slots[0], p.slots[1]);
  EXPECT_EQ(p.miss_keys, (std::vector<uint64_t>{5, 6}));
  EXPECT_EQ(cache->size(), 2u);
  Planned q = PlanStep(cache.get(), 1, {6, 6});
  EXPECT_EQ(q.miss_keys, std::vector<uint64_t>{6});
  EXPECT_EQ(q.slots[0], q.slots[1]);
}

TEST(RowCacheTest, RandomizedAgreesWithAReferenceModel) {
  std::mt19937_64 rng(11);
  for (uint64_t capacity : {16u, 64u}) {
    for (int64_t bound : {0, 1, 3}) {
      for (int pinned : {1, 2, 3}) {
        SCOPED_TRACE("capacity " + std::to_string(capacity) + " bound " + std::to_string(bound) + " pinned " +
                     std::to_string(pinned));
        auto cache = MakeCache(capacity, bound, pinned);
        Reference ref;
        const uint64_t key_space = 3 * capacity;
        int64_t step = 0;
        int failures = 0;
        for (int round = 0; round < 600; ++round) {
          // Mostly the next step; sometimes the same step again, sometimes a jump.
          const uint64_t r = rng() % 10;
          step += r == 0 ? 0 : r == 1 ? 3 : 1;
          const size_t n = rng() % 8 == 0 ? rng() % (capacity + 3) : rng() % (capacity / 2 + 1);
          std::set<uint64_t> distinct;
          while (distinct.size() < std::min<uint64_t>(n, key_space)) {
            // Skewed: a few keys come back often.
            distinct.insert(rng() % 2 ? rng() % 8 : rng() % key_space);
          }
          std::vector<uint64_t> keys(distinct.begin(), distinct.end());
          std::shuffle(keys.begin(), keys.end(), rng);
          // The reference decides whether it fits: held keys of the pinned window plus this call's.
          std::set<uint64_t> needed(keys.begin(), keys.end());
          for (const auto& [key, e] : ref.by_key) {
            if (e.last_used > step - pinned) needed.insert(key);
          }
          const RowCacheStats before = cache->stats();
          Planned p = PlanStep(cache.get(), step, keys);
          if (needed.size() > capacity) {
            ASSERT_EQ(p.status.code(), StatusCode::kResourceExhausted) << "step " << step;
            ASSERT_NE(p.status.message().find(std::to_string(needed.size()) + " distinct keys"), std::string::npos)
                << p.status.message();
            ++failures;
            step -= r == 1 ? 3 : 0;  // sometimes retry an earlier step than the failed one
            const RowCacheStats after = cache->stats();
            ASSERT_EQ(after.lookups, before.lookups);
            ASSERT_EQ(after.evictions, before.evictions);
          } else {
            ASSERT_TRUE(p.status.ok()) << p.status.ToString() << " needed " << needed.size();
            CheckPlan(p, keys, step, bound, pinned, capacity, before, cache->stats(), &ref);
            if (HasFatalFailure()) return;
          }
          ASSERT_EQ(cache->size(), ref.by_key.size());
          if (rng() % 10 == 0 && !ref.by_slot.empty()) {  // a failed pull of some slots
            std::vector<int32_t> bad;
            for (const auto& [slot, key] : ref.by_slot) {
              if (rng() % 3 == 0) bad.push_back(slot);
            }
            bad.push_back(static_cast<int32_t>(capacity));  // out of range: ignored
            for (int32_t slot : bad) {
              auto it = ref.by_slot.find(slot);
              if (it != ref.by_slot.end()) ref.Remove(it->second);
            }
            cache->Invalidate(bad.data(), bad.size());
            ASSERT_EQ(cache->size(), ref.by_key.size());
          }
        }
        EXPECT_GT(failures, 0);
        EXPECT_GT(cache->stats().evictions, 0u);
      }
    }
  }
}

}  // namespace
}  // namespace osprey::worker
