// RowCache (the Redis store's hot rows and dirty rows): dirty rows are never evicted, a flush
// cleans a row only if it was not written again meanwhile, a failed flush lists the row again,
// and eviction keeps the recently used (LRU) or the often used (LFU) rows.
#include "server/redis/row_cache.h"

#include <gtest/gtest.h>

namespace osprey::server::redis_store {
namespace {

TEST(RowCacheTest, DirtyRowsAreNeverEvictedAndGenerationsGuardCleaning) {
  RowCache c(4, /*capacity=*/0, config::CachePolicy::kLru);
  RowCache::Row* a = c.Insert(1);
  c.MarkDirty(1, a);
  c.Insert(2);  // clean
  c.MaybeEvict();
  EXPECT_NE(c.Find(1), nullptr) << "a dirty row was evicted";
  EXPECT_EQ(c.Find(2), nullptr) << "capacity 0 keeps no clean row";
  auto taken = c.TakeDirty();
  ASSERT_EQ(taken.size(), 1u);
  c.MarkDirty(1, c.Find(1));  // written again while the flush was in flight
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

}  // namespace
}  // namespace osprey::server::redis_store
