// PlanResume / DecodeServerClocks (worker/resume_plan.h): where a restarted worker resumes and
// which replayed pushes it keeps from each server, from the servers' applied clocks.
#include "worker/resume_plan.h"

#include <gtest/gtest.h>

namespace osprey::worker {
namespace {

ServerClocks Answer(std::vector<int64_t> applied, bool complete = true) {
  ServerClocks c;
  c.answered = true;
  c.complete = complete;
  c.applied = std::move(applied);
  return c;
}

TEST(ResumePlanTest, AKillBetweenTwoServersReplaysTheStepForTheServerThatLacksIt) {
  // Heartbeat said 10; the process ran on to step 12, whose dense push (table 1) reached server
  // 0 but not server 1.
  const ResumePlan p = PlanResume(10, 100, 2, {Answer({12, 12}), Answer({12, 11})});
  EXPECT_EQ(p.start, 12);
  EXPECT_EQ(p.floors, (std::vector<std::vector<int64_t>>{{12, 12}, {12, 11}}));
}

TEST(ResumePlanTest, EveryPushOfTheLastStepTakenResumesAfterIt) {
  const ResumePlan p = PlanResume(10, 100, 2, {Answer({13, 13}), Answer({13, 13})});
  EXPECT_EQ(p.start, 14);
}

TEST(ResumePlanTest, AServerThatDidNotAnswerCountsStepsBelowTheHeartbeatAsApplied) {
  const ResumePlan p = PlanResume(10, 100, 2, {Answer({12, 12}), ServerClocks{}});
  EXPECT_EQ(p.floors[1], (std::vector<int64_t>{9, 9}));
  EXPECT_EQ(p.start, 10) << "the old rule for that server";
}

TEST(ResumePlanTest, AReplacementKeepsWhatItRecordedAndFallsBackWhereItHasNothing) {
  const ResumePlan p = PlanResume(10, 100, 2, {Answer({-1, 11}, /*complete=*/false)});
  EXPECT_EQ(p.floors[0], (std::vector<int64_t>{9, 11}));
  EXPECT_EQ(p.start, 10);
}

TEST(ResumePlanTest, NothingRecordedOnACompleteServerKeepsEveryPushThere) {
  // The rank never pushed to table 0 of this server: nothing is suppressed there, and the replay
  // starts at heard - 1, the last step that may have been in flight.
  const ResumePlan p = PlanResume(10, 100, 2, {Answer({-1, 12})});
  EXPECT_EQ(p.floors[0], (std::vector<int64_t>{-1, 12}));
  EXPECT_EQ(p.start, 9);
}

TEST(ResumePlanTest, KilledBeforeItsFirstPushStartsAtZero) {
  const ResumePlan p = PlanResume(0, 100, 2, {Answer({-1, -1}), Answer({-1, -1})});
  EXPECT_EQ(p.start, 0);
  EXPECT_EQ(p.floors, (std::vector<std::vector<int64_t>>{{-1, -1}, {-1, -1}}));
}

TEST(ResumePlanTest, EveryStepTakenResumesAtTheEnd) {
  const ResumePlan p = PlanResume(99, 100, 1, {Answer({99})});
  EXPECT_EQ(p.start, 100);
}

TEST(ResumePlanTest, DecodeChecksTheSizeAndTheFlag) {
  auto c = DecodeServerClocks(2, 2, {0, 7, -1});
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_TRUE(c->answered);
  EXPECT_FALSE(c->complete);
  EXPECT_EQ(c->applied, (std::vector<int64_t>{7, -1}));
  auto short_reply = DecodeServerClocks(2, 2, {1, 7});
  ASSERT_FALSE(short_reply.ok());
  EXPECT_NE(short_reply.status().ToString().find("server 2: 2 words, expected 3"), std::string::npos)
      << short_reply.status().ToString();
  auto bad_flag = DecodeServerClocks(1, 1, {5, 7});
  ASSERT_FALSE(bad_flag.ok());
  EXPECT_NE(bad_flag.status().ToString().find("first word 5"), std::string::npos);
}

}  // namespace
}  // namespace osprey::worker
