#include "worker/cuda/ipc/ipc_allreduce.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <cstring>

#include "worker/cuda/cuda_check.cuh"
#include "worker/cuda/ipc/ipc_args.h"

namespace osprey::cuda {
namespace {

using ipc_internal::Args;

constexpr size_t kFlagBytes = size_t{64} << 10;  // the flag area, ahead of the two data halves
static_assert(sizeof(uint32_t) * kIpcMaxBlocks * 2 * kIpcMaxRanks <= kFlagBytes, "flag area too small");

// What a handle carries: the buffer and everything the peers must agree on.
struct HandleWire {
  char magic[8];
  int32_t rank, size, blocks, pad;
  uint64_t max_bytes, one_shot_max_bytes;
  char bus_id[32];  // PCI bus id of the rank's GPU
  cudaIpcMemHandle_t mem;
};
constexpr char kMagic[8] = {'O', 'S', 'P', 'I', 'P', 'C', '1', 0};

std::string BusId(int device) {
  char bus[32] = {};
  if (cudaDeviceGetPCIBusId(bus, sizeof(bus), device) != cudaSuccess) return "?";
  return bus;
}

}  // namespace

struct IpcAllreduce::Impl {
  int device = 0;
  int blocks = 0;
  size_t half_bytes = 0;
  char* base = nullptr;                       // this rank's buffer: flags, then two halves
  char* peer_base[kIpcMaxRanks] = {};         // mapped peers' buffers (null for this rank)
  uint32_t* d_error = nullptr;                // 2 words
  uint32_t* h_error = nullptr;                // 2 words of mapped host memory
  uint32_t* h_error_dev = nullptr;            // their device address
  ~Impl() {
    if (h_error != nullptr) (void)cudaFreeHost(h_error);
    for (char* p : peer_base) {
      if (p != nullptr) (void)cudaIpcCloseMemHandle(p);
    }
    if (base != nullptr) (void)cudaFree(base);
    if (d_error != nullptr) (void)cudaFree(d_error);
  }
  char* BaseOf(int r) const { return peer_base[r] != nullptr ? peer_base[r] : base; }
};

IpcAllreduce::IpcAllreduce(int rank, int size, const IpcAllreduceOptions& options, std::unique_ptr<Impl> impl)
    : rank_(rank), size_(size), options_(options), impl_(std::move(impl)) {}

IpcAllreduce::~IpcAllreduce() = default;

StatusOr<std::unique_ptr<IpcAllreduce>> IpcAllreduce::Create(int rank, int size, const IpcAllreduceOptions& o) {
  if (size < 2 || size > kIpcMaxRanks) {
    return InvalidArgument("IPC allreduce: " + std::to_string(size) + " ranks (2 to " + std::to_string(kIpcMaxRanks) +
                           " supported)");
  }
  if (rank < 0 || rank >= size) {
    return InvalidArgument("IPC allreduce: rank " + std::to_string(rank) + " of " + std::to_string(size));
  }
  if (o.max_bytes == 0 || o.max_bytes % 4 != 0) {
    return InvalidArgument("IPC allreduce: max_bytes " + std::to_string(o.max_bytes) + " (a positive multiple of 4)");
  }
  if (o.timeout_ms <= 0) return InvalidArgument("IPC allreduce: timeout_ms must be positive");
  if (o.blocks < 0 || o.blocks > kIpcMaxBlocks) {
    return InvalidArgument("IPC allreduce: blocks " + std::to_string(o.blocks) + " (0 to " +
                           std::to_string(kIpcMaxBlocks) + ")");
  }
  auto impl = std::make_unique<Impl>();
  OSPREY_CUDA_RETURN_IF_ERROR(cudaGetDevice(&impl->device));
  int sms = 0;
  OSPREY_CUDA_RETURN_IF_ERROR(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, impl->device));
  impl->blocks = o.blocks > 0 ? o.blocks : std::min({sms, 36, kIpcMaxBlocks});
  impl->half_bytes = (o.max_bytes + 255) / 256 * 256;
  OSPREY_CUDA_RETURN_IF_ERROR(cudaMalloc(&impl->base, kFlagBytes + 2 * impl->half_bytes));
  OSPREY_CUDA_RETURN_IF_ERROR(cudaMemset(impl->base, 0, kFlagBytes));
  OSPREY_CUDA_RETURN_IF_ERROR(cudaMalloc(&impl->d_error, 2 * sizeof(uint32_t)));
  OSPREY_CUDA_RETURN_IF_ERROR(cudaMemset(impl->d_error, 0, 2 * sizeof(uint32_t)));
  OSPREY_CUDA_RETURN_IF_ERROR(cudaHostAlloc(&impl->h_error, 2 * sizeof(uint32_t), cudaHostAllocMapped));
  impl->h_error[0] = impl->h_error[1] = 0;
  OSPREY_CUDA_RETURN_IF_ERROR(cudaHostGetDevicePointer(&impl->h_error_dev, impl->h_error, 0));
  OSPREY_CUDA_RETURN_IF_ERROR(cudaDeviceSynchronize());  // the flags are zero before any peer sees them
  HandleWire w = {};
  std::memcpy(w.magic, kMagic, sizeof(kMagic));
  w.rank = rank;
  w.size = size;
  w.blocks = impl->blocks;
  w.max_bytes = o.max_bytes;
  w.one_shot_max_bytes = o.one_shot_max_bytes;
  std::strncpy(w.bus_id, BusId(impl->device).c_str(), sizeof(w.bus_id) - 1);
  OSPREY_CUDA_RETURN_IF_ERROR(cudaIpcGetMemHandle(&w.mem, impl->base));
  std::unique_ptr<IpcAllreduce> ar(new IpcAllreduce(rank, size, o, std::move(impl)));
  ar->handle_.assign(reinterpret_cast<const char*>(&w), sizeof(w));
  return StatusOr<std::unique_ptr<IpcAllreduce>>(std::move(ar));
}

