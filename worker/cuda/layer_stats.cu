// LayerStepStats: one block per layer reduces the sampled raw norm and, over the layer's run of
// the sorted sent pairs (found by binary search), the sent norm, the dot product and the count.
#include <cub/block/block_reduce.cuh>

#include "common/codec/codec_math.h"
#include "worker/cuda/cuda_check.cuh"
#include "worker/cuda/layer_kernels.h"

namespace osprey::cuda {
namespace {

constexpr int kStatsThreads = 256;

__device__ uint64_t LowerBound(const uint32_t* a, uint64_t n, uint32_t x) {
  uint64_t lo = 0, hi = n;
  while (lo < hi) {
    const uint64_t mid = (lo + hi) / 2;
    if (a[mid] < x) lo = mid + 1; else hi = mid;
  }
  return lo;
}

__device__ float LoadValue(const void* values, codec::ValueType type, uint64_t j) {
  if (type == codec::ValueType::kFp16) return codec::HalfBitsToFloat(static_cast<const uint16_t*>(values)[j]);
  if (type == codec::ValueType::kBf16) return codec::Bf16BitsToFloat(static_cast<const uint16_t*>(values)[j]);
  return static_cast<const float*>(values)[j];
}

__global__ void __launch_bounds__(kStatsThreads)
    LayerStatsKernel(const float* g, const uint32_t* begin, const uint32_t* indices, const void* values,
                     codec::ValueType type, uint64_t count, uint32_t max_samples, codec::LayerStepStats* out) {
  using Reduce = cub::BlockReduce<double, kStatsThreads>;
  using ReduceU = cub::BlockReduce<uint32_t, kStatsThreads>;
  __shared__ typename Reduce::TempStorage red;
  __shared__ typename ReduceU::TempStorage redu;
  __shared__ uint64_t range[2];
  const uint32_t l = blockIdx.x, b0 = begin[l], b1 = begin[l + 1], size = b1 - b0;
  const uint32_t stride = max_samples == 0 || size <= max_samples ? 1u : (size + max_samples - 1) / max_samples;
  const uint32_t samples = size == 0 ? 0u : (size + stride - 1) / stride;
  double raw = 0;
  for (uint32_t s = threadIdx.x; s < samples; s += kStatsThreads) {
    const double x = g[b0 + static_cast<uint64_t>(s) * stride];
    raw += x * x;
  }
  raw = Reduce(red).Sum(raw);
  if (threadIdx.x == 0) {
    range[0] = LowerBound(indices, count, b0);
    range[1] = LowerBound(indices, count, b1);
  }
  __syncthreads();
  double sent_sq = 0, dot = 0;
  uint32_t sent = 0;
  for (uint64_t j = range[0] + threadIdx.x; j < range[1]; j += kStatsThreads) {
    const double v = LoadValue(values, type, j);
    sent_sq += v * v;
    dot += static_cast<double>(g[indices[j]]) * v;
    sent += v != 0.0 ? 1u : 0u;
  }
  __syncthreads();
  sent_sq = Reduce(red).Sum(sent_sq);
  __syncthreads();
  dot = Reduce(red).Sum(dot);
  sent = ReduceU(redu).Sum(sent);
  if (threadIdx.x == 0) {
    out[l].raw_sq = samples > 0 ? raw * (static_cast<double>(size) / static_cast<double>(samples)) : 0.0;
    out[l].sent_sq = sent_sq;
    out[l].dot = dot;
    out[l].sent = sent;
  }
}

}  // namespace

Status LayerStepStats(const float* d_g, const uint32_t* d_begin, uint32_t num_layers, const uint32_t* d_indices,
                      const void* d_values, codec::ValueType type, uint64_t count, uint32_t max_samples,
                      codec::LayerStepStats* d_out, void* stream) {
  if (d_g == nullptr || d_begin == nullptr || d_out == nullptr || (count > 0 && (d_indices == nullptr || d_values == nullptr))) {
    return InvalidArgument("LayerStepStats: null device pointer");
  }
  if (num_layers == 0) return Status::OK();
  LayerStatsKernel<<<num_layers, kStatsThreads, 0, static_cast<cudaStream_t>(stream)>>>(
      d_g, d_begin, d_indices, d_values, type, count, max_samples, d_out);
  OSPREY_CUDA_RETURN_IF_LAUNCH_FAILED();
  return Status::OK();
}

}  // namespace osprey::cuda
