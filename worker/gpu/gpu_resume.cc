// The GPU loop's restarts at a step (worker/gpu_trainer.h, issue 12): ResumeAt, a restarted
// worker's start at its resume plan's step; Rewind, the bsp rollback to the job's last
// consistent cut (coordinator/job_state_rollback.cc); and AtBoundary, a scale step's pause
// (worker/scale_pause.h) after which the loop goes on with the new shard map's client. Each makes
// every thread of the loop start at one step: the StageBoard counts the steps before it as done,
// the BatchReader starts its stream at the step's first sample (the synthetic stream is a function
// of the sample index).
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
  OSPREY_RETURN_IF_ERROR(cache_->Reset(plan_stream_));
  exchange_.client()->SetRollbackGeneration(generation);
  if (exchange_.compressor() != nullptr) {
    OSPREY_LOG_WARN("worker {}: the dense compressor's error feedback is not rolled back; the "
                    "redone clocks are not exactly the first ones", rank_);
  }
  OSPREY_LOG_WARN("worker {} rewinds from step {} to clock {} (bsp rollback generation {}): {} "
                  "clocks redone", rank_, from, clock, generation, from - clock);
  return Status::OK();
}

Status GpuTrainer::AtBoundary(int64_t step) {
  // RunSegment joined its threads after the steps before `step` were pushed, and every push was
  // answered: nothing of this loop is in flight.
  OSPREY_ASSIGN_OR_RETURN(Client* next, boundary_->Pause(step));
  if (next != exchange_.client()) OSPREY_RETURN_IF_ERROR(SwitchClient(next));
  // The planner ran ahead of `step` (its plans of later steps were never trained) -- and with a new
  // map the cache's device memory is new: the row cache starts empty either way.
  OSPREY_RETURN_IF_ERROR(cache_->Reset(plan_stream_));
  return StartAt(step);
}

Status GpuTrainer::SwitchClient(Client* next) {
  const int from = exchange_.num_servers();
  OSPREY_RETURN_IF_ERROR(exchange_.SetClient(next));
  OSPREY_RETURN_IF_ERROR(exchange_.InstallCodecs(cpu_model_->dense_tensors(), opt_.encode_on_device));
  InitBuckets();
  OSPREY_RETURN_IF_ERROR(InitBuffers());  // the row cache's device memory too (AtBoundary resets its index)
  OSPREY_RETURN_IF_ERROR(InitEncoder());
  OSPREY_LOG_INFO("worker {}: the GPU loop goes on with shard map epoch {} ({} -> {} servers); its row "
                  "cache starts empty{}", rank_, next->shard_map().epoch(), from, exchange_.num_servers(),
                  exchange_.compressor() != nullptr ? ", the dense compressor's residual at zero" : "");
  return Status::OK();
}

}  // namespace osprey::worker::gpu
