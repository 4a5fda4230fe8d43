// StageBoard (worker/gpu/stage_board.h) with real threads: milestones reached in and out of
// order, the gradient-stage queues, failure propagation and stop. Every wait here waits on the
// board's conditions or joins a thread; nothing sleeps.
#include "worker/gpu/stage_board.h"

#include <gtest/gtest.h>

#include <atomic>
#include <thread>
#include <vector>

namespace osprey::worker::gpu {
namespace {

enum : int { kA = 0, kB = 1, kMilestones = 2 };

TEST(StageBoardTest, NegativeStepsHaveReachedEverything) {
  StageBoard board(kMilestones, 3);
  EXPECT_TRUE(board.Reached(kA, -1));
  EXPECT_TRUE(board.WaitFor(kB, -3).ok());
  EXPECT_FALSE(board.Reached(kA, 0));
}

TEST(StageBoardTest, AResumedBoardTreatsTheStepsBeforeItsFirstAsReached) {
  StageBoard board(kMilestones, 3, /*first_step=*/50);
  EXPECT_TRUE(board.Reached(kA, 49));
  EXPECT_TRUE(board.WaitFor(kB, 47).ok());
  EXPECT_FALSE(board.Reached(kA, 50));
  // The first window of steps from 50 may reach a milestone in any order, as from 0.
  board.Reach(kA, 52);
  board.Reach(kA, 50);
  board.Reach(kA, 51);
  EXPECT_TRUE(board.Reached(kA, 52));
  board.Reach(kA, 53);  // 50 reached it, so 53 (a window on) may
  EXPECT_TRUE(board.Reached(kA, 53));
  EXPECT_FALSE(board.Reached(kB, 50));
}

TEST(StageBoardDeathTest, AResumedBoardRefusesAStepBeforeItsFirst) {
  StageBoard board(kMilestones, 3, /*first_step=*/10);
  EXPECT_DEATH(board.Reach(kA, 9), "");
  EXPECT_DEATH(board.Reach(kA, 13), "");  // 10 has not reached it
}

TEST(StageBoardTest, WaiterReturnsOnceItsStepIsReached) {
  StageBoard board(kMilestones, 4);
  Status got = Internal("not returned");
  std::thread waiter([&] { got = board.WaitFor(kB, 2); });
  for (int64_t t = 0; t < 3; ++t) board.Reach(kA, t);  // another milestone wakes it for nothing
  EXPECT_FALSE(board.Reached(kB, 2));
  for (int64_t t = 0; t < 3; ++t) board.Reach(kB, t);
  waiter.join();
  EXPECT_TRUE(got.ok()) << got.ToString();
}

TEST(StageBoardTest, StepsMayReachAMilestoneOutOfOrderWithinTheWindow) {
  StageBoard board(kMilestones, 3);
  board.Reach(kA, 2);
  board.Reach(kA, 0);
  EXPECT_TRUE(board.Reached(kA, 0));
  EXPECT_FALSE(board.Reached(kA, 1));
  EXPECT_TRUE(board.Reached(kA, 2));
  board.Reach(kA, 1);
  board.Reach(kA, 3);  // step 0's entry, which step 0 had reached
  EXPECT_TRUE(board.Reached(kA, 3));
  EXPECT_TRUE(board.Reached(kA, 0));  // reached steps stay reached
  EXPECT_FALSE(board.Reached(kA, 4));
}

TEST(StageBoardDeathTest, ReachingBeforeTheStepAWindowBackIsABug) {
  StageBoard board(kMilestones, 2);
  board.Reach(kA, 0);
  EXPECT_DEATH(board.Reach(kA, 3), "");  // step 1 has not reached kA
  EXPECT_DEATH(board.Reach(kA, 0), "");  // twice
}

TEST(StageBoardTest, FirstFailureEndsEveryWait) {
  StageBoard board(kMilestones, 2);
  std::vector<Status> got(3, Status::OK());
  std::vector<std::thread> waiters;
  waiters.emplace_back([&] { got[0] = board.WaitFor(kA, 0); });
  waiters.emplace_back([&] { got[1] = board.WaitFor(kB, 5); });
  waiters.emplace_back([&] {
    int stage = -1;
    got[2] = board.WaitPosted(StageBoard::kSignaled, 0, 0, &stage);
  });
  board.Fail(Unavailable("server 3 is gone"));
  board.Fail(Internal("a later failure"));  // dropped
  for (std::thread& w : waiters) w.join();
  for (const Status& s : got) {
    EXPECT_EQ(s.code(), StatusCode::kUnavailable) << s.ToString();
    EXPECT_EQ(s.message(), "server 3 is gone");
  }
  EXPECT_EQ(board.failure().code(), StatusCode::kUnavailable);
}

TEST(StageBoardTest, AReachedStepIsOkEvenAfterAFailure) {
  StageBoard board(kMilestones, 2);
  board.Reach(kA, 0);
  board.Fail(Internal("boom"));
  EXPECT_TRUE(board.WaitFor(kA, 0).ok());
  EXPECT_EQ(board.WaitFor(kA, 1).code(), StatusCode::kInternal);
}

TEST(StageBoardTest, StopEndsWaitsWithAbortedEvenForReachedSteps) {
  StageBoard board(kMilestones, 2);
  board.Reach(kA, 0);
  Status got;
  std::thread waiter([&] { got = board.WaitFor(kB, 0); });
  board.Stop();
  waiter.join();
  EXPECT_EQ(got.code(), StatusCode::kAborted);
  EXPECT_EQ(board.WaitFor(kA, 0).code(), StatusCode::kAborted);  // no new work after Stop
  board.Fail(Internal("after stop"));
  EXPECT_EQ(board.WaitFor(kA, 1).code(), StatusCode::kAborted);
}

TEST(StageBoardTest, QueuesHandOverStagesInPostingOrder) {
  StageBoard board(kMilestones, 2);
  board.OpenStep(0);
  std::vector<int> taken;
  std::thread consumer([&] {
    for (size_t i = 0; i < 3; ++i) {
      int stage = -1;
      ASSERT_TRUE(board.WaitPosted(StageBoard::kEnqueued, 0, i, &stage).ok());
      taken.push_back(stage);
    }
  });
  board.Post(StageBoard::kSignaled, 0, 9);  // the other queue is not this one
  for (int stage : {2, 0, 1}) board.Post(StageBoard::kEnqueued, 0, stage);
  consumer.join();
  EXPECT_EQ(taken, (std::vector<int>{2, 0, 1}));
}

TEST(StageBoardTest, OpeningAStepEmptiesTheStepTwoBack) {
  StageBoard board(kMilestones, 2);
  board.OpenStep(0);
  board.Post(StageBoard::kSignaled, 0, 5);
  board.OpenStep(1);
  board.Post(StageBoard::kSignaled, 1, 6);
  int stage = -1;
  ASSERT_TRUE(board.WaitPosted(StageBoard::kSignaled, 0, 0, &stage).ok());
  EXPECT_EQ(stage, 5);
  board.OpenStep(2);  // step 0's entry
  // Step 2's queue is empty and step 0's is gone: a waiter for either blocks until stopped.
  Status for_old, for_new;
  std::thread old_waiter([&] { for_old = board.WaitPosted(StageBoard::kSignaled, 0, 0, &stage); });
  std::thread new_waiter([&] {
    int s = -1;
    for_new = board.WaitPosted(StageBoard::kSignaled, 2, 0, &s);
  });
  ASSERT_TRUE(board.WaitPosted(StageBoard::kSignaled, 1, 0, &stage).ok());  // step 1 untouched
  EXPECT_EQ(stage, 6);
  board.Stop();
  old_waiter.join();
  new_waiter.join();
  EXPECT_EQ(for_old.code(), StatusCode::kAborted);
  EXPECT_EQ(for_new.code(), StatusCode::kAborted);
}

// The GPU loop's shape in miniature: a planner, two pullers taking turns by step (finishing in
// any order), a consumer, and a ring of `window` slots whose reuse waits for the consumer. Every
// step's value must arrive intact and in order at the consumer, and no slot be overwritten early.
TEST(StageBoardTest, PipelineHandsEveryStepThroughTheRing) {
  constexpr int kWindow = 4, kSteps = 2000;
  enum : int { kPlanned = 0, kReady, kDone, kCount };
  StageBoard board(kCount, kWindow);
  std::vector<int64_t> slot(kWindow, -1);
  std::atomic<int> overwritten{0};
  std::thread planner([&] {
    for (int64_t t = 0; t < kSteps; ++t) {
      if (!board.WaitFor(kDone, t - kWindow).ok()) return;
      slot[t % kWindow] = t;
      board.Reach(kPlanned, t);
    }
  });
  std::vector<std::thread> pullers;
  for (int p = 0; p < 2; ++p) {
    pullers.emplace_back([&, p] {
      for (int64_t t = p; t < kSteps; t += 2) {
        if (!board.WaitFor(kPlanned, t).ok()) return;
        slot[t % kWindow] *= 3;
        board.Reach(kReady, t);
      }
    });
  }
  int64_t checked = 0;
  for (int64_t t = 0; t < kSteps; ++t) {
    ASSERT_TRUE(board.WaitFor(kReady, t).ok());
    if (slot[t % kWindow] != 3 * t) overwritten++;
    board.Reach(kDone, t);
    ++checked;
  }
  planner.join();
  for (std::thread& p : pullers) p.join();
  EXPECT_EQ(checked, kSteps);
  EXPECT_EQ(overwritten.load(), 0);
}

// A failure in one stage reaches the consumer, and the other stages stop instead of hanging.
TEST(StageBoardTest, FailureMidPipelineStopsEveryStage) {
  constexpr int kWindow = 3;
  enum : int { kPlanned = 0, kDone, kCount };
  StageBoard board(kCount, kWindow);
  std::thread planner([&] {
    for (int64_t t = 0;; ++t) {
      if (!board.WaitFor(kDone, t - kWindow).ok()) return;
      if (t == 10) return board.Fail(DataLoss("step 10 is corrupt"));
      board.Reach(kPlanned, t);
    }
  });
  Status last;
  int64_t consumed = 0;
  for (int64_t t = 0;; ++t) {
    last = board.WaitFor(kPlanned, t);
    if (!last.ok()) break;
    board.Reach(kDone, t);
    ++consumed;
  }
  planner.join();
  EXPECT_EQ(consumed, 10);
  EXPECT_EQ(last.code(), StatusCode::kDataLoss);
}

}  // namespace
}  // namespace osprey::worker::gpu
