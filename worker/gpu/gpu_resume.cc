// The GPU loop's restarts at a step (worker/gpu_trainer.h, issue 12): ResumeAt, a restarted
// worker's start at its resume plan's step, and Rewind, the bsp rollback to the job's last
// consistent cut (coordinator/job_state_rollback.cc). Both make every thread of the loop start at
// one step: the StageBoard counts the steps before it as done, the BatchReader starts its stream
// at the step's first sample (the synthetic stream is a function of the sample index).
#include <limits>
#include <string>

#include "common/logging.h"
#include "worker/gpu/gpu_trainer_impl.h"

namespace osprey::worker::gpu {

Status GpuTrainer::StartAt(int64_t step) {
  if (host_group_) {
    return Unimplemented("a GPU worker of a host group (NCCL, " + std::to_string(host_group_->local_size()) +
                         " local ranks) cannot restart its loop alone at step " + std::to_string(step) +
                         ": restart the host's workers together");
  }
  first_step_ = step;
  board_ = std::make_unique<StageBoard>(kNumMilestones, opt_.ring, step);
  if (opt_.reader.pool == 0) {  // Run starts it; a pool (made in Init) serves any step as it is
    reader_ = std::make_unique<BatchReader>(job_, rank_, num_workers_, opt_.reader);
    reader_->SetFirstStep(step);
  }
  step_.store(step);
  samples_.store(static_cast<uint64_t>(step * job_.train.batch_size));  // a full batch per step before
  return Status::OK();
}

Status GpuTrainer::ResumeAt(int64_t step) {
  if (reader_ == nullptr) return FailedPrecondition("ResumeAt before Init");
  if (step == 0) return Status::OK();  // a fresh start
  if (step < 0 || step > job_.train.steps) {
    return InvalidArgument("resume at step " + std::to_string(step) + ": outside [0, train.steps = " +
                           std::to_string(job_.train.steps) + "]");
  }
  OSPREY_RETURN_IF_ERROR(StartAt(step));
  OSPREY_LOG_INFO("worker {} resumes at step {} of {} (its stream from sample {})", rank_, step, job_.train.steps,
                  step * job_.train.batch_size);
  return Status::OK();
}

Status GpuTrainer::Rewind(uint64_t generation, int64_t clock) {
  if (clock < 0 || clock > job_.train.steps) {
    return Internal("bsp rollback to clock " + std::to_string(clock) + ": outside [0, train.steps]");
  }
  // RunSegment joined its threads and waited for its pushes: answered (applied before the
  // rollback, or refused), dropped either way.
  (void)exchange_.WaitPushes(std::numeric_limits<int64_t>::max());
  const int64_t from = step_.load();
  OSPREY_RETURN_IF_ERROR(StartAt(clock));
  // The cached rows were pulled before the servers went back to the cut: start empty.
  OSPREY_ASSIGN_OR_RETURN(cache_, ShardedRowCache::Make(opt_.cache, opt_.plan_threads));
  exchange_.client()->SetRollbackGeneration(generation);
  if (exchange_.compressor() != nullptr) {
    OSPREY_LOG_WARN("worker {}: the dense compressor's error feedback is not rolled back; the "
                    "redone clocks are not exactly the first ones", rank_);
  }
  OSPREY_LOG_WARN("worker {} rewinds from step {} to clock {} (bsp rollback generation {}): {} "
                  "clocks redone", rank_, from, clock, generation, from - clock);
  return Status::OK();
}

}  // namespace osprey::worker::gpu
