// StageBoard: the hand-offs between the threads of the GPU loop (worker/gpu_trainer.h), in one
// place: "step t reached stage X", the gradient stages a step's backward hands out one by one,
// the first failure, and stop.
//
// Milestones. A milestone is a stage a step reaches once (planned, pulled, ready, gathered,
// pushed: the loop names them, the board only counts them, 0 .. num_milestones - 1). Reach(m, t)
// publishes it; WaitFor(m, t) returns once step t has reached m. Steps below the board's first
// step (0, or a restarted worker's resume step) have reached every milestone. The board
// remembers the last `window` steps of each milestone (step t in entry t % window), so a
// milestone may be reached by steps out of order (the pullers finish steps in any order) but
// step t may reach it only once step t - window has: the loop's ring guarantees that (a step's
// inputs are reused only after the step it held was pushed), and Reach checks it.
//
// Gradient stages. A step's backward hands its stages (dense buckets and the row gradients, in
// the order backward finishes them) to the comm thread, which hands them to the pusher once their
// copies are enqueued: two queues, Post(q, t, stage) and WaitPosted(q, t, i) -> the i-th stage
// posted on q for step t. Queues hold two steps (t % 2); OpenStep(t) empties step t's, which the
// caller may do only once step t - 2's stages were all taken from both queues.
//
// Failure and stop. Fail(s) records the first failure (later ones are dropped) and wakes every
// waiter; Stop() wakes them too, for good. A wait returns, in this order: Aborted("stopped") once
// stopped (so no thread starts new work after Stop), OK when what it waits for happened, the
// first failure when there is one. The main thread, which never stops the board before it is
// done waiting, thus sees either its step or the failure.
//
// Thread-safety: every call may come from any thread. Waits block on a condition, never poll.
#pragma once

#include <cstdint>
#include <vector>

#include "common/mutex.h"
#include "common/status.h"
#include "common/thread_annotations.h"

namespace osprey::worker::gpu {

class StageBoard {
 public:
  enum Queue { kSignaled = 0, kEnqueued = 1 };

  // num_milestones >= 1 kinds of milestone, each remembered for window >= 1 steps. Steps below
  // first_step >= 0 have reached every milestone (a restarted worker's loop begins at its resume
  // step: worker/trainer.h ResumeAt).
  StageBoard(int num_milestones, int window, int64_t first_step = 0);
  StageBoard(const StageBoard&) = delete;
  StageBoard& operator=(const StageBoard&) = delete;

  // Publishes that `step` (>= 0) reached milestone m. A step reaching m twice, or before
  // step - window did, is a programmer error (OSPREY_CHECK).
  void Reach(int milestone, int64_t step) EXCLUDES(mu_);
  // Waits until `step` reached milestone m (see above for what else ends the wait).
  Status WaitFor(int milestone, int64_t step) EXCLUDES(mu_);
  bool Reached(int milestone, int64_t step) const EXCLUDES(mu_);

  // Empties step's two queues (they held step - 2's).
  void OpenStep(int64_t step) EXCLUDES(mu_);
  // Appends `stage` to step's queue q; step must be open (OSPREY_CHECK).
  void Post(Queue q, int64_t step, int stage) EXCLUDES(mu_);
  // Waits until queue q of step holds an i-th stage and returns it in *stage.
  Status WaitPosted(Queue q, int64_t step, size_t i, int* stage) EXCLUDES(mu_);

  // Records the first failure (s must not be OK) and wakes every waiter.
  void Fail(const Status& s) EXCLUDES(mu_);
  // OK, or the first failure.
  Status failure() const EXCLUDES(mu_);
  // Ends every wait with Aborted("stopped"), now and later.
  void Stop() EXCLUDES(mu_);

 private:
  bool ReachedLocked(int milestone, int64_t step) const REQUIRES(mu_);
  // The status a wait returns once woken, given whether its condition holds.
  Status WaitResultLocked(bool done) const REQUIRES(mu_);
  // The end of waits that are not done: stopped or failed.
  bool InterruptedLocked() const REQUIRES(mu_) { return stopped_ || !failure_.ok(); }

  const int window_;
  const int64_t first_step_;
  mutable Mutex mu_;
  CondVar cv_;
  // reached_[m * window_ + t % window_]: the last step t that reached milestone m in that entry
  // (-1: none yet).
  std::vector<int64_t> reached_ GUARDED_BY(mu_);
  int64_t open_step_[2] GUARDED_BY(mu_) = {-1, -1};  // the step whose queues entry t % 2 holds
  std::vector<int> posted_[2][2] GUARDED_BY(mu_);     // [t % 2][queue]: stages in posting order
  Status failure_ GUARDED_BY(mu_);
  bool stopped_ GUARDED_BY(mu_) = false;
};

}  // namespace osprey::worker::gpu
