#include "worker/cache/sharded_row_cache.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "tests/cache/row_cache_reference.h"
#include "worker/data/random.h"

namespace osprey::worker {
namespace {

using cache_testing::CheckPlan;
using cache_testing::Planned;
using cache_testing::PlanStep;
using cache_testing::Reference;

constexpr size_t kAlwaysThreads = 0;        // min_parallel_keys: every call runs on the pool
constexpr size_t kNeverThreads = SIZE_MAX;  // every call runs on the calling thread

std::unique_ptr<ShardedRowCache> MakeSharded(uint64_t capacity, int64_t bound, int pinned, int shards,
                                             size_t min_parallel_keys = kAlwaysThreads) {
  auto made = ShardedRowCache::Make({capacity, bound, pinned}, shards, min_parallel_keys);
  EXPECT_TRUE(made.ok()) << made.status().ToString();
  return made.ok() ? std::move(made).value() : nullptr;
}

void ExpectSameStats(const RowCacheStats& a, const RowCacheStats& b) {
  EXPECT_EQ(a.lookups, b.lookups);
  EXPECT_EQ(a.hits, b.hits);
  EXPECT_EQ(a.misses_absent, b.misses_absent);
  EXPECT_EQ(a.misses_stale, b.misses_stale);
  EXPECT_EQ(a.evictions, b.evictions);
}

void ExpectSamePlan(const Planned& a, const Planned& b) {
  EXPECT_EQ(a.status.code(), b.status.code());
  EXPECT_EQ(a.status.ok() ? "" : a.status.message(), b.status.ok() ? "" : b.status.message());
  if (!a.status.ok()) return;  // slots and misses are unspecified after an error
  EXPECT_EQ(a.slots, b.slots);
  EXPECT_EQ(a.miss_keys, b.miss_keys);
  EXPECT_EQ(a.miss_slots, b.miss_slots);
}

RowCacheStats SumOfShards(const ShardedRowCache& cache) {
  RowCacheStats sum;
  for (int j = 0; j < cache.num_shards(); ++j) sum += cache.shard_stats(j);
  return sum;
}

// Distinct keys of shard j, in increasing order from `from`.
std::vector<uint64_t> KeysOfShard(const ShardedRowCache& cache, int j, size_t count, uint64_t from = 1) {
  std::vector<uint64_t> keys;
  for (uint64_t k = from; keys.size() < count; ++k) {
    if (cache.ShardOf(k) == j) keys.push_back(k);
  }
  return keys;
}

std::vector<uint64_t> Concat(std::initializer_list<std::vector<uint64_t>> parts) {
  std::vector<uint64_t> all;
  for (const auto& p : parts) all.insert(all.end(), p.begin(), p.end());
  return all;
}

TEST(ShardedRowCacheTest, MakeClampsShardsAndSplitsCapacityEvenly) {
  struct Case {
    uint64_t capacity;
    int shards;
    int expected;
  };
  const Case cases[] = {{100, 4, 4}, {101, 4, 4}, {7, 3, 3},     {3, 8, 3},           {1, 64, 1},
                        {1000, 0, 1}, {1000, -5, 1}, {1000, 100, 64}, {(1u << 20) + 5, 8, 8}};
  for (const Case& c : cases) {
    SCOPED_TRACE("capacity " + std::to_string(c.capacity) + " shards " + std::to_string(c.shards));
    auto cache = MakeSharded(c.capacity, 0, 2, c.shards);
    ASSERT_NE(cache, nullptr);
    ASSERT_EQ(cache->num_shards(), c.expected);
    EXPECT_EQ(cache->capacity(), c.capacity);
    EXPECT_EQ(cache->shard_base(0), 0u);
    uint64_t sum = 0, smallest = UINT64_MAX, largest = 0;
    for (int j = 0; j < cache->num_shards(); ++j) {
      EXPECT_EQ(cache->shard_base(j), sum) << "shard " << j << " does not follow the previous one";
      sum += cache->shard_capacity(j);
      smallest = std::min(smallest, cache->shard_capacity(j));
      largest = std::max(largest, cache->shard_capacity(j));
    }
    EXPECT_EQ(sum, c.capacity);
    EXPECT_LE(largest - smallest, 1u);
  }
  const std::pair<RowCacheOptions, const char*> bad[] = {
      {{0, 0, 2}, "capacity_rows"},
      {{uint64_t{1} << 31, 0, 2}, "capacity_rows"},
      {{10, -1, 2}, "staleness_bound"},
      {{10, 0, 0}, "pinned_steps"},
  };
  for (const auto& [options, field] : bad) {
    auto made = ShardedRowCache::Make(options, 4);
    ASSERT_FALSE(made.ok());
    EXPECT_EQ(made.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(made.status().message().find(field), std::string::npos) << made.status().message();
  }
}

TEST(ShardedRowCacheTest, OneShardIsExactlyRowCache) {
  std::mt19937_64 rng(7);
  for (int64_t bound : {0, 2}) {
    auto single = RowCache::Make({64, bound, 2});
    ASSERT_TRUE(single.ok());
    auto sharded = MakeSharded(64, bound, 2, 1);
    ASSERT_EQ(sharded->num_shards(), 1);
    int64_t step = 0;
    int failures = 0;
    for (int round = 0; round < 800; ++round) {
      step += rng() % 5 == 0 ? 0 : 1;
      const size_t n = rng() % 8 == 0 ? rng() % 70 : rng() % 33;
      std::vector<uint64_t> keys;
      for (size_t i = 0; i < n; ++i) keys.push_back(rng() % 2 ? rng() % 16 : rng() % 300);  // repeats too
      const Planned a = PlanStep(single->get(), step, keys);
      const Planned b = PlanStep(sharded.get(), step, keys);
      ExpectSamePlan(a, b);
      failures += !a.status.ok();
      ExpectSameStats((*single)->stats(), sharded->stats());
      ASSERT_EQ((*single)->size(), sharded->size());
      if (rng() % 10 == 0) {
        std::vector<int32_t> bad = {static_cast<int32_t>(rng() % 70), static_cast<int32_t>(rng() % 64), -1};
        (*single)->Invalidate(bad.data(), bad.size());
        sharded->Invalidate(bad.data(), bad.size());
      }
      if (HasFailure()) return;
    }
    EXPECT_GT(failures, 0);
    EXPECT_GT(sharded->stats().evictions, 0u);
  }
}

TEST(ShardedRowCacheTest, ShardsSpreadKeysEvenlyAndIndependentlyOfTheShardIndex) {
  auto cache = MakeSharded(1 << 20, 0, 2, 8);
  std::vector<uint64_t> per_shard(8);
  std::vector<uint64_t> top_bits_of_shard0(16);  // RowCache's index uses Mix64's top bits
  uint64_t n = 0;
  for (uint64_t feature = 0; feature < 26; ++feature) {
    for (uint64_t id = 0; id < 4000; ++id, ++n) {
      const uint64_t key = (feature << 48) ^ id;  // structured keys, as the data set makes them
      const int j = cache->ShardOf(key);
      ASSERT_GE(j, 0);
      ASSERT_LT(j, 8);
      ++per_shard[j];
      if (j == 0) ++top_bits_of_shard0[data::Mix64(key) >> 60];
    }
  }
  for (int j = 0; j < 8; ++j) EXPECT_NEAR(per_shard[j], n / 8.0, n / 8.0 * 0.05) << "shard " << j;
  for (uint64_t count : top_bits_of_shard0) EXPECT_NEAR(count, per_shard[0] / 16.0, per_shard[0] / 16.0 * 0.15);
}

// The model of row_cache_test.cc with a per-shard capacity rule, plus a twin that receives only the
// calls that succeed: a failed call must leave the cache exactly as the twin is.
void RunRandomized(int shards, uint64_t capacity, int64_t bound, int pinned, int rounds, std::mt19937_64* rng) {
  auto cache = MakeSharded(capacity, bound, pinned, shards);
  auto twin = MakeSharded(capacity, bound, pinned, shards, kNeverThreads);
  ASSERT_EQ(cache->num_shards(), shards);
  Reference ref;
  const uint64_t key_space = 3 * capacity;
  int64_t step = 0;
  int failures = 0;
  for (int round = 0; round < rounds; ++round) {
    const uint64_t r = (*rng)() % 10;
    step += r == 0 ? 0 : r == 1 ? 3 : 1;
    const size_t n = (*rng)() % 8 == 0 ? (*rng)() % (capacity + 3) : (*rng)() % (capacity / 2 + 1);
    std::set<uint64_t> distinct;
    while (distinct.size() < std::min<uint64_t>(n, key_space)) {
      distinct.insert((*rng)() % 2 ? (*rng)() % 8 : (*rng)() % key_space);
    }
    std::vector<uint64_t> keys(distinct.begin(), distinct.end());
    std::shuffle(keys.begin(), keys.end(), *rng);
    // Per shard: the held keys of the pinned window plus this call's keys of the shard.
    std::vector<std::set<uint64_t>> needed(shards);
    for (uint64_t key : keys) needed[cache->ShardOf(key)].insert(key);
    for (const auto& [key, e] : ref.by_key) {
      if (e.last_used > step - pinned) needed[cache->ShardOf(key)].insert(key);
    }
    int first_over = -1;
    for (int j = shards - 1; j >= 0; --j) {
      if (needed[j].size() > cache->shard_capacity(j)) first_over = j;
    }
    const RowCacheStats before = cache->stats();
    const uint64_t size_before = cache->size();
    Planned p = PlanStep(cache.get(), step, keys);
    if (first_over >= 0) {
      ASSERT_EQ(p.status.code(), StatusCode::kResourceExhausted) << "step " << step;
      const std::string expected = "row cache shard " + std::to_string(first_over) + " of " + std::to_string(shards) +
                                   ": capacity " + std::to_string(cache->shard_capacity(first_over)) +
                                   " rows cannot hold the " + std::to_string(needed[first_over].size()) + " distinct";
      ASSERT_EQ(p.status.message().rfind(expected, 0), 0u) << p.status.message() << " vs " << expected;
      ++failures;
      step -= r == 1 ? 3 : 0;
      ExpectSameStats(cache->stats(), before);
      ASSERT_EQ(cache->size(), size_before);
    } else {
      ASSERT_TRUE(p.status.ok()) << p.status.ToString();
      CheckPlan(p, keys, step, bound, pinned, capacity, before, cache->stats(), &ref);
      for (size_t i = 0; i < keys.size(); ++i) {
        const int j = cache->ShardOf(keys[i]);
        ASSERT_GE(static_cast<uint64_t>(p.slots[i]), cache->shard_base(j));
        ASSERT_LT(static_cast<uint64_t>(p.slots[i]), cache->shard_base(j) + cache->shard_capacity(j));
      }
      for (size_t k = 1; k < p.miss_keys.size(); ++k) {
        ASSERT_LE(cache->ShardOf(p.miss_keys[k - 1]), cache->ShardOf(p.miss_keys[k])) << "misses not in shard order";
      }
      ExpectSamePlan(p, PlanStep(twin.get(), step, keys));
      ExpectSameStats(cache->stats(), twin->stats());
      if (::testing::Test::HasFailure()) return;
    }
    ExpectSameStats(cache->stats(), SumOfShards(*cache));
    ASSERT_EQ(cache->size(), ref.by_key.size());
    if ((*rng)() % 10 == 0 && !ref.by_slot.empty()) {
      std::vector<int32_t> bad;
      for (const auto& [slot, key] : ref.by_slot) {
        if ((*rng)() % 3 == 0) bad.push_back(slot);
      }
      bad.push_back(static_cast<int32_t>(capacity));
      for (int32_t slot : bad) {
        auto it = ref.by_slot.find(slot);
        if (it != ref.by_slot.end()) ref.Remove(it->second);
      }
      cache->Invalidate(bad.data(), bad.size());
      twin->Invalidate(bad.data(), bad.size());
      ASSERT_EQ(cache->size(), ref.by_key.size());
    }
  }
  const RowCacheStats s = cache->stats();
  EXPECT_EQ(s.lookups, s.hits + s.misses_absent + s.misses_stale);
  EXPECT_GT(failures, 0);
  EXPECT_GT(s.evictions, 0u);
}

TEST(ShardedRowCacheTest, RandomizedAgreesWithAReferenceModel) {
  std::mt19937_64 rng(11);
  struct Config {
    int shards;
    uint64_t capacity;
  };
  for (const Config c : {Config{4, 32}, Config{4, 128}, Config{3, 203}}) {
    for (int64_t bound : {0, 1, 3}) {
      for (int pinned : {1, 2, 3}) {
        SCOPED_TRACE("shards " + std::to_string(c.shards) + " capacity " + std::to_string(c.capacity) + " bound " +
                     std::to_string(bound) + " pinned " + std::to_string(pinned));
        RunRandomized(c.shards, c.capacity, bound, pinned, 400, &rng);
        if (HasFatalFailure()) return;
      }
    }
  }
}

TEST(ShardedRowCacheTest, CapacityErrorChangesNoShard) {
  auto cache = MakeSharded(16, 1 << 30, 2, 4);  // 4 slots per shard
  ASSERT_EQ(cache->shard_capacity(0), 4u);
  std::vector<std::vector<uint64_t>> of(4);
  for (int j = 0; j < 4; ++j) of[j] = KeysOfShard(*cache, j, 6);
  const std::vector<uint64_t> held = Concat({{of[0].begin(), of[0].begin() + 4}, {of[1][0], of[1][1]}, {of[2][0]}});
  Planned s5 = PlanStep(cache.get(), 5, held);
  ASSERT_TRUE(s5.status.ok()) << s5.status.ToString();

  // Shard 0 is full and pinned; shards 1-3 would fit their new keys, and must not take them.
  std::vector<RowCacheStats> before(4);
  for (int j = 0; j < 4; ++j) before[j] = cache->shard_stats(j);
  const Planned over0 = PlanStep(cache.get(), 6, {of[1][2], of[0][4], of[2][3], of[3][0]});
  EXPECT_EQ(over0.status.code(), StatusCode::kResourceExhausted);
  EXPECT_EQ(over0.status.message(), "row cache shard 0 of 4: capacity 4 rows cannot hold the 5 distinct keys of the "
                                    "last 2 steps");
  // Now the last shard overflows (5 new keys) after shards 0-2 prepared successfully.
  const Planned over3 = PlanStep(cache.get(), 6, Concat({{of[1][3], of[2][4]}, of[3]}));
  EXPECT_EQ(over3.status.code(), StatusCode::kResourceExhausted);
  EXPECT_EQ(over3.status.message().rfind("row cache shard 3 of 4: capacity 4 rows cannot hold the 6", 0), 0u)
      << over3.status.message();
  for (int j = 0; j < 4; ++j) ExpectSameStats(cache->shard_stats(j), before[j]);
  EXPECT_EQ(cache->size(), held.size());

  // Step 5's keys are all still held, in the same slots, and pinned: nothing of the failed calls
  // was committed.
  const Planned again = PlanStep(cache.get(), 6, held);
  ASSERT_TRUE(again.status.ok());
  EXPECT_EQ(again.slots, s5.slots);
  EXPECT_TRUE(again.miss_keys.empty());
  EXPECT_EQ(cache->size(), held.size());
  EXPECT_EQ(cache->stats().evictions, 0u);
  EXPECT_EQ(PlanStep(cache.get(), 7, {of[0][4]}).status.code(), StatusCode::kResourceExhausted)
      << "step 6 must still pin shard 0";
}

TEST(ShardedRowCacheTest, MissesComeShardByShardStaleBeforeAbsent) {
  auto cache = MakeSharded(400, 0, 2, 4);
  std::mt19937_64 rng(3);
  std::vector<uint64_t> first, second;
  for (uint64_t k = 1; k <= 120; ++k) (k % 2 ? first : second).push_back(k * 7919);
  std::shuffle(first.begin(), first.end(), rng);
  ASSERT_TRUE(PlanStep(cache.get(), 0, first).status.ok());
  std::vector<uint64_t> keys = Concat({first, second});
  std::shuffle(keys.begin(), keys.end(), rng);
  const Planned p = PlanStep(cache.get(), 1, keys);
  ASSERT_TRUE(p.status.ok());
  const std::set<uint64_t> was_held(first.begin(), first.end());
  std::vector<uint64_t> expected;  // bound 0: every held key is stale
  for (int j = 0; j < 4; ++j) {
    for (uint64_t k : keys) {
      if (cache->ShardOf(k) == j && was_held.count(k)) expected.push_back(k);
    }
    for (uint64_t k : keys) {
      if (cache->ShardOf(k) == j && !was_held.count(k)) expected.push_back(k);
    }
  }
  EXPECT_EQ(p.miss_keys, expected);
  for (size_t k = 0; k < p.miss_keys.size(); ++k) {
    EXPECT_EQ(p.miss_slots[k], p.SlotOf(keys, p.miss_keys[k]));
  }
}

TEST(ShardedRowCacheTest, InvalidateRoutesGlobalSlotsToTheirShards) {
  auto cache = MakeSharded(40, 1 << 30, 2, 4);
  std::vector<uint64_t> keys;
  for (uint64_t k = 100; k < 120; ++k) keys.push_back(k);
  const Planned p = PlanStep(cache.get(), 0, keys);
  ASSERT_TRUE(p.status.ok());
  std::vector<int32_t> bad = {-1, 40, 1000};
  std::set<uint64_t> forgotten;
  for (size_t i = 0; i < keys.size(); i += 2) {
    bad.push_back(p.slots[i]);
    bad.push_back(p.slots[i]);  // repeats are ignored
    forgotten.insert(keys[i]);
  }
  cache->Invalidate(bad.data(), bad.size());
  EXPECT_EQ(cache->size(), keys.size() - forgotten.size());
  const RowCacheStats before = cache->stats();
  const Planned q = PlanStep(cache.get(), 1, keys);
  ASSERT_TRUE(q.status.ok());
  EXPECT_EQ(std::set<uint64_t>(q.miss_keys.begin(), q.miss_keys.end()), forgotten);
  EXPECT_EQ(cache->stats().misses_absent - before.misses_absent, forgotten.size());
  EXPECT_EQ(cache->stats().evictions, 0u);
  for (size_t i = 1; i < keys.size(); i += 2) EXPECT_EQ(q.slots[i], p.slots[i]) << "a held key moved";
}

TEST(ShardedRowCacheTest, RejectsBadArgumentsLikeRowCache) {
  auto single = RowCache::Make({8, 0, 2});
  ASSERT_TRUE(single.ok());
  auto cache = MakeSharded(8, 0, 2, 4);
  ASSERT_TRUE(PlanStep(single->get(), 3, {1}).status.ok());
  ASSERT_TRUE(PlanStep(cache.get(), 3, {1}).status.ok());
  for (int64_t step : {2, -1}) {
    const Planned a = PlanStep(single->get(), step, {1});
    const Planned b = PlanStep(cache.get(), step, {1});
    EXPECT_EQ(b.status.code(), StatusCode::kInvalidArgument);
    EXPECT_EQ(a.status.message(), b.status.message());
  }
  std::vector<uint64_t> miss_keys;
  std::vector<int32_t> miss_slots;
  EXPECT_EQ(cache->Plan(4, nullptr, 1, nullptr, &miss_keys, &miss_slots).code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(cache->Plan(4, nullptr, 0, nullptr, &miss_keys, &miss_slots).ok()) << "an empty step is fine";
  EXPECT_TRUE(miss_keys.empty());
  EXPECT_EQ(cache->stats().lookups, 1u);
}

// Large calls, so that every input part and shard has many keys: the pool must give the same plans
// as the calling thread alone.
TEST(ShardedRowCacheTest, ThreadsAndCallingThreadAloneAgree) {
  std::mt19937_64 rng(5);
  for (int shards : {2, 5, 8}) {
    SCOPED_TRACE("shards " + std::to_string(shards));
    auto pooled = MakeSharded(24000, 2, 2, shards, kAlwaysThreads);
    auto alone = MakeSharded(24000, 2, 2, shards, kNeverThreads);
    std::vector<uint32_t> seen(200000, UINT32_MAX);
    for (uint32_t step = 0; step < 25; ++step) {
      std::vector<uint64_t> keys;
      while (keys.size() < 9000) {
        const uint64_t k = rng() % 4 ? rng() % 20000 : rng() % 200000;  // a hot set, a long tail
        if (seen[k] != step) seen[k] = step, keys.push_back(k);
      }
      const Planned a = PlanStep(pooled.get(), step, keys);
      ASSERT_TRUE(a.status.ok()) << a.status.ToString();
      ExpectSamePlan(a, PlanStep(alone.get(), step, keys));
      ExpectSameStats(pooled->stats(), alone->stats());
      ASSERT_EQ(std::set<int32_t>(a.slots.begin(), a.slots.end()).size(), keys.size()) << "slots not distinct";
      if (HasFailure()) return;
    }
    EXPECT_GT(pooled->stats().evictions, 0u);
    EXPECT_GT(pooled->stats().hits, 0u);
  }
}

TEST(ShardedRowCacheTest, StartsAndJoinsItsThreads) {
  for (int i = 0; i < 40; ++i) {
    auto cache = MakeSharded(1000, 0, 2, 1 + i % 9);
    if (i % 2 == 0) {
      EXPECT_TRUE(PlanStep(cache.get(), 0, {1, 2, 3}).status.ok());
    }
  }  // each destructor must return: its workers were joined
}

}  // namespace
}  // namespace osprey::worker
