// PushDedup (server/push_dedup.h): the window of applied pushes by (worker, incarnation, id).
#include "server/push_dedup.h"

#include <gtest/gtest.h>

namespace osprey::server {
namespace {

TEST(PushDedupTest, RecordedIdsAreSeenPerWorkerAndIncarnation) {
  PushDedup d(8);
  d.Record(0, 0, 11, 5);
  d.Record(0, 1, 22, 5);
  EXPECT_TRUE(d.Seen(0, 0, 11, 5));
  EXPECT_FALSE(d.Seen(0, 0, 11, 6));
  EXPECT_TRUE(d.Seen(0, 1, 22, 5));
  EXPECT_FALSE(d.Seen(0, 2, 11, 5)) << "another worker's id";
  EXPECT_FALSE(d.Seen(0, 0, 12, 5)) << "another incarnation of worker 0 (its ids start again)";
}

TEST(PushDedupTest, ZeroIncarnationIsNeverDeduplicated) {
  PushDedup d(8);
  d.Record(0, 0, 0, 5);
  EXPECT_FALSE(d.Seen(0, 0, 0, 5));
}

TEST(PushDedupTest, WindowEvictsOldestAndKeepsThemSeenBelowTheMark) {
  PushDedup d(4);
  for (uint64_t id = 1; id <= 10; ++id) d.Record(0, 3, 7, id);
  for (uint64_t id = 1; id <= 10; ++id) EXPECT_TRUE(d.Seen(0, 3, 7, id)) << id;
  EXPECT_FALSE(d.Seen(0, 3, 7, 11));
  uint64_t inc = 0;
  EXPECT_EQ(d.High(0, 3, &inc), 10u);
  EXPECT_EQ(inc, 7u);
}

TEST(PushDedupTest, GapsInsideTheWindowAreNotSeen) {
  PushDedup d(16);
  d.Record(0, 0, 1, 2);
  d.Record(0, 0, 1, 4);  // id 3 went to another server
  EXPECT_FALSE(d.Seen(0, 0, 1, 3));
  EXPECT_TRUE(d.Seen(0, 0, 1, 4));
}

TEST(PushDedupTest, NewIncarnationForgetsTheOldWindow) {
  PushDedup d(16);
  d.Record(0, 0, 1, 9);
  d.Record(0, 0, 2, 1);  // the worker restarted
  EXPECT_FALSE(d.Seen(0, 0, 1, 9));
  EXPECT_TRUE(d.Seen(0, 0, 2, 1));
  EXPECT_FALSE(d.Seen(0, 0, 2, 9));
}

TEST(PushDedupTest, RestoreMarksEverythingUpToTheMark) {
  PushDedup d(16);
  d.Restore(0, 4, 99, 120);
  EXPECT_TRUE(d.Seen(0, 4, 99, 1));
  EXPECT_TRUE(d.Seen(0, 4, 99, 120));
  EXPECT_FALSE(d.Seen(0, 4, 99, 121));
  EXPECT_FALSE(d.Seen(0, 4, 98, 120));
}

TEST(PushDedupTest, TablesHaveTheirOwnMarks) {
  PushDedup d(16);
  d.Restore(1, 4, 99, 120);  // table 1 applied up to id 120, table 0 nothing
  EXPECT_TRUE(d.Seen(1, 4, 99, 100));
  EXPECT_FALSE(d.Seen(0, 4, 99, 100)) << "table 0's push 100 may still have been in its window";
  d.Record(0, 4, 99, 7);
  EXPECT_TRUE(d.Seen(0, 4, 99, 7));
  EXPECT_FALSE(d.Seen(2, 4, 99, 7));
}

}  // namespace
}  // namespace osprey::server
