// RowCache (the Redis store's hot rows and dirty rows): dirty rows are never evicted, a flush
// cleans a row only if it was not written again meanwhile, a failed flush lists the row again,
// and eviction keeps the recently used (LRU) or the often used (LFU) rows.
#include "server/redis/row_cache.h"

#include <gtest/gtest.h>

#include <map>
#include <random>
#include <vector>

namespace osprey::server::redis_store {
namespace {

TEST(RowCacheTest, DirtyRowsAreNeverEvictedAndGenerationsGuardCleaning) {
  RowCache c(4, /*capacity=*/0, config::CachePolicy::kLru);
  RowCache::Row* a = c.Insert(1);
  c.MarkDirty(a);
  c.Insert(2);  // clean
  c.MaybeEvict();
  EXPECT_NE(c.Find(1), nullptr) << "a dirty row was evicted";
  EXPECT_EQ(c.Find(2), nullptr) << "capacity 0 keeps no clean row";
  auto taken = c.TakeDirty();
  ASSERT_EQ(taken.size(), 1u);
  c.MarkDirty(c.Find(1));  // written again while the flush was in flight
  c.MarkClean(1, taken[0].second);
  EXPECT_EQ(c.dirty(), 1u) << "the newer write must stay dirty";
  auto again = c.TakeDirty();
  ASSERT_EQ(again.size(), 1u) << "the row re-dirtied during the flush is listed again";
  c.Relist(1);  // that flush failed
  auto third = c.TakeDirty();
  ASSERT_EQ(third.size(), 1u);
  c.MarkClean(1, third[0].second);
  EXPECT_EQ(c.dirty(), 0u);
  c.MaybeEvict();
  EXPECT_EQ(c.size(), 0u);
}

TEST(RowCacheTest, LruKeepsRecentLfuKeepsFrequent) {
  for (auto policy : {config::CachePolicy::kLru, config::CachePolicy::kLfu}) {
    RowCache c(1, /*capacity=*/100, policy);
    for (uint64_t k = 0; k < 100; ++k) c.Insert(k);
    for (int i = 0; i < 10; ++i) c.Find(0);  // key 0: often, but long ago
    for (uint64_t k = 1000; k < 1200; ++k) c.Insert(k);  // 300 rows: over capacity + slack
    c.MaybeEvict();
    EXPECT_EQ(c.size(), 100u);
    if (policy == config::CachePolicy::kLru) {
      EXPECT_EQ(c.Peek(0), nullptr) << "LRU keeps the 100 most recent";
      EXPECT_NE(c.Peek(1199), nullptr);
    } else {
      EXPECT_NE(c.Peek(0), nullptr) << "LFU keeps the most used";
    }
  }
}

// The open-addressing index under churn: random inserts, erases and evictions (ids reused, the
// index grown, runs shifted back on deletion) against a std::map holding what each row must hold.
TEST(RowCacheTest, IndexAgreesWithAMapUnderChurn) {
  RowCache c(2, /*capacity=*/300, config::CachePolicy::kLru);
  std::map<uint64_t, float> want;  // key -> record[0]; every cached row, dirty or clean
  std::mt19937_64 rng(3);
  // Few distinct keys with the same low bits: long probe runs that wrap and shift on delete.
  auto key = [&] { return (rng() % 2000) << 20; };
  for (int step = 0; step < 20000; ++step) {
    const uint64_t k = key();
    const int op = static_cast<int>(rng() % 10);
    if (op < 6) {
      RowCache::Row* r = c.Find(k);
      if (r == nullptr) {
        r = c.Insert(k);
        for (uint64_t h : r->history) ASSERT_EQ(h, 0u) << "a reused row kept its history";
      }
      r->record[0] = static_cast<float>(step);
      r->record[1] = static_cast<float>(k);
      if (op < 2) c.MarkDirty(r);
      want[k] = static_cast<float>(step);
    } else if (op < 8) {
      const size_t erased = c.Erase(&k, 1);
      EXPECT_EQ(erased, want.erase(k));
    } else if (op == 8) {
      for (const auto& [dk, gen] : c.TakeDirty()) c.MarkClean(dk, gen);
    } else {
      c.MaybeEvict();
      for (auto it = want.begin(); it != want.end();) {
        it = c.Peek(it->first) == nullptr ? want.erase(it) : std::next(it);
      }
    }
    ASSERT_EQ(c.size(), want.size()) << "at step " << step;
  }
  for (const auto& [k, v] : want) {
    RowCache::Row* r = c.Peek(k);
    ASSERT_NE(r, nullptr) << k;
    EXPECT_EQ(r->record[0], v) << k;
    EXPECT_EQ(r->record[1], static_cast<float>(k)) << "row of " << k << " holds another key's data";
  }
  size_t seen = 0;
  c.ForEach([&](uint64_t k, const RowCache::Row&) { seen += want.count(k); });
  EXPECT_EQ(seen, want.size());
}

}  // namespace
}  // namespace osprey::server::redis_store
