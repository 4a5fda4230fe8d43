// NcclHostGroup: the NCCL communicator of the GPU workers of one host (worker/gpu_trainer.h,
// "NCCL host group"), and the two collectives the loop runs on it: the reduce of a dense bucket
// to the owners of its chunks, and the broadcast of the parameters from their owners. Private to
// the GPU loop (CUDA runtime API).
//
// Ownership: owns the communicator (destroyed by the destructor; the owner synchronizes the
// streams that used it first). Thread-safety: the collectives from one thread (the loop's comm
// thread), in the same order on every local rank.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "job/job_config.h"
#include "common/status.h"
#include "worker/gpu/bucket_plan.h"
#include "worker/gpu_trainer.h"

namespace osprey::worker::gpu {

class NcclHostGroup {
 public:
  // Joins the host group when there is one to join: several workers on the host, worker.nccl on,
  // one GPU per worker (worker.gpu unset and at least local_size visible devices: every worker of
  // the host concludes the same) and a build with NCCL. Otherwise returns null and logs why when
  // the host has several workers. Errors: Internal when the id exchange or NCCL fails.
  static StatusOr<std::unique_ptr<NcclHostGroup>> Join(const config::JobConfig& job, int rank,
                                                       const HostGroup& host, int servers,
                                                       const std::string& device_name);
  ~NcclHostGroup();
  NcclHostGroup(const NcclHostGroup&) = delete;
  NcclHostGroup& operator=(const NcclHostGroup&) = delete;

  int local_rank() const { return local_rank_; }
  int local_size() const { return local_size_; }
  // The servers this worker pushes and pulls the dense chunks of (OwnedServers).
  const std::vector<bool>& own_servers() const { return own_servers_; }

  // Enqueue on `stream`, one NCCL group each. Reduce: each range of d (floats) averaged over the
  // host into its root. Broadcast: each range of d from its root into every rank. Errors:
  // Internal naming the step and what was reduced ("dense bucket K") or broadcast.
  Status Reduce(const std::vector<OwnedRange>& ranges, float* d, cudaStream_t stream, int64_t step, int bucket);
  Status Broadcast(const std::vector<OwnedRange>& ranges, float* d, cudaStream_t stream, int64_t step);

 private:
  struct Comm;
  NcclHostGroup(std::unique_ptr<Comm> comm, int local_rank, int local_size, int servers);

  std::unique_ptr<Comm> comm_;
  const int local_rank_, local_size_;
  const std::vector<bool> own_servers_;
};

}  // namespace osprey::worker::gpu
