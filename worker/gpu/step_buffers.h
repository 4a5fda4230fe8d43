// The device and pinned host memory of the GPU loop's steps (worker/gpu_trainer.h), and the CUDA
// events that order them across the loop's streams. Private to the GPU loop (it includes the
// CUDA runtime API); the memory is owned through cuda::DeviceBuffer / cuda::PinnedBuffer.
//
// StepInput: everything one step needs on the device, prepared by the prefetch side; the loop
// rotates `ring` of them. StepGradients: one step's gradients and its gradient stages' events;
// the loop alternates two (step t uses t % 2), so the comm and pusher threads send step t's
// while the main thread computes step t+1 into the other.
//
// Buffers are allocated with at least one element, so no pointer is null (CUB reads a null
// workspace as "size query"). Errors of Allocate: ResourceExhausted (out of device or pinned
// memory, naming the buffer), Internal for other CUDA errors. The destructors destroy the
// events; the owner synchronizes its streams before (GpuTrainer's destructor).
//
// Thread-safety: plain data; the loop's StageBoard says which thread may touch which step's.
#pragma once

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <utility>
#include <vector>

#include "common/status.h"
#include "worker/cuda/codec_kernels.h"
#include "worker/data/batch.h"

namespace osprey::worker::gpu {

// *b = n elements of T on the device (at least one, see above); `what` names the buffer in the
// error.
template <typename T>
Status AllocateDevice(cuda::DeviceBuffer* b, size_t n, const char* what) {
  auto got = cuda::DeviceBuffer::Allocate(std::max<size_t>(n, 1) * sizeof(T));
  if (!got.ok()) return got.status().WithContext(what);
  *b = std::move(got).value();
  return Status::OK();
}

// The same in pinned host memory.
template <typename T>
Status AllocatePinned(cuda::PinnedBuffer* b, size_t n, const char* what) {
  auto got = cuda::PinnedBuffer::Allocate(std::max<size_t>(n, 1) * sizeof(T));
  if (!got.ok()) return got.status().WithContext(what);
  *b = std::move(got).value();
  return Status::OK();
}

// The sizes the buffers are allocated for.
struct StepSizes {
  size_t max_ids = 0;        // ids (and so distinct keys) of a step
  int max_batch = 0;
  int num_dense_features = 0;
  int dim = 0;               // floats per row
  size_t num_params = 0;     // dense parameters
  int num_servers = 1;
  bool row_cast = false;     // the row gradients are cast to 16 bits on the device
};

struct StepInput {
  StepInput() = default;
  StepInput(const StepInput&) = delete;
  StepInput& operator=(const StepInput&) = delete;
  ~StepInput();
  Status Allocate(const StepSizes& sizes);

  int64_t step = -1;
  int batch = 0;
  int num_unique = 0;
  uint64_t sparse_version = 0;  // client's table versions after this step's pulls
  uint64_t dense_version = 0;
  data::Batch host;
  cuda::PinnedBuffer h_ids, h_unique;           // uint64_t
  cuda::PinnedBuffer h_dense, h_labels, h_params;  // float
  cuda::PinnedBuffer h_slots, h_count;          // int32_t
  cuda::PinnedBuffer h_server_counts;  // int32_t; several servers: distinct keys per server (h_unique is grouped)
  cuda::DeviceBuffer d_ids, d_unique;           // uint64_t
  cuda::DeviceBuffer d_row_index, d_slots, d_count, d_server_counts;  // int32_t
  cuda::DeviceBuffer d_dense, d_labels, d_params;  // float
  // The cache misses of this step: planned by the planner stage (CacheIndex), pulled by the puller
  // stage: num_misses keys at miss_key_ptr (the host index's miss_keys or h_miss_keys), their
  // slots in d_miss_slots. miss_keys / miss_slots / h_slots / h_miss_slots: the host index's.
  size_t num_misses = 0;
  const uint64_t* miss_key_ptr = nullptr;
  std::vector<uint64_t> miss_keys;
  std::vector<int32_t> miss_slots;
  cuda::PinnedBuffer h_miss_keys;  // uint64_t: the device index's misses
  cuda::DeviceBuffer d_miss_keys;  // uint64_t
  // Device index with several servers: the misses per server (they come grouped by server), for
  // a pull without hashing; null otherwise.
  const int32_t* miss_server_counts = nullptr;
  cuda::PinnedBuffer h_miss_server_counts;  // int32_t [num_servers]
  cuda::DeviceBuffer d_miss_server_counts;
  cuda::PinnedBuffer h_miss_rows;   // float (u16 when the pulled rows are widened on the device)
  cuda::PinnedBuffer h_miss_slots;  // int32_t
  cuda::DeviceBuffer d_miss_rows;   // float (likewise)
  cuda::DeviceBuffer d_miss_slots;  // int32_t
  cudaEvent_t pulled = nullptr;    // host group: the pull stream finished; the slice broadcast follows
  cudaEvent_t ready = nullptr;     // the step's inputs are complete on the device
  cudaEvent_t gathered = nullptr;  // compute stream finished reading this step's cache slots
  cudaEvent_t bcast_start = nullptr, bcast_end = nullptr;  // host group: the parameter all-gather
  // Timed, around each stage's device work (StepTimes::device_*): the plan stream's, the
  // puller's stream's, and the compute stream's gather and forward/backward.
  cudaEvent_t plan_start = nullptr, plan_end = nullptr;
  cudaEvent_t pull_start = nullptr, pull_end = nullptr;
  cudaEvent_t compute_start = nullptr, compute_gathered = nullptr, compute_end = nullptr;
};

// The events of one gradient stage of a step: the row gradients (stage num_buckets) or a dense
// bucket (stage k < num_buckets).
struct StageEvents {
  cudaEvent_t signaled = nullptr;  // compute stream: backward finished the stage's gradients
  cudaEvent_t start = nullptr;     // comm stream, timed: around the bucket's reduce
  cudaEvent_t end = nullptr;
  cudaEvent_t done = nullptr;      // comm stream: the stage's gradients are on the host
};

struct StepGradients {
  StepGradients() = default;
  StepGradients(const StepGradients&) = delete;
  StepGradients& operator=(const StepGradients&) = delete;
  ~StepGradients();
  Status Allocate(const StepSizes& sizes, int num_stages);

  cuda::DeviceBuffer d_rows, d_dense;  // float: max_ids x dim, num_params
  cuda::DeviceBuffer d_rows_cast;      // StepSizes::row_cast: u16, max_ids x dim
  cuda::PinnedBuffer h_rows, h_dense;  // h_rows holds the u16 rows when they are cast
  std::vector<StageEvents> events;     // [num_stages]
};

}  // namespace osprey::worker::gpu
