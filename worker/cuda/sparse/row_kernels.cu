// GatherRows / ScatterRows: one element (a float4 or a float) per thread, grid-stride. Memory
// bound; the row's slot is re-read by each thread of the row but comes from L1.
#include <cstdint>
#include <string>

#include "common/codec/codec_math.h"
#include "worker/cuda/sparse/sparse_check.cuh"
#include "worker/cuda/sparse/sparse_kernels.h"

namespace osprey::cuda {
namespace {

constexpr int kThreads = 256;
constexpr int64_t kMaxBlocks = 1 << 20;  // grid-stride beyond: enough blocks to fill any device

// vdim: row width in V elements. Index (of the compact side): 32-bit when n * vdim fits, which
// makes the division cheaper; the table side is always addressed in 64 bits (slot * vdim).
template <typename V, typename Index, bool kGather>
__global__ void CopyRowsKernel(const V* __restrict__ src, const int32_t* __restrict__ slots, Index total, Index vdim,
                               V* __restrict__ dst) {
  const Index stride = static_cast<Index>(gridDim.x) * blockDim.x;
  for (Index e = static_cast<Index>(blockIdx.x) * blockDim.x + threadIdx.x; e < total; e += stride) {
    const Index row = e / vdim;
    const Index col = e - row * vdim;
    const int64_t slot_elem = static_cast<int64_t>(slots[row]) * vdim + col;
    if (kGather) {
      dst[e] = src[slot_elem];
    } else {
      dst[slot_elem] = src[e];
    }
  }
}

template <typename V, bool kGather>
Status LaunchCopy(const void* src, const int32_t* slots, int n, int64_t vdim, void* dst, cudaStream_t s) {
  const int64_t total = static_cast<int64_t>(n) * vdim;
  int64_t blocks = (total + kThreads - 1) / kThreads;
  if (blocks > kMaxBlocks) blocks = kMaxBlocks;
  const auto* in = static_cast<const V*>(src);
  auto* out = static_cast<V*>(dst);
  if (total <= INT32_MAX) {
    CopyRowsKernel<V, uint32_t, kGather><<<static_cast<unsigned>(blocks), kThreads, 0, s>>>(
        in, slots, static_cast<uint32_t>(total), static_cast<uint32_t>(vdim), out);
  } else {
    CopyRowsKernel<V, int64_t, kGather><<<static_cast<unsigned>(blocks), kThreads, 0, s>>>(in, slots, total, vdim, out);
  }
  OSPREY_SPARSE_RETURN_IF_LAUNCH_FAILED();
  return Status();
}

// Both directions: checks the arguments, then picks the float4 or the scalar kernel.
template <bool kGather>
Status CopyRows(const char* what, const void* src, const int32_t* d_slots, int n, int dim, void* dst, void* stream) {
  if (n < 0) return InvalidArgument(std::string(what) + ": n " + std::to_string(n) + " must be >= 0");
  if (dim < 1) return InvalidArgument(std::string(what) + ": dim " + std::to_string(dim) + " must be >= 1");
  if (n == 0) return Status();
  if (src == nullptr || d_slots == nullptr || dst == nullptr) {
    return InvalidArgument(std::string(what) + ": null pointer with n " + std::to_string(n));
  }
  const cudaStream_t s = static_cast<cudaStream_t>(stream);
  const bool vec4 =
      dim % 4 == 0 && reinterpret_cast<uintptr_t>(src) % 16 == 0 && reinterpret_cast<uintptr_t>(dst) % 16 == 0;
  if (vec4) return LaunchCopy<float4, kGather>(src, d_slots, n, dim / 4, dst, s);
  return LaunchCopy<float, kGather>(src, d_slots, n, dim, dst, s);
}

// The row casts of common/codec/row_cast.h, bit for bit (codec_math.h's saturating conversions).
template <bool kBf16>
__global__ void CastRowValuesKernel(const float* __restrict__ in, int64_t n, uint16_t* __restrict__ out) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    out[i] = kBf16 ? codec::SaturatingBf16Bits(in[i]) : codec::SaturatingHalfBits(in[i]);
  }
}

// d_table[slots[row] * dim + col] = widen(in[row * dim + col]): pulled 16-bit rows into their
// cache slots, widened as codec::WidenRowValues does.
template <bool kBf16>
__global__ void ScatterWidenKernel(const uint16_t* __restrict__ in, const int32_t* __restrict__ slots, int64_t total,
                                   int64_t dim, float* __restrict__ table) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t e = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; e < total; e += stride) {
    const int64_t row = e / dim;
    const float v = kBf16 ? codec::Bf16BitsToFloat(in[e]) : codec::HalfBitsToFloat(in[e]);
    table[static_cast<int64_t>(slots[row]) * dim + (e - row * dim)] = v;
  }
}

