#include "worker/gpu/stage_board.h"

#include "common/logging.h"

namespace osprey::worker::gpu {

StageBoard::StageBoard(int num_milestones, int window, int64_t first_step)
    : window_(window), first_step_(first_step), reached_(static_cast<size_t>(num_milestones) * window, -1) {
  OSPREY_CHECK(num_milestones >= 1 && window >= 1 && first_step >= 0);
}

bool StageBoard::ReachedLocked(int milestone, int64_t step) const {
  if (step < first_step_) return true;
  return reached_[static_cast<size_t>(milestone) * window_ + step % window_] >= step;
}

void StageBoard::Reach(int milestone, int64_t step) {
  OSPREY_CHECK(step >= first_step_);
  {
    MutexLock lock(&mu_);
    int64_t& entry = reached_[static_cast<size_t>(milestone) * window_ + step % window_];
    // The entry holds step - window once that step reached the milestone (-1 before any did).
    OSPREY_CHECK(entry == step - window_ || (entry == -1 && step < first_step_ + window_));
    entry = step;
  }
  cv_.SignalAll();
}

bool StageBoard::Reached(int milestone, int64_t step) const {
  MutexLock lock(&mu_);
  return ReachedLocked(milestone, step);
}

Status StageBoard::WaitResultLocked(bool done) const {
  if (stopped_) return Aborted("stopped");
  if (done) return Status::OK();
  return failure_;
}

Status StageBoard::WaitFor(int milestone, int64_t step) {
  MutexLock lock(&mu_);
  cv_.Wait(&lock, [&]() REQUIRES(mu_) { return ReachedLocked(milestone, step) || InterruptedLocked(); });
  return WaitResultLocked(ReachedLocked(milestone, step));
}

void StageBoard::OpenStep(int64_t step) {
  OSPREY_CHECK(step >= 0);
  const int b = static_cast<int>(step % 2);
  MutexLock lock(&mu_);
  open_step_[b] = step;
  posted_[b][kSignaled].clear();
  posted_[b][kEnqueued].clear();
}

void StageBoard::Post(Queue q, int64_t step, int stage) {
  const int b = static_cast<int>(step % 2);
  {
    MutexLock lock(&mu_);
    OSPREY_CHECK(open_step_[b] == step);
    posted_[b][q].push_back(stage);
  }
  cv_.SignalAll();
}

Status StageBoard::WaitPosted(Queue q, int64_t step, size_t i, int* stage) {
  const int b = static_cast<int>(step % 2);
  MutexLock lock(&mu_);
  auto posted = [&]() REQUIRES(mu_) { return open_step_[b] == step && posted_[b][q].size() > i; };
  cv_.Wait(&lock, [&]() REQUIRES(mu_) { return posted() || InterruptedLocked(); });
  if (!posted()) return stopped_ ? Aborted("stopped") : failure_;
  if (stopped_) return Aborted("stopped");
  *stage = posted_[b][q][i];
  return Status::OK();
}

void StageBoard::Fail(const Status& s) {
  OSPREY_CHECK(!s.ok());
  {
    MutexLock lock(&mu_);
    if (failure_.ok()) failure_ = s;
  }
  cv_.SignalAll();
}

Status StageBoard::failure() const {
  MutexLock lock(&mu_);
  return failure_;
}

void StageBoard::Stop() {
  {
    MutexLock lock(&mu_);
    stopped_ = true;
  }
  cv_.SignalAll();
}

}  // namespace osprey::worker::gpu
