// worker.check_pulls: a diagnosis mode of the GPU loop that turns a value a step reads before it
// was written into an error naming the step and the stage, instead of a silently wrong model or a
// non-finite loss many steps later. Costs a host scan of each pull and a device count (with a
// stream synchronization) of each gather: for finding faults, not for benchmarks.
#include <cmath>
#include <cstring>
#include <string>

#include "worker/cuda/cuda_check.cuh"
#include "worker/cuda/sparse/sparse_kernels.h"
#include "worker/gpu/gpu_trainer_impl.h"

namespace osprey::worker::gpu {
namespace {

// True when the 16-bit value (fp16 or bf16) has the all-ones exponent: Inf or NaN.
bool NonFinite16(uint16_t bits, codec::ValueType type) {
  const uint16_t exponent = type == codec::ValueType::kBf16 ? 0x7F80 : 0x7C00;
  return (bits & exponent) == exponent;
}

// Index of the first non-finite value of n, and how many there are.
template <typename T, typename Bad>
size_t CountBad(const T* v, size_t n, Bad bad, size_t* first) {
  size_t count = 0;
  *first = n;
  for (size_t i = 0; i < n; ++i) {
    if (!bad(v[i])) continue;
    if (count++ == 0) *first = i;
  }
  return count;
}

}  // namespace

void GpuTrainer::PoisonPullTargets(StepInput* in, size_t rows) const {
  const size_t value_bytes = opt_.row_widen != codec::ValueType::kFp32 ? sizeof(uint16_t) : sizeof(float);
  std::memset(in->h_miss_rows.data(), 0xFF, rows * dim_ * value_bytes);  // all-ones: NaN in every format
  if (!host_group_) std::memset(in->h_params.data(), 0xFF, num_params_ * sizeof(float));
}

Status GpuTrainer::CheckPulled(int64_t step, const StepInput& in, size_t rows) const {
  const size_t n = rows * dim_;
  size_t first = 0, bad = 0;
  if (opt_.row_widen != codec::ValueType::kFp32) {
    const codec::ValueType type = opt_.row_widen;
    bad = CountBad(in.h_miss_rows.as<uint16_t>(), n, [type](uint16_t b) { return NonFinite16(b, type); }, &first);
  } else {
    bad = CountBad(in.h_miss_rows.as<float>(), n, [](float v) { return !std::isfinite(v); }, &first);
  }
  if (bad > 0) {
    return Internal("worker.check_pulls: step " + std::to_string(step) + ": " + std::to_string(bad) +
                    " values of the " + std::to_string(rows) + " pulled rows were not written by the pull (first: row " +
                    std::to_string(first / dim_) + ", key " + std::to_string(in.miss_key_ptr[first / dim_]) + ")");
  }
  if (host_group_) return Status::OK();  // the other ranks' slices come with the broadcast
  bad = CountBad(in.h_params.as<float>(), num_params_, [](float v) { return !std::isfinite(v); }, &first);
  if (bad > 0) {
    return Internal("worker.check_pulls: step " + std::to_string(step) + ": " + std::to_string(bad) + " of the " +
                    std::to_string(num_params_) + " dense parameters were not written by the pull (first: " +
                    std::to_string(first) + ")");
  }
  return Status::OK();
}

Status GpuTrainer::CheckGathered(int64_t step, int rows) {
  OSPREY_CUDA_RETURN_IF_ERROR(cudaMemsetAsync(d_check_.data(), 0, sizeof(int32_t), compute_stream_));
  OSPREY_RETURN_IF_ERROR(cuda::CountNonFinite(d_rows_.as<float>(), static_cast<int64_t>(rows) * dim_,
                                              d_check_.as<int32_t>(), compute_stream_));
  OSPREY_CUDA_RETURN_IF_ERROR(
      cudaMemcpyAsync(h_check_.data(), d_check_.data(), sizeof(int32_t), cudaMemcpyDeviceToHost, compute_stream_));
  OSPREY_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(compute_stream_));
  const int32_t bad = h_check_.as<int32_t>()[0];
  if (bad > 0) {
    return Internal("worker.check_pulls: step " + std::to_string(step) + ": " + std::to_string(bad) +
                    " non-finite values in the " + std::to_string(rows) +
                    " rows gathered from the cache: their slots were read before a pull wrote them");
  }
  return Status::OK();
}

}  // namespace osprey::worker::gpu
