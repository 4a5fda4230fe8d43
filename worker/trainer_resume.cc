// A restarted worker resumes its rank's work (issue 12, worker failover) at the step its resume
// plan says (worker/resume_plan.h: from the servers' applied clocks, the coordinator's
// resume_clock as the fallback); the data stream moves past the samples of the steps before it.
// Steps from there that some server already took are replayed (their samples read again) with
// the pushes to those servers not sent (Client::SetPushFloors), so each push is taken once.
#include "common/logging.h"
#include "worker/trainer.h"

#include <algorithm>

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
  const int64_t samples = step * job_.train.batch_size * std::max(1, job_.train.accumulate_steps);
  OSPREY_RETURN_IF_ERROR(data_->Skip(samples));
  first_step_ = step;
  step_.store(step);
  samples_.store(static_cast<uint64_t>(samples));  // a full batch per step before the restart
  OSPREY_LOG_INFO("worker {} resumes at step {} of {} (skipped {} samples of its stream)", rank_, step,
                  job_.train.steps, samples);
  return Status::OK();
}

}  // namespace osprey::worker