Status IpcAllreduce::Connect(const std::vector<std::string>& handles) {
  if (connected_) return FailedPrecondition("IPC allreduce: already connected");
  if (handles.size() != static_cast<size_t>(size_)) {
    return InvalidArgument("IPC allreduce: " + std::to_string(handles.size()) + " handles for " +
                           std::to_string(size_) + " ranks");
  }
  const std::string mine = BusId(impl_->device);
  for (int r = 0; r < size_; ++r) {
    const std::string who = "IPC allreduce (rank " + std::to_string(rank_) + "): the handle of rank " +
                            std::to_string(r);
    HandleWire w;
    if (handles[r].size() != sizeof(w)) {
      return InvalidArgument(who + " has " + std::to_string(handles[r].size()) + " bytes, not " +
                             std::to_string(sizeof(w)));
    }
    std::memcpy(&w, handles[r].data(), sizeof(w));
    if (std::memcmp(w.magic, kMagic, sizeof(kMagic)) != 0) return InvalidArgument(who + " is not an IPC handle");
    if (w.rank != r || w.size != size_) {
      return InvalidArgument(who + " says rank " + std::to_string(w.rank) + " of " + std::to_string(w.size));
    }
    if (w.blocks != impl_->blocks || w.max_bytes != options_.max_bytes ||
        w.one_shot_max_bytes != options_.one_shot_max_bytes) {
      return InvalidArgument(who + " disagrees on blocks/max_bytes/one_shot_max_bytes (" + std::to_string(w.blocks) +
                             "/" + std::to_string(w.max_bytes) + "/" + std::to_string(w.one_shot_max_bytes) +
                             " vs " + std::to_string(impl_->blocks) + "/" + std::to_string(options_.max_bytes) + "/" +
                             std::to_string(options_.one_shot_max_bytes) + ")");
    }
    if (r == rank_) continue;
    const std::string theirs(w.bus_id, strnlen(w.bus_id, sizeof(w.bus_id)));
    if (theirs != mine) {
      int peer_device = -1;
      int can = 0;
      if (cudaDeviceGetByPCIBusId(&peer_device, theirs.c_str()) == cudaSuccess &&
          cudaDeviceCanAccessPeer(&can, impl_->device, peer_device) == cudaSuccess && can == 0) {
        return FailedPrecondition(who + ": GPU " + theirs + " has no peer access from GPU " + mine +
                                  " (use NCCL for this host)");
      }
      (void)cudaGetLastError();
    }
    void* p = nullptr;
    const cudaError_t err = cudaIpcOpenMemHandle(&p, w.mem, cudaIpcMemLazyEnablePeerAccess);
    if (err != cudaSuccess) {
      (void)cudaGetLastError();
      return FailedPrecondition(who + ": cannot map its buffer on GPU " + theirs + " from GPU " + mine + ": " +
                                cudaGetErrorString(err) + " (use NCCL for this host)");
    }
    impl_->peer_base[r] = static_cast<char*>(p);
  }
  connected_ = true;
  return Status::OK();
}

