// AppliedClocks (server/applied_clocks.h): the highest clock taken per (table, worker rank) and
// the OP_APPLIED_CLOCKS reply layout.
#include "server/applied_clocks.h"

#include <gtest/gtest.h>

#include <cstring>

namespace osprey::server {
namespace {

std::vector<int64_t> Words(const Buffer& b) {
  std::vector<int64_t> w(b.size() / sizeof(int64_t));
  std::memcpy(w.data(), b.data(), w.size() * sizeof(int64_t));
  return w;
}

TEST(AppliedClocksTest, KeepsTheHighestClockPerTableAndRank) {
  AppliedClocks a;
  EXPECT_EQ(a.Of(0, 1), AppliedClocks::kNone);
  a.Record(0, 1, 11, 4);
  a.Record(0, 1, 11, 2);  // a re-sent older push never lowers the mark
  a.Record(1, 1, 11, 3);
  a.Record(0, 2, 22, 9);
  EXPECT_EQ(a.Of(0, 1), 4);
  EXPECT_EQ(a.Of(1, 1), 3);
  EXPECT_EQ(a.Of(0, 2), 9);
  EXPECT_EQ(a.Of(1, 2), AppliedClocks::kNone);
}

TEST(AppliedClocksTest, EncodeIsTheFlagThenOneClockPerTable) {
  AppliedClocks a;
  a.Record(1, 0, 33, 7);
  EXPECT_EQ(Words(a.Encode(0, 3, true)), (std::vector<int64_t>{1, -1, 7, -1}));
  EXPECT_EQ(Words(a.Encode(5, 2, false)), (std::vector<int64_t>{0, -1, -1}));
}

TEST(AppliedClocksTest, AskingBarsTheIncarnationsThatPushedBefore) {
  AppliedClocks a;
  a.Record(0, 1, 11, 4);  // the killed process
  a.Record(0, 2, 22, 4);  // another rank
  a.Record(0, 1, 0, 4);   // a sender without an incarnation
  EXPECT_FALSE(a.Barred(1, 11));
  a.Fence(1, 12);  // its restart asks
  EXPECT_TRUE(a.Barred(1, 11));
  EXPECT_FALSE(a.Barred(1, 12)) << "the asker";
  EXPECT_FALSE(a.Barred(1, 13)) << "first seen after the fence (the restart's next client)";
  EXPECT_FALSE(a.Barred(2, 22)) << "another rank";
  EXPECT_FALSE(a.Barred(1, 0)) << "no incarnation: never barred";
  a.Record(0, 1, 12, 5);
  a.Fence(1, 14);  // a second restart bars the first one too
  EXPECT_TRUE(a.Barred(1, 11));
  EXPECT_TRUE(a.Barred(1, 12));
}

}  // namespace
}  // namespace osprey::server
