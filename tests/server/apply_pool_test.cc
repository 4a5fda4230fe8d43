// ApplyPool (cluster.server_apply_threads): Run covers [0, n) once in contiguous ranges, spreads
// large work over its threads, keeps small work on the caller, and reports the first failed range.
#include "server/apply_pool.h"

#include <gtest/gtest.h>

#include <atomic>
#include <set>
#include <thread>
#include <vector>

#include "common/mutex.h"

namespace osprey::server {
namespace {

struct Seen {
  Mutex mu;
  std::vector<std::pair<size_t, size_t>> ranges GUARDED_BY(mu);
  std::set<std::thread::id> threads GUARDED_BY(mu);
};

ApplyPool::RangeFn Record(Seen* seen, std::vector<std::atomic<int>>* hits) {
  return [seen, hits](size_t begin, size_t end) {
    for (size_t i = begin; i < end; ++i) (*hits)[i].fetch_add(1);
    MutexLock l(&seen->mu);
    seen->ranges.emplace_back(begin, end);
    seen->threads.insert(std::this_thread::get_id());
    return Status::OK();
  };
}

TEST(ApplyPoolTest, LargeWorkIsSplitOverEveryThreadOnceEach) {
  ApplyPool pool(4);
  EXPECT_EQ(pool.threads(), 4);
  for (int round = 0; round < 20; ++round) {  // the pool is reused, Run after Run
    const size_t n = 1000 + round;
    std::vector<std::atomic<int>> hits(n);
    Seen seen;
    ASSERT_TRUE(pool.Run(n, 100, Record(&seen, &hits)).ok());
    for (size_t i = 0; i < n; ++i) ASSERT_EQ(hits[i].load(), 1) << "item " << i;
    MutexLock l(&seen.mu);
    EXPECT_EQ(seen.ranges.size(), 4u);
    EXPECT_EQ(seen.threads.size(), 4u);
    EXPECT_EQ(seen.threads.count(std::this_thread::get_id()), 1u);  // the caller took one
  }
}

TEST(ApplyPoolTest, SmallWorkStaysOnTheCallingThread) {
  ApplyPool pool(3);
  EXPECT_EQ(pool.Ranges(250, 100), 2u);
  EXPECT_EQ(pool.Ranges(99, 100), 1u);
  EXPECT_EQ(pool.Ranges(0, 100), 1u);
  EXPECT_EQ(pool.Ranges(1 << 20, 0), 3u);  // grain 0 reads as 1
  std::vector<std::atomic<int>> hits(99);
  Seen seen;
  ASSERT_TRUE(pool.Run(99, 100, Record(&seen, &hits)).ok());
  MutexLock l(&seen.mu);
  ASSERT_EQ(seen.ranges.size(), 1u);
  EXPECT_EQ(seen.ranges[0], std::make_pair(size_t{0}, size_t{99}));
  EXPECT_EQ(*seen.threads.begin(), std::this_thread::get_id());
  EXPECT_TRUE(pool.Run(0, 1, [](size_t, size_t) { return Internal("called for nothing"); }).ok());
}

TEST(ApplyPoolTest, OneThreadRunsEverythingInline) {
  ApplyPool pool(1);
  std::vector<std::atomic<int>> hits(5000);
  Seen seen;
  ASSERT_TRUE(pool.Run(5000, 1, Record(&seen, &hits)).ok());
  MutexLock l(&seen.mu);
  EXPECT_EQ(seen.ranges.size(), 1u);
}

TEST(ApplyPoolTest, FirstFailedRangeInRangeOrderIsReturnedAfterAllFinish) {
  ApplyPool pool(3);
  std::atomic<int> finished{0};
  Status s = pool.Run(300, 10, [&](size_t begin, size_t) {
    finished.fetch_add(1);
    if (begin == 0) return Status::OK();
    return Internal("range at " + std::to_string(begin) + " failed");
  });
  EXPECT_EQ(finished.load(), 3);
  EXPECT_EQ(s.code(), StatusCode::kInternal);
  EXPECT_EQ(s.message(), "range at 100 failed");
  // A failure on the caller's own range comes first.
  s = pool.Run(300, 10, [](size_t begin, size_t) {
    return Internal("range at " + std::to_string(begin));
  });
  EXPECT_EQ(s.message(), "range at 0");
}

}  // namespace
}  // namespace osprey::server