__global__ void CountNonFiniteKernel(const float* __restrict__ in, int64_t n, int32_t* count) {
  int32_t bad = 0;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    bad += isfinite(in[i]) ? 0 : 1;
  }
  if (bad != 0) atomicAdd(count, bad);
}

}  // namespace

Status CountNonFinite(const float* d_in, int64_t n, int32_t* d_count, void* stream) {
  if (n < 0) return InvalidArgument("CountNonFinite: n " + std::to_string(n) + " must be >= 0");
  if (n == 0) return Status();
  if (d_in == nullptr || d_count == nullptr) return InvalidArgument("CountNonFinite: null pointer");
  int64_t blocks = (n + kThreads - 1) / kThreads;
  if (blocks > 4096) blocks = 4096;
  CountNonFiniteKernel<<<static_cast<unsigned>(blocks), kThreads, 0, static_cast<cudaStream_t>(stream)>>>(
      d_in, n, d_count);
  OSPREY_SPARSE_RETURN_IF_LAUNCH_FAILED();
  return Status();
}

Status ScatterRowsWiden(const uint16_t* d_in, codec::ValueType type, const int32_t* d_slots, int n, int dim,
                        float* d_table, void* stream) {
  if (n < 0) return InvalidArgument("ScatterRowsWiden: n " + std::to_string(n) + " must be >= 0");
  if (dim < 1) return InvalidArgument("ScatterRowsWiden: dim " + std::to_string(dim) + " must be >= 1");
  if (type != codec::ValueType::kFp16 && type != codec::ValueType::kBf16) {
    return InvalidArgument("ScatterRowsWiden: rows are fp16 or bf16, not " + codec::ValueTypeName(type));
  }
  if (n == 0) return Status();
  if (d_in == nullptr || d_slots == nullptr || d_table == nullptr) {
    return InvalidArgument("ScatterRowsWiden: null pointer with n " + std::to_string(n));
  }
  const cudaStream_t s = static_cast<cudaStream_t>(stream);
  const int64_t total = static_cast<int64_t>(n) * dim;
  int64_t blocks = (total + kThreads - 1) / kThreads;
  if (blocks > kMaxBlocks) blocks = kMaxBlocks;
  if (type == codec::ValueType::kBf16) {
    ScatterWidenKernel<true><<<static_cast<unsigned>(blocks), kThreads, 0, s>>>(d_in, d_slots, total, dim, d_table);
  } else {
    ScatterWidenKernel<false><<<static_cast<unsigned>(blocks), kThreads, 0, s>>>(d_in, d_slots, total, dim, d_table);
  }
  OSPREY_SPARSE_RETURN_IF_LAUNCH_FAILED();
  return Status();
}

Status CastRowValues(const float* d_in, int64_t n, codec::ValueType type, uint16_t* d_out, void* stream) {
  if (n < 0) return InvalidArgument("CastRowValues: n " + std::to_string(n) + " must be >= 0");
  if (type != codec::ValueType::kFp16 && type != codec::ValueType::kBf16) {
    return InvalidArgument("CastRowValues: rows are cast to fp16 or bf16, not " + codec::ValueTypeName(type));
  }
  if (n == 0) return Status();
  if (d_in == nullptr || d_out == nullptr) {
    return InvalidArgument("CastRowValues: null pointer with n " + std::to_string(n));
  }
  const cudaStream_t s = static_cast<cudaStream_t>(stream);
  int64_t blocks = (n + kThreads - 1) / kThreads;
  if (blocks > kMaxBlocks) blocks = kMaxBlocks;
  if (type == codec::ValueType::kBf16) {
    CastRowValuesKernel<true><<<static_cast<unsigned>(blocks), kThreads, 0, s>>>(d_in, n, d_out);
  } else {
    CastRowValuesKernel<false><<<static_cast<unsigned>(blocks), kThreads, 0, s>>>(d_in, n, d_out);
  }
  OSPREY_SPARSE_RETURN_IF_LAUNCH_FAILED();
  return Status();
}

Status GatherRows(const float* d_table, const int32_t* d_slots, int n, int dim, float* d_out, void* stream) {
  return CopyRows<true>("GatherRows", d_table, d_slots, n, dim, d_out, stream);
}

Status ScatterRows(const float* d_in, const int32_t* d_slots, int n, int dim, float* d_table, void* stream) {
  return CopyRows<false>("ScatterRows", d_in, d_slots, n, dim, d_table, stream);
}

}  // namespace osprey::cuda
