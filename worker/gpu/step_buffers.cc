#include "worker/gpu/step_buffers.h"

#include <algorithm>
#include <utility>

#include "worker/cuda/cuda_check.cuh"

namespace osprey::worker::gpu {
namespace {

void DestroyEvents(std::initializer_list<cudaEvent_t> events) {
  for (cudaEvent_t e : events) {
    if (e) cudaEventDestroy(e);
  }
}

}  // namespace

StepInput::~StepInput() {
  DestroyEvents({pulled, ready, gathered, bcast_start, bcast_end, plan_start, plan_end, pull_start, pull_end,
                 compute_start, compute_gathered, compute_end});
}

Status StepInput::Allocate(const StepSizes& z) {
  const size_t ids = z.max_ids, row_floats = z.max_ids * z.dim;
  const size_t dense_floats = static_cast<size_t>(z.max_batch) * z.num_dense_features;
  miss_keys.reserve(ids);
  miss_slots.reserve(ids);
  OSPREY_RETURN_IF_ERROR(AllocatePinned<float>(&h_miss_rows, row_floats, "pulled rows"));
  OSPREY_RETURN_IF_ERROR(AllocatePinned<int32_t>(&h_miss_slots, ids, "pulled slots"));
  OSPREY_RETURN_IF_ERROR(AllocateDevice<float>(&d_miss_rows, row_floats, "pulled rows"));
  OSPREY_RETURN_IF_ERROR(AllocateDevice<int32_t>(&d_miss_slots, ids, "pulled slots"));
  OSPREY_RETURN_IF_ERROR(AllocatePinned<uint64_t>(&h_miss_keys, ids, "pulled keys"));
  OSPREY_RETURN_IF_ERROR(AllocateDevice<uint64_t>(&d_miss_keys, ids, "pulled keys"));
  OSPREY_RETURN_IF_ERROR(AllocatePinned<int32_t>(&h_miss_server_counts, z.num_servers, "misses per server"));
  OSPREY_RETURN_IF_ERROR(AllocateDevice<int32_t>(&d_miss_server_counts, z.num_servers, "misses per server"));
  OSPREY_RETURN_IF_ERROR(AllocatePinned<uint64_t>(&h_ids, ids, "ids"));
  OSPREY_RETURN_IF_ERROR(AllocatePinned<uint64_t>(&h_unique, ids, "keys"));
  OSPREY_RETURN_IF_ERROR(AllocatePinned<float>(&h_dense, dense_floats, "dense features"));
  OSPREY_RETURN_IF_ERROR(AllocatePinned<float>(&h_labels, z.max_batch, "labels"));
  OSPREY_RETURN_IF_ERROR(AllocatePinned<float>(&h_params, z.num_params, "dense parameters"));
  OSPREY_RETURN_IF_ERROR(AllocatePinned<int32_t>(&h_slots, ids, "slots"));
  OSPREY_RETURN_IF_ERROR(AllocatePinned<int32_t>(&h_count, 1, "count"));
  OSPREY_RETURN_IF_ERROR(AllocatePinned<int32_t>(&h_server_counts, z.num_servers, "server counts"));
  OSPREY_RETURN_IF_ERROR(AllocateDevice<int32_t>(&d_server_counts, z.num_servers, "server counts"));
  OSPREY_RETURN_IF_ERROR(AllocateDevice<uint64_t>(&d_ids, ids, "ids"));
  OSPREY_RETURN_IF_ERROR(AllocateDevice<uint64_t>(&d_unique, ids, "keys"));
  OSPREY_RETURN_IF_ERROR(AllocateDevice<int32_t>(&d_row_index, ids, "row index"));
  OSPREY_RETURN_IF_ERROR(AllocateDevice<int32_t>(&d_slots, ids, "slots"));
  OSPREY_RETURN_IF_ERROR(AllocateDevice<int32_t>(&d_count, 1, "count"));
  OSPREY_RETURN_IF_ERROR(AllocateDevice<float>(&d_dense, dense_floats, "dense features"));
  OSPREY_RETURN_IF_ERROR(AllocateDevice<float>(&d_labels, z.max_batch, "labels"));
  OSPREY_RETURN_IF_ERROR(AllocateDevice<float>(&d_params, z.num_params, "dense parameters"));
  OSPREY_CUDA_RETURN_IF_ERROR(cudaEventCreateWithFlags(&pulled, cudaEventDisableTiming));
  OSPREY_CUDA_RETURN_IF_ERROR(cudaEventCreateWithFlags(&ready, cudaEventDisableTiming));
  OSPREY_CUDA_RETURN_IF_ERROR(cudaEventCreateWithFlags(&gathered, cudaEventDisableTiming));
  OSPREY_CUDA_RETURN_IF_ERROR(cudaEventCreate(&bcast_start));
  OSPREY_CUDA_RETURN_IF_ERROR(cudaEventCreate(&bcast_end));
  for (cudaEvent_t* e : {&plan_start, &plan_end, &pull_start, &pull_end, &compute_start, &compute_gathered,
                         &compute_end}) {
    OSPREY_CUDA_RETURN_IF_ERROR(cudaEventCreate(e));
  }
  return Status::OK();
}

StepGradients::~StepGradients() {
  for (const StageEvents& e : events) DestroyEvents({e.signaled, e.start, e.end, e.done});
}

Status StepGradients::Allocate(const StepSizes& z, int num_stages) {
  const size_t row_floats = z.max_ids * z.dim;
  OSPREY_RETURN_IF_ERROR(AllocateDevice<float>(&d_rows, row_floats, "row gradients"));
  OSPREY_RETURN_IF_ERROR(AllocateDevice<float>(&d_dense, z.num_params, "dense gradient"));
  if (z.row_cast) OSPREY_RETURN_IF_ERROR(AllocateDevice<uint16_t>(&d_rows_cast, row_floats, "16-bit row gradients"));
  OSPREY_RETURN_IF_ERROR(AllocatePinned<float>(&h_rows, row_floats, "row gradients"));
  OSPREY_RETURN_IF_ERROR(AllocatePinned<float>(&h_dense, z.num_params, "dense gradient"));
  events.resize(num_stages);
  for (StageEvents& e : events) {
    OSPREY_CUDA_RETURN_IF_ERROR(cudaEventCreateWithFlags(&e.signaled, cudaEventDisableTiming));
    OSPREY_CUDA_RETURN_IF_ERROR(cudaEventCreate(&e.start));
    OSPREY_CUDA_RETURN_IF_ERROR(cudaEventCreate(&e.end));
    OSPREY_CUDA_RETURN_IF_ERROR(cudaEventCreateWithFlags(&e.done, cudaEventDisableTiming));
  }
  return Status::OK();
}

}  // namespace osprey::worker::gpu
