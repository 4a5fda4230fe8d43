// A restarted worker resumes its rank's work (issue 12, worker failover) at the step its resume
// plan says (worker/resume_plan.h: from the servers' applied clocks, the coordinator's
// resume_clock as the fallback); the data stream moves past the samples of the steps before it.
// Steps from there that some server already took are replayed (their samples read again) with
// the pushes to those servers not sent (Client::SetPushFloors), so each push is taken once.
#include "common/logging.h"
#include "worker/trainer.h"

#include <algorithm>
#include <chrono>
#include <thread>

namespace osprey::worker {

Status DataSource::Skip(int64_t samples) {
  data::Batch batch;
  while (samples > 0) {
    const int n = static_cast<int>(std::min<int64_t>(samples, 4096));
    OSPREY_RETURN_IF_ERROR(Next(n, &batch));
    if (batch.size == 0) break;
    samples -= batch.size;
  }
  return Status::OK();
}

Status Trainer::ResumeAt(int64_t step) {
  if (data_ == nullptr) return FailedPrecondition("ResumeAt before Init");
  if (step == 0) return Status::OK();  // a fresh start
  if (step < 0 || step > job_.train.steps) {
    return InvalidArgument("resume at step " + std::to_string(step) + ": outside [0, train.steps = " +
                           std::to_string(job_.train.steps) + "]");
  }
  // A step reads train.accumulate_steps micro-batches (trainer_accumulate.cc).
  const int64_t samples = step * SamplesPerStep();
  OSPREY_RETURN_IF_ERROR(data_->Skip(samples));
  first_step_ = step;
  step_.store(step);
  samples_.store(static_cast<uint64_t>(samples));  // a full batch per step before the restart
  OSPREY_LOG_INFO("worker {} resumes at step {} of {} (skipped {} samples of its stream)", rank_, step,
                  job_.train.steps, samples);
  return Status::OK();
}

// bsp rollback (issue 12; coordinator/job_state_rollback.cc): a replaced server made every
// server go back to the last consistent cut; this worker rewinds to its clock and trains the
// clocks from there again, exactly as before (the synthetic stream is a function of the sample
// index, bsp windows close on every worker's push of the clock).
bool AwaitBspRollback(const Client& client, const config::JobConfig& job, int rank, const Status& s,
                      uint64_t* generation, int64_t* clock) {
  if (!client.RollbackAnnounced() && s.code() != StatusCode::kAborted) return false;
  const int budget_ms = std::max(job.cluster.server_replace_timeout_ms, 0) + 2 * job.cluster.heartbeat_timeout_ms;
  const auto start = std::chrono::steady_clock::now();
  const auto deadline = start + std::chrono::milliseconds(budget_ms);
  // An Aborted step without an announced rollback may be a server's answer to a rollback this
  // worker has not heard of yet (the next heartbeat reply names it), or a stopped client (the
  // coordinator lost, the job shutting down): wait two heartbeat intervals for the announcement.
  const auto announce_by = start + std::chrono::milliseconds(2 * std::max(job.cluster.heartbeat_interval_ms, 1));
  while (!client.ReadyRollback(generation, clock)) {
    if (!client.RollbackAnnounced() && std::chrono::steady_clock::now() > announce_by) return false;
    if (std::chrono::steady_clock::now() > deadline) {
      OSPREY_LOG_ERROR("worker {}: step failed ({}) and no bsp rollback became ready within {} ms",
                       rank, s.ToString(), budget_ms);
      return false;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return true;
}

Status Trainer::Rewind(uint64_t generation, int64_t clock) {
  if (clock < 0 || clock > job_.train.steps) {
    return Internal("bsp rollback to clock " + std::to_string(clock) + ": outside [0, train.steps]");
  }
  (void)WaitPushes();  // answered (applied before the rollback, or refused): dropped either way
  const int64_t from = step_.load();
  OSPREY_ASSIGN_OR_RETURN(data_, MakeDataSource(job_, rank_, num_workers_, /*train=*/true));
  const int64_t samples = clock * SamplesPerStep();
  OSPREY_RETURN_IF_ERROR(data_->Skip(samples));
  step_.store(clock);
  // Clocks skipped before the cut were not trained (async_barrier); those past it are redone.
  while (!skipped_.empty() && skipped_.back().first >= clock) skipped_.pop_back();
  if (!skipped_.empty()) skipped_.back().second = std::min(skipped_.back().second, clock);
  samples_.store(static_cast<uint64_t>(samples - static_cast<int64_t>(clocks_skipped()) * SamplesPerStep()));
  client_->SetRollbackGeneration(generation);
  clocks_redone_ += std::max<int64_t>(0, from - clock);
  if (compressor_ != nullptr) {
    OSPREY_LOG_WARN("worker {}: the dense compressor's error feedback is not rolled back; the "
                    "redone clocks are not exactly the first ones", rank_);
  }
  OSPREY_LOG_WARN("worker {} rewinds from step {} to clock {} (bsp rollback generation {}): {} "
                  "clocks redone", rank_, from, clock, generation, from - clock);
  return Status::OK();
}

// adaptive_ratio.async_barrier: this worker left the step barrier (it is slow even at its density
// bound), so the others no longer wait for it. Rather than push ever staler clocks, it joins the
// clock the workers holding the barrier are at, as a backup worker does: the skipped clocks'
// batches are not trained (the stream moves past them, as a restarted worker's does, so step and
// stream position stay tied: ResumeAt and Rewind read the stream the same way) and the samples
// counter counts only what was trained. A scale step pauses every worker at one clock, so it never
// skips past a pending boundary.
Status Trainer::SkipToBarrier(int64_t* step) {
  const int64_t target = std::min(barrier_clock_.load(), job_.train.steps);
  if (target <= *step) return Status::OK();
  if (boundary_ != nullptr && boundary_->Pending(target)) return Status::OK();
  const int64_t skipped = target - *step;
  OSPREY_RETURN_IF_ERROR(data_->Skip(skipped * SamplesPerStep()));
  skipped_.emplace_back(*step, target);
  OSPREY_LOG_DEBUG("worker {} left the step barrier: skips clocks {}..{} to the others' clock {}", rank_, *step,
                   target - 1, target);
  *step = target;
  step_.store(target);
  return Status::OK();
}

uint64_t Trainer::clocks_skipped() const {
  uint64_t n = 0;
  for (const auto& [from, to] : skipped_) n += static_cast<uint64_t>(to - from);
  return n;
}

}  // namespace osprey::worker
