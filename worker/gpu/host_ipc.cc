// NcclHostGroup::StartIpc and what it needs (host_group.h): the CUDA IPC allreduce mapped among
// the host's ranks, its handles all-gathered over NCCL, the ranks' agreement on whether it works
// everywhere, and the auto calibration against NCCL's reduce.
#include <cuda_runtime.h>

#include <algorithm>

#include "common/logging.h"
#include "common/stats.h"
#include "worker/cuda/codec_kernels.h"  // DeviceBuffer
#include "worker/cuda/cuda_check.cuh"
#include "worker/gpu/host_group.h"
#include "worker/gpu/host_group_comm.h"

namespace osprey::worker::gpu {
namespace {

#ifdef OSPREY_HAVE_NCCL
Status NcclStatus(ncclResult_t r, const char* what) {
  if (r == ncclSuccess) return Status::OK();
  return Internal(std::string("host group: ") + what + ": " + ncclGetErrorString(r));
}
#endif

// Median milliseconds of `reps` runs of `fn` on `stream`, after two warm-ups.
template <typename Fn>
StatusOr<double> MedianMs(Fn fn, cudaStream_t stream, int reps) {
  cudaEvent_t start, end;
  OSPREY_CUDA_RETURN_IF_ERROR(cudaEventCreate(&start));
  OSPREY_CUDA_RETURN_IF_ERROR(cudaEventCreate(&end));
  std::vector<double> ms;
  Status s;
  for (int i = 0; i < reps + 2 && s.ok(); ++i) {
    if (cudaEventRecord(start, stream) != cudaSuccess) break;
    s = fn();
    float t = 0;
    if (s.ok() && cudaEventRecord(end, stream) == cudaSuccess && cudaEventSynchronize(end) == cudaSuccess &&
        cudaEventElapsedTime(&t, start, end) == cudaSuccess && i >= 2) {
      ms.push_back(t);
    }
  }
  (void)cudaEventDestroy(start);
  (void)cudaEventDestroy(end);
  OSPREY_RETURN_IF_ERROR(s);
  if (ms.size() != static_cast<size_t>(reps)) return Internal("host group calibration: a timing event failed");
  return Median(std::move(ms));
}

}  // namespace

StatusOr<bool> NcclHostGroup::AllAgree(bool ok, cudaStream_t stream) {
#ifdef OSPREY_HAVE_NCCL
  OSPREY_ASSIGN_OR_RETURN(cuda::DeviceBuffer d, cuda::DeviceBuffer::Allocate(sizeof(int32_t)));
  int32_t v = ok ? 1 : 0;
  OSPREY_CUDA_RETURN_IF_ERROR(cudaMemcpy(d.data(), &v, sizeof(v), cudaMemcpyHostToDevice));
  OSPREY_RETURN_IF_ERROR(NcclStatus(ncclAllReduce(d.data(), d.data(), 1, ncclInt32, ncclMin, comm_->comm, stream), "agree"));
  OSPREY_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream));
  OSPREY_CUDA_RETURN_IF_ERROR(cudaMemcpy(&v, d.data(), sizeof(v), cudaMemcpyDeviceToHost));
  return v == 1;
#else
  (void)ok, (void)stream;
  return Internal("host group without NCCL");
#endif
}

StatusOr<std::vector<std::string>> NcclHostGroup::GatherHandles(const std::string& mine, cudaStream_t stream) {
#ifdef OSPREY_HAVE_NCCL
  const size_t bytes = mine.size();
  OSPREY_ASSIGN_OR_RETURN(cuda::DeviceBuffer d, cuda::DeviceBuffer::Allocate(bytes * local_size_));
  char* base = d.as<char>();
  OSPREY_CUDA_RETURN_IF_ERROR(cudaMemcpy(base + bytes * local_rank_, mine.data(), bytes, cudaMemcpyHostToDevice));
  OSPREY_RETURN_IF_ERROR(NcclStatus(
      ncclAllGather(base + bytes * local_rank_, base, bytes, ncclChar, comm_->comm, stream), "IPC handle all-gather"));
  OSPREY_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream));
  std::string all(bytes * local_size_, '\0');
  OSPREY_CUDA_RETURN_IF_ERROR(cudaMemcpy(all.data(), base, all.size(), cudaMemcpyDeviceToHost));
  std::vector<std::string> handles;
  for (int r = 0; r < local_size_; ++r) handles.push_back(all.substr(bytes * r, bytes));
  return handles;
#else
  (void)mine, (void)stream;
  return Internal("host group without NCCL");
#endif
}

