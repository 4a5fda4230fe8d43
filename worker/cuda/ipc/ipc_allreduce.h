// IpcAllreduce: an allreduce of fp32 device buffers among the GPU workers of one host, through
// CUDA IPC (issue 19): each rank exposes one exchange buffer, every peer maps it, and one kernel
// per call copies the rank's data in, meets the peers at a flag barrier and reads their data
// directly (NVLink or PCIe peer access). Two shapes:
//  - one-shot (messages up to one_shot_max_bytes): every rank reads every peer's whole message
//    and sums it itself: one barrier, (size - 1) x n reads per rank; wins on latency.
//  - two-shot (larger): reduce-scatter, each rank sums its 1/size slice from every peer into its
//    own buffer, then a second barrier and an all-gather of the peers' summed slices: 2 x n
//    (size - 1) / size reads per rank, the bandwidth-optimal shape.
// Both sum in rank order 0..size-1 on every rank, so every rank gets the same bits (for two ranks
// the same bits as NCCL's ncclSum, the sum being commutative); `average` scales each input by
// 1 / size before the sum, as NCCL's ncclAvg does for floats.
//
// Synchronization: flags in each rank's buffer, one per (block, phase, source rank), written by
// the peers with release stores at system scope and read with acquire loads; the value is the call
// number (epoch), so nothing is ever reset. The buffer has two halves used by alternate calls:
// a rank reaching call e + 1 has finished call e - 1, so overwriting the half of call e - 1 needs
// no closing barrier. A wait that exceeds `timeout_ms` (the peer died, stopped, or called with a
// different count) records the peer in an error word and gives up; Check() turns it into
// DeadlineExceeded and the instance refuses further calls (the ranks' epochs no longer agree).
//
// Host API only (no CUDA headers): `stream` is a cudaStream_t as void*. The kernels are written
// for, and tested on, sm_90; the two-process test also runs with both ranks on one GPU.
//
// Thread-safety: one instance per rank, its calls ordered on one stream (the barrier per call
// depends on it). Every rank makes the same sequence of calls with the same counts.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "common/status.h"

namespace osprey::cuda {

struct IpcAllreduceOptions {
  size_t max_bytes = size_t{64} << 20;          // the largest message (per half of the buffer)
  size_t one_shot_max_bytes = size_t{256} << 10;  // one-shot at or below, two-shot above
  int64_t timeout_ms = 10000;                   // how long a rank waits for a peer at a barrier
  // Blocks per call (each meets its peers' same block). A waiting block spins on an SM that
  // backward's kernels share, so fewer than the SMs; 0: min(36, SMs), vLLM's tuned custom
  // allreduce default on A100/H100 NVLink (not yet tuned here: osprey bench host-allreduce
  // --blocks sweeps it on a two-GPU machine).
  int blocks = 0;
};

// Largest number of ranks and of blocks per call (the flag area is sized for them).
inline constexpr int kIpcMaxRanks = 8;
inline constexpr int kIpcMaxBlocks = 256;

class IpcAllreduce {
 public:
  // Allocates this rank's exchange buffer (2 x max_bytes plus flags) on the current device and
  // exports it. Errors: InvalidArgument for a rank outside [0, size), a size outside
  // [2, kIpcMaxRanks] or bad options; ResourceExhausted / Internal from CUDA.
  static StatusOr<std::unique_ptr<IpcAllreduce>> Create(int rank, int size, const IpcAllreduceOptions& options);
  ~IpcAllreduce();
  IpcAllreduce(const IpcAllreduce&) = delete;
  IpcAllreduce& operator=(const IpcAllreduce&) = delete;

  int rank() const { return rank_; }
  int size() const { return size_; }
  const IpcAllreduceOptions& options() const { return options_; }
  // This rank's handle: opaque bytes for the peers' Connect (passed through the coordinator, a
  // file, ...). It names the buffer, the rank, the group size and the options that must agree.
  const std::string& handle() const { return handle_; }

  // Maps the peers' buffers: handles[i] is rank i's handle() (this rank's own is checked too).
  // Errors: InvalidArgument for a malformed handle or one whose group, rank or options differ
  // from this rank's (named); FailedPrecondition when a peer's GPU is not reachable from this
  // one (no peer access: use NCCL instead); Internal from CUDA.
  Status Connect(const std::vector<std::string>& handles);

  // Enqueues the allreduce of `count` floats at `data` (device memory, 4-byte aligned, in place)
  // on `stream`: the sum over the ranks, or with `average` the mean. Errors (returned at once):
  // FailedPrecondition before Connect or after a failed call; InvalidArgument when count x 4
  // exceeds max_bytes; Internal for a launch failure. A peer that does not arrive shows in Check.
  Status AllReduce(float* data, size_t count, bool average, void* stream);

  // Waits for `stream` and reports the calls enqueued so far: DeadlineExceeded naming the peer
  // and the call a barrier gave up on, or a CUDA error.
  Status Check(void* stream);

  // Without waiting: DeadlineExceeded once a call that already ran gave up on a peer (its
  // results are not to be used), OK otherwise. For a loop that already waits for the call's
  // completion (an event) before it uses the results.
  Status Poll();

  // Calls made so far (the epoch of the last one).
  uint32_t calls() const { return epoch_; }

 private:
  struct Impl;
  IpcAllreduce(int rank, int size, const IpcAllreduceOptions& options, std::unique_ptr<Impl> impl);
  Status Failure(uint32_t code, uint32_t epoch);  // records and returns the DeadlineExceeded

  const int rank_, size_;
  const IpcAllreduceOptions options_;
  std::unique_ptr<Impl> impl_;
  std::string handle_;
  uint32_t epoch_ = 0;
  bool connected_ = false;
  Status failed_;
};

}  // namespace osprey::cuda
