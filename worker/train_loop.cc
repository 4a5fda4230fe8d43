#include "common/logging.h"
#include "worker/gpu_trainer.h"

namespace osprey::worker {

StatusOr<std::unique_ptr<TrainLoop>> MakeTrainLoop(const config::JobConfig& job, int rank, int num_workers,
                                                   Client* client, const HostGroup& host) {
  const std::string& device = job.worker.device;
  if (device == "cuda" || device == "auto") {
    auto gpu = MakeGpuTrainer(job, rank, num_workers, client, host);
    if (gpu.ok()) return gpu;
    if (device == "cuda" || gpu.status().code() != StatusCode::kFailedPrecondition) {
      return Status(gpu.status().code(), "worker.device " + device + ": " + gpu.status().message());
    }
    OSPREY_LOG_WARN("worker {}: worker.device auto: {}; training on the CPU", rank, gpu.status().message());
  }
  return std::unique_ptr<TrainLoop>(std::make_unique<Trainer>(job, rank, num_workers, client));
}

}  // namespace osprey::worker