Status IpcAllreduce::AllReduce(float* data, size_t count, bool average, void* stream) {
  if (!failed_.ok()) return FailedPrecondition("IPC allreduce failed earlier: " + failed_.ToString());
  if (!connected_) return FailedPrecondition("IPC allreduce: AllReduce before Connect");
  if (count > options_.max_bytes / 4) {
    return InvalidArgument("IPC allreduce: " + std::to_string(count) + " floats exceed max_bytes " +
                           std::to_string(options_.max_bytes));
  }
  if (count == 0) return Status::OK();  // no barrier: every rank skips it alike
  if (data == nullptr || reinterpret_cast<uintptr_t>(data) % 4 != 0) {
    return InvalidArgument("IPC allreduce: data must be 4-byte aligned device memory");
  }
  Args a = {};
  a.data = data;
  a.n = count;
  a.epoch = ++epoch_;
  const size_t half = kFlagBytes + (a.epoch & 1u) * impl_->half_bytes;
  for (int r = 0; r < size_; ++r) {
    a.peer[r] = reinterpret_cast<const float*>(impl_->BaseOf(r) + half);
    a.peer_flags[r] = reinterpret_cast<uint32_t*>(impl_->BaseOf(r));
  }
  a.own = reinterpret_cast<float*>(impl_->base + half);
  a.my_flags = reinterpret_cast<uint32_t*>(impl_->base);
  a.error = impl_->d_error;
  a.host_error = impl_->h_error_dev;
  a.rank = rank_;
  a.size = size_;
  a.average = average;
  a.scale = 1.0f / static_cast<float>(size_);
  a.timeout_ns = static_cast<uint64_t>(options_.timeout_ms) * 1000000ull;
  // Every rank launches the same grid: block b meets the peers' block b.
  ipc_internal::LaunchAllreduce(a, count * 4 <= options_.one_shot_max_bytes, impl_->blocks,
                                static_cast<cudaStream_t>(stream));
  OSPREY_CUDA_RETURN_IF_LAUNCH_FAILED();
  return Status::OK();
}

Status IpcAllreduce::Poll() {
  if (!failed_.ok()) return failed_;
  const volatile uint32_t* h = impl_->h_error;
  const uint32_t code = h[0];
  if (code == 0) return Status::OK();
  return Failure(code, h[1]);
}

Status IpcAllreduce::Failure(uint32_t code, uint32_t epoch) {
  const int peer = static_cast<int>(code & 0xFFu) - 1;
  const int phase = static_cast<int>(code >> 8);
  failed_ = DeadlineExceeded("IPC allreduce: rank " + std::to_string(rank_) + " waited more than " +
                             std::to_string(options_.timeout_ms) + " ms for rank " + std::to_string(peer) +
                             " at call " + std::to_string(epoch) + (phase == 0 ? "" : " (all-gather barrier)") +
                             ": the peer died, stopped, or made different calls");
  return failed_;
}

Status IpcAllreduce::Check(void* stream) {
  if (!failed_.ok()) return failed_;
  uint32_t err[2] = {0, 0};
  cudaError_t e = cudaStreamSynchronize(static_cast<cudaStream_t>(stream));
  if (e == cudaSuccess) e = cudaMemcpy(err, impl_->d_error, sizeof(err), cudaMemcpyDeviceToHost);
  if (e != cudaSuccess) {
    // A fault in the kernel: most likely a peer's buffer went away with its process.
    std::string peers;
    for (int r = 0; r < size_; ++r) {
      if (r != rank_) peers += (peers.empty() ? "rank " : ", rank ") + std::to_string(r);
    }
    failed_ = CudaStatus(e, "IPC allreduce", __FILE__, __LINE__)
                  .WithContext("IPC allreduce: rank " + std::to_string(rank_) + " after call " + std::to_string(epoch_) +
                               " (did a peer die? " + peers + ")");
    return failed_;
  }
  if (err[0] == 0) return Status::OK();
  return Failure(err[0], err[1]);
}

}  // namespace osprey::cuda