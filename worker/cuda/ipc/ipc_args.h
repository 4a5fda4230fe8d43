// The kernel side of IpcAllreduce (ipc_allreduce.h): the arguments of one call and the launch
// of its kernel (ipc_kernels.cu). Private to worker/cuda/ipc.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "worker/cuda/ipc/ipc_allreduce.h"

namespace osprey::cuda::ipc_internal {

// Floats per unit of work: 4 per thread of a 256-thread block. Block b of every rank handles the
// units b, b + grid, ... of a call, so the blocks that meet at a barrier cover the same data.
inline constexpr int kThreads = 256;
inline constexpr size_t kUnit = kThreads * 4;

struct Args {
  float* data;
  size_t n;
  float* own;                              // this rank's half for this call
  const float* peer[kIpcMaxRanks];         // every rank's half (peer[rank] == own)
  uint32_t* my_flags;                      // flag area of this rank's buffer
  uint32_t* peer_flags[kIpcMaxRanks];      // flag area of each rank's buffer
  uint32_t* error;                         // local: (peer + 1) | phase << 8, then the epoch
  volatile uint32_t* host_error;           // mapped host memory: the same code, for Poll
  uint32_t epoch;
  int rank, size;
  float scale;
  bool average;
  uint64_t timeout_ns;
};

// Enqueues the call's kernel: one-shot or two-shot, vectorized when `data` is 16-byte aligned.
void LaunchAllreduce(const Args& a, bool one_shot, int grid, cudaStream_t stream);

}  // namespace osprey::cuda::ipc_internal