StatusOr<AllreduceChoice> NcclHostGroup::Calibrate(size_t max_bytes, cudaStream_t stream) {
#ifdef OSPREY_HAVE_NCCL
  constexpr int kReps = 5;
  OSPREY_ASSIGN_OR_RETURN(cuda::DeviceBuffer buf, cuda::DeviceBuffer::Allocate(max_bytes));
  OSPREY_CUDA_RETURN_IF_ERROR(cudaMemset(buf.data(), 0, max_bytes));
  float* d = buf.as<float>();
  const std::vector<size_t> sizes = CalibrationSizes(max_bytes);
  std::vector<double> ms;  // nccl, ipc per size
  for (size_t bytes : sizes) {
    const size_t floats = bytes / sizeof(float);
    std::vector<OwnedRange> ranges;  // one owner per 1 / local_size of the bucket, as a plan has
    for (int r = 0; r < local_size_; ++r) {
      const size_t first = floats * r / local_size_, last = floats * (r + 1) / local_size_;
      if (last > first) ranges.push_back(OwnedRange{first, last - first, r});
    }
    OSPREY_ASSIGN_OR_RETURN(double nccl, MedianMs([&] { return NcclReduce(ranges, d, stream); }, stream, kReps));
    OSPREY_ASSIGN_OR_RETURN(double ipc, MedianMs([&] { return ipc_->AllReduce(d, floats, true, stream); }, stream,
                                                 kReps));
    ms.push_back(nccl);
    ms.push_back(ipc);
  }
  OSPREY_RETURN_IF_ERROR(ipc_->Check(stream));
  // The slowest rank's time per path and size, so every rank builds the same table.
  OSPREY_ASSIGN_OR_RETURN(cuda::DeviceBuffer all, cuda::DeviceBuffer::Allocate(ms.size() * sizeof(double)));
  OSPREY_CUDA_RETURN_IF_ERROR(cudaMemcpy(all.data(), ms.data(), ms.size() * sizeof(double), cudaMemcpyHostToDevice));
  OSPREY_RETURN_IF_ERROR(NcclStatus(ncclAllReduce(all.data(), all.data(), ms.size(), ncclFloat64, ncclMax, comm_->comm, stream),
                                    "calibration agreement"));
  OSPREY_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream));
  OSPREY_CUDA_RETURN_IF_ERROR(cudaMemcpy(ms.data(), all.data(), ms.size() * sizeof(double), cudaMemcpyDeviceToHost));
  std::vector<AllreduceTiming> timings;
  for (size_t i = 0; i < sizes.size(); ++i) timings.push_back({sizes[i], ms[2 * i] * 1e3, ms[2 * i + 1] * 1e3});
  return AllreduceChoice::FromTimings(std::move(timings));
#else
  (void)max_bytes, (void)stream;
  return Internal("host group without NCCL");
#endif
}

Status NcclHostGroup::StartIpc(const std::string& mode, size_t max_bytes, int64_t timeout_ms, cudaStream_t stream) {
  if (mode == "nccl") return Status::OK();
  cuda::IpcAllreduceOptions o;
  o.max_bytes = (std::max<size_t>(max_bytes, 4) + 3) / 4 * 4;
  o.timeout_ms = timeout_ms;
  auto made = cuda::IpcAllreduce::Create(local_rank_, local_size_, o);
  OSPREY_ASSIGN_OR_RETURN(bool created, AllAgree(made.ok(), stream));
  const std::string keep = "host_allreduce " + mode + ": local rank " + std::to_string(local_rank_) +
                           " keeps NCCL for every bucket: ";
  if (!created) {
    OSPREY_LOG_WARN("{}{}", keep, made.ok() ? "a peer could not allocate its IPC buffer" : made.status().ToString());
    return Status::OK();
  }
  ipc_ = std::move(made).value();
  OSPREY_ASSIGN_OR_RETURN(std::vector<std::string> handles, GatherHandles(ipc_->handle(), stream));
  const Status connected = ipc_->Connect(handles);
  OSPREY_ASSIGN_OR_RETURN(bool all_connected, AllAgree(connected.ok(), stream));
  if (!all_connected) {
    OSPREY_LOG_WARN("{}{}", keep, connected.ok() ? "a peer cannot map this GPU's buffer" : connected.ToString());
    ipc_.reset();
    return Status::OK();
  }
  if (mode == "ipc") {
    OSPREY_ASSIGN_OR_RETURN(choice_, AllreduceChoice::Fixed("ipc"));
  } else {
    OSPREY_ASSIGN_OR_RETURN(choice_, Calibrate(o.max_bytes, stream));
  }
  OSPREY_LOG_INFO("host group local rank {} of {}: dense buckets up to {} KiB reduce by {}", local_rank_, local_size_,
                  o.max_bytes >> 10, choice_.Describe());
  if (!choice_.uses_ipc()) ipc_.reset();
  return Status::OK();
}

Status NcclHostGroup::PollIpc() { return ipc_ ? ipc_->Poll() : Status::OK(); }

}  // namespace osprey::worker::gpu
