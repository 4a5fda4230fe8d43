#include "worker/gpu/host_group.h"

#include <algorithm>
#include <cstring>

#include "common/logging.h"
#include "worker/cuda/cuda_check.cuh"
#include "worker/gpu/host_group_comm.h"

namespace osprey::worker::gpu {

#ifdef OSPREY_HAVE_NCCL
namespace {

// Local rank 0 makes the id, the coordinator hands it to the others.
StatusOr<ncclUniqueId> ExchangeId(const HostGroup& host) {
  ncclUniqueId id;
  std::string mine;
  if (host.local_rank == 0) {
    ncclResult_t r = ncclGetUniqueId(&id);
    if (r != ncclSuccess) return Internal(std::string("ncclGetUniqueId: ") + ncclGetErrorString(r));
    mine.assign(reinterpret_cast<const char*>(&id), sizeof(id));
  }
  OSPREY_ASSIGN_OR_RETURN(std::string got, host.exchange_id(mine));
  if (got.size() != sizeof(id)) {
    return Internal("host group: the NCCL id from the coordinator has " + std::to_string(got.size()) + " bytes, not " +
                    std::to_string(sizeof(id)));
  }
  std::memcpy(&id, got.data(), sizeof(id));
  return id;
}

}  // namespace
#endif

NcclHostGroup::NcclHostGroup(std::unique_ptr<Comm> comm, int local_rank, int local_size, int servers)
    : comm_(std::move(comm)), local_rank_(local_rank), local_size_(local_size),
      own_servers_(OwnedServers(servers, local_rank, local_size)) {}

NcclHostGroup::~NcclHostGroup() {
  ipc_.reset();  // unmaps the peers' buffers while the communicator still holds the group
}

StatusOr<std::unique_ptr<NcclHostGroup>> NcclHostGroup::Join(const config::JobConfig& job, int rank,
                                                             const HostGroup& host, int servers,
                                                             const std::string& device_name) {
  if (host.local_size <= 1 || !job.worker.nccl) return std::unique_ptr<NcclHostGroup>();
  int count = 0;
  OSPREY_CUDA_RETURN_IF_ERROR(cudaGetDeviceCount(&count));
  if (job.worker.gpu >= 0 || host.local_size > count) {
    // NCCL needs one GPU per rank; every worker of the host comes to the same conclusion.
    OSPREY_LOG_WARN("worker {}: {} GPU workers on this host share {} visible GPUs{}: no NCCL host group, each "
                    "pushes its own dense gradient", rank, host.local_size, count,
                    job.worker.gpu >= 0 ? " (worker.gpu is set)" : "");
    return std::unique_ptr<NcclHostGroup>();
  }
#ifdef OSPREY_HAVE_NCCL
  if (!host.exchange_id) {
    return Internal("host group of " + std::to_string(host.local_size) + " workers without an id exchange");
  }
  OSPREY_ASSIGN_OR_RETURN(ncclUniqueId id, ExchangeId(host));
  auto comm = std::make_unique<Comm>();
  ncclResult_t r = ncclCommInitRank(&comm->comm, host.local_size, id, host.local_rank);
  if (r != ncclSuccess) {
    comm->comm = nullptr;
    return Internal("NCCL host group (local rank " + std::to_string(host.local_rank) + " of " +
                    std::to_string(host.local_size) + " on " + device_name + "): " + ncclGetErrorString(r));
  }
  std::unique_ptr<NcclHostGroup> group(new NcclHostGroup(std::move(comm), host.local_rank, host.local_size, servers));
  OSPREY_LOG_INFO("worker {}: NCCL host group, local rank {} of {}; pushes and pulls the dense chunks of {} of {} "
                  "servers", rank, host.local_rank, host.local_size,
                  std::count(group->own_servers_.begin(), group->own_servers_.end(), true), servers);
  return group;
#else
  (void)servers;
  (void)device_name;
  OSPREY_LOG_WARN("worker {}: {} GPU workers on this host, but this build has no NCCL: each pushes its own dense "
                  "gradient", rank, host.local_size);
  return std::unique_ptr<NcclHostGroup>();
#endif
}

Status NcclHostGroup::Reduce(const DenseBucket& bucket, float* d, cudaStream_t stream, int64_t step, int stage) {
  const size_t floats = bucket.end - bucket.begin;
  Status s = ipc_ && choice_.For(floats * sizeof(float)) == AllreducePath::kIpc
                 ? ipc_->AllReduce(d + bucket.begin, floats, /*average=*/true, stream)
                 : NcclReduce(bucket.ranges, d, stream);
  if (s.ok()) return s;
  return s.WithContext("step " + std::to_string(step) + ": reduce of dense bucket " + std::to_string(stage));
}

Status NcclHostGroup::NcclReduce(const std::vector<OwnedRange>& ranges, float* d, cudaStream_t stream) {
#ifdef OSPREY_HAVE_NCCL
  ncclResult_t r = ncclGroupStart();
  for (const OwnedRange& g : ranges) {
    if (r != ncclSuccess) break;
    r = ncclReduce(d + g.first, d + g.first, g.count, ncclFloat, ncclAvg, g.root, comm_->comm, stream);
  }
  ncclResult_t end = ncclGroupEnd();
  if (r == ncclSuccess) r = end;
  if (r != ncclSuccess) return Internal(std::string("NCCL: ") + ncclGetErrorString(r));
  return Status::OK();
#else
  (void)ranges, (void)d, (void)stream;
  return Internal("host group without NCCL");
#endif
}

Status NcclHostGroup::Broadcast(const std::vector<OwnedRange>& ranges, float* d, cudaStream_t stream, int64_t step) {
#ifdef OSPREY_HAVE_NCCL
  ncclResult_t r = ncclGroupStart();
  for (const OwnedRange& g : ranges) {
    if (r != ncclSuccess) break;
    float* p = d + g.first;
    r = ncclBroadcast(p, p, g.count, ncclFloat, g.root, comm_->comm, stream);
  }
  ncclResult_t end = ncclGroupEnd();
  if (r == ncclSuccess) r = end;
  if (r != ncclSuccess) {
    return Internal("step " + std::to_string(step) + ": NCCL all-gather of the dense parameters: " +
                    ncclGetErrorString(r));
  }
  return Status::OK();
#else
  (void)ranges, (void)d, (void)stream, (void)step;
  return Internal("host group without NCCL");
#endif
}

}  // namespace osprey::worker::gpu
