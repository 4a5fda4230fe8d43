// ScaleProtocol (coordinator/scale_protocol.h): the phases of a scale step, driven with an
// injected clock.
#include "coordinator/scale_protocol.h"

#include <gtest/gtest.h>

namespace osprey::coordinator {
namespace {

using Phase = ScaleProtocol::Phase;
using Ms = std::chrono::milliseconds;

class ScaleProtocolTest : public ::testing::Test {
 protected:
  ScaleProtocol p;
  ScaleProtocol::Clock::time_point t0 = ScaleProtocol::Clock::time_point() + std::chrono::hours(1);
};

TEST_F(ScaleProtocolTest, GrowWaitsForJoinersThenPausesTransfersAndCommits) {
  ASSERT_TRUE(p.Begin(2, 3, 1000, t0).ok());
  EXPECT_EQ(p.phase(), Phase::kJoining);
  const std::map<int, int64_t> live{{0, 6}, {1, 6}};  // both in step 6
  EXPECT_TRUE(p.Advance(live, 0, t0 + Ms(10)).failure.empty());
  EXPECT_EQ(p.phase(), Phase::kJoining);
  EXPECT_FALSE(p.OnPause(0, 5, t0).ok()) << "no pause before the joiners are there";
  p.Advance(live, 1, t0 + Ms(20));
  EXPECT_EQ(p.phase(), Phase::kPausing);
  ASSERT_TRUE(p.OnPause(0, 7, t0 + Ms(30)).ok());
  ScaleProtocol::Events ev = p.Advance(live, 1, t0 + Ms(30));
  EXPECT_FALSE(ev.transfer_begins) << "worker 1 has not paused";
  EXPECT_TRUE(ev.run_to.empty()) << "worker 1 is behind, not ahead";
  ASSERT_TRUE(p.OnPause(1, 7, t0 + Ms(40)).ok());
  ev = p.Advance(live, 1, t0 + Ms(40));
  EXPECT_TRUE(ev.transfer_begins);
  EXPECT_TRUE(ev.run_to.empty());
  EXPECT_EQ(p.clock(), 7);
  EXPECT_EQ(p.phase(), Phase::kTransferring);
  EXPECT_FALSE(p.OnServerDone(2, 1, t0).ok()) << "the joining rank does not transfer";
  ASSERT_TRUE(p.OnServerDone(0, 100, t0 + Ms(50)).ok());
  EXPECT_FALSE(p.Advance(live, 1, t0 + Ms(50)).commit);
  ASSERT_TRUE(p.OnServerDone(1, 60, t0 + Ms(90)).ok());
  ASSERT_TRUE(p.OnServerDone(1, 60, t0 + Ms(90)).ok()) << "a repeated report counts once";
  ev = p.Advance(live, 1, t0 + Ms(90));
  EXPECT_TRUE(ev.commit);
  EXPECT_EQ(p.records_moved(), 160u);
  EXPECT_DOUBLE_EQ(p.pause_seconds(), 0.060);
  EXPECT_DOUBLE_EQ(p.transfer_seconds(), 0.050);
}

TEST_F(ScaleProtocolTest, WorkersBehindAreReleasedToTheLargestClock) {
  ASSERT_TRUE(p.Begin(3, 2, 1000, t0).ok());
  EXPECT_EQ(p.phase(), Phase::kPausing) << "a shrink needs no joiners";
  ASSERT_TRUE(p.OnPause(0, 4, t0).ok());
  ASSERT_TRUE(p.OnPause(1, 5, t0).ok());
  ASSERT_TRUE(p.OnPause(2, 3, t0).ok());
  const std::map<int, int64_t> live{{0, 4}, {1, 5}, {2, 3}};
  ScaleProtocol::Events ev = p.Advance(live, 0, t0);
  EXPECT_FALSE(ev.transfer_begins);
  EXPECT_EQ(ev.run_to, (std::vector<int>{0, 2}));
  EXPECT_EQ(p.clock(), 5);
  EXPECT_EQ(p.paused().size(), 1u);
  ASSERT_TRUE(p.OnPause(0, 5, t0).ok());
  EXPECT_FALSE(p.Advance(live, 0, t0).transfer_begins);
  ASSERT_TRUE(p.OnPause(2, 5, t0).ok());
  EXPECT_TRUE(p.Advance(live, 0, t0).transfer_begins);
}

TEST_F(ScaleProtocolTest, AWorkerBlockedAheadReleasesThePausedOne) {
  // bsp: worker 0 paused before step 10; worker 1 is in step 11 (its heartbeat says 11 steps
  // completed), blocked in a pull that needs worker 0's push of step 10.
  ASSERT_TRUE(p.Begin(2, 1, 1000, t0).ok());
  ASSERT_TRUE(p.OnPause(0, 10, t0).ok());
  ScaleProtocol::Events ev = p.Advance({{0, 10}, {1, 11}}, 0, t0);
  EXPECT_EQ(ev.run_to, (std::vector<int>{0})) << "worker 0 must go on to step 11";
  EXPECT_EQ(p.clock(), 11);
  ASSERT_TRUE(p.OnPause(0, 11, t0).ok());
  // Worker 1 finishes step 11 and pauses before 12: worker 0 goes one step further.
  ASSERT_TRUE(p.OnPause(1, 12, t0).ok());
  ev = p.Advance({{0, 11}, {1, 12}}, 0, t0);
  EXPECT_EQ(ev.run_to, (std::vector<int>{0}));
  EXPECT_EQ(p.clock(), 12);
  ASSERT_TRUE(p.OnPause(0, 12, t0).ok());
  ev = p.Advance({{0, 12}, {1, 12}}, 0, t0);
  EXPECT_TRUE(ev.transfer_begins);
  EXPECT_EQ(p.clock(), 12);
}

TEST_F(ScaleProtocolTest, AWorkerDrainingAtItsBoundaryDoesNotMoveTheTarget) {
  // Worker 1 has completed 7 steps and drains before step 7: the target stays at 7, so worker 0
  // (paused there) is not released again.
  ASSERT_TRUE(p.Begin(2, 1, 1000, t0).ok());
  ASSERT_TRUE(p.OnPause(0, 7, t0).ok());
  ScaleProtocol::Events ev = p.Advance({{0, 7}, {1, 7}}, 0, t0);
  EXPECT_TRUE(ev.run_to.empty());
  EXPECT_FALSE(ev.transfer_begins);
  ASSERT_TRUE(p.OnPause(1, 7, t0).ok());
  EXPECT_TRUE(p.Advance({{0, 7}, {1, 7}}, 0, t0).transfer_begins);
}

TEST_F(ScaleProtocolTest, DeadWorkersAreNotWaitedFor) {
  ASSERT_TRUE(p.Begin(2, 1, 1000, t0).ok());
  ASSERT_TRUE(p.OnPause(0, 9, t0).ok());
  EXPECT_FALSE(p.Advance({{0, 9}, {1, 8}}, 0, t0).transfer_begins);
  EXPECT_TRUE(p.Advance({{0, 9}}, 0, t0).transfer_begins) << "worker 1 died: only worker 0 counts";
}

TEST_F(ScaleProtocolTest, TimeoutAbandonsTheStepNamingWhoIsMissing) {
  ASSERT_TRUE(p.Begin(2, 4, 500, t0).ok());
  ScaleProtocol::Events ev = p.Advance({{0, 1}}, 1, t0 + Ms(499));
  EXPECT_TRUE(ev.failure.empty());
  ev = p.Advance({{0, 1}}, 1, t0 + Ms(500));
  EXPECT_NE(ev.failure.find("1 of 2 joining servers"), std::string::npos) << ev.failure;
  EXPECT_EQ(p.phase(), Phase::kIdle);

  ASSERT_TRUE(p.Begin(2, 1, 500, t0).ok());
  ASSERT_TRUE(p.OnPause(0, 3, t0).ok());
  ev = p.Advance({{0, 2}, {1, 2}}, 0, t0 + Ms(600));
  EXPECT_NE(ev.failure.find("worker 1"), std::string::npos) << ev.failure;
  EXPECT_EQ(p.paused().size(), 1u) << "the caller still sees whom to release";
}

TEST_F(ScaleProtocolTest, RefusesBadRequests) {
  EXPECT_EQ(p.Begin(2, 0, 1000, t0).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(p.Begin(2, 2, 1000, t0).code(), StatusCode::kInvalidArgument);
  ASSERT_TRUE(p.Begin(2, 3, 1000, t0).ok());
  EXPECT_EQ(p.Begin(3, 4, 1000, t0).code(), StatusCode::kFailedPrecondition);
  EXPECT_FALSE(p.OnServerDone(0, 1, t0).ok()) << "not transferring";
}

}  // namespace
}  // namespace osprey::coordinator
