// NcclHostGroup: the NCCL communicator of the GPU workers of one host (worker/gpu_trainer.h,
// "NCCL host group"), and the two collectives the loop runs on it: the reduce of a dense bucket
// to the owners of its chunks, and the broadcast of the parameters from their owners. With
// worker.host_allreduce ipc or auto (StartIpc, host_ipc.cc), a bucket may instead be averaged by
// the CUDA IPC allreduce (worker/cuda/ipc): every rank then holds the mean, the owners' chunks
// among it (the same bits as NCCL's ncclAvg for two ranks). Private to the GPU loop (CUDA
// runtime API).
//
// Ownership: owns the communicator and the IPC allreduce (destroyed by the destructor; the owner
// synchronizes the streams that used them first). Thread-safety: StartIpc before the loop; the
// collectives from one thread (the loop's comm thread), in the same order on every local rank;
// PollIpc from any thread.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "job/job_config.h"
#include "common/status.h"
#include "worker/cuda/ipc/ipc_allreduce.h"
#include "worker/gpu/allreduce_choice.h"
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

  // worker.host_allreduce ipc or auto: maps the IPC allreduce among the host's ranks (handles
  // all-gathered over NCCL) for buckets up to max_bytes and, for auto, times both paths at
  // CalibrationSizes(max_bytes) on `stream` (the slowest rank's times decide, for every rank
  // alike) and logs the table. All ranks agree on the outcome: when one cannot map its peers (no
  // peer access), every rank logs why and keeps NCCL. Errors: Internal from NCCL or CUDA.
  Status StartIpc(const std::string& mode, size_t max_bytes, int64_t timeout_ms, cudaStream_t stream);
  const AllreduceChoice& choice() const { return choice_; }

  // Enqueue on `stream`. Reduce: each range of d (floats) averaged over the host into its root,
  // one NCCL group; or, when choice() takes IPC for the bucket's size, the whole bucket
  // [bucket.begin, bucket.end) averaged into every rank. Broadcast: each range of d from its root
  // into every rank. Errors: Internal naming the step and what was reduced ("dense bucket K") or
  // broadcast; FailedPrecondition once an IPC call gave up on a peer.
  Status Reduce(const DenseBucket& bucket, float* d, cudaStream_t stream, int64_t step, int stage);
  Status Broadcast(const std::vector<OwnedRange>& ranges, float* d, cudaStream_t stream, int64_t step);
  // Without waiting: DeadlineExceeded once an IPC reduce that already ran gave up on a peer (its
  // bucket must not be pushed). Call after waiting for the bucket's completion event.
  Status PollIpc();

 private:
  struct Comm;
  NcclHostGroup(std::unique_ptr<Comm> comm, int local_rank, int local_size, int servers);
  Status NcclReduce(const std::vector<OwnedRange>& ranges, float* d, cudaStream_t stream);
  // The host's verdict: true when `ok` holds on every rank (an NCCL all-reduce of a flag).
  StatusOr<bool> AllAgree(bool ok, cudaStream_t stream);
  StatusOr<std::vector<std::string>> GatherHandles(const std::string& mine, cudaStream_t stream);
  StatusOr<AllreduceChoice> Calibrate(size_t max_bytes, cudaStream_t stream);

  std::unique_ptr<Comm> comm_;
  std::unique_ptr<cuda::IpcAllreduce> ipc_;
  AllreduceChoice choice_;  // NCCL for every size until StartIpc
  const int local_rank_, local_size_;
  const std::vector<bool> own_servers_;
};

}  // namespace osprey::worker::gpu
