// MakeGpuTrainer for builds without CUDA (OSPREY_WITH_CUDA off or no toolkit found).
#include "worker/gpu_trainer.h"

namespace osprey::worker {

StatusOr<std::unique_ptr<TrainLoop>> MakeGpuTrainer(const config::JobConfig&, int, int, Client*, const HostGroup&) {
  return FailedPrecondition(
      "this osprey-worker was built without CUDA (configure with a CUDA toolkit and OSPREY_WITH_CUDA "
      "ON/AUTO), so it cannot train on a GPU; use worker.device: cpu, or auto to fall back");
}

}  // namespace osprey::worker
