// One-bit and cast encoders fused with error feedback, and every decode-add.
#include "worker/cuda/select_device.cuh"

namespace osprey::cuda {
namespace {

constexpr unsigned kFullMask = 0xFFFFFFFFu;

// One warp per chunk. Lane l owns elements l, l+32, ... of the chunk and sums their |p| in that
// order, then the warp combines by xor-butterfly: exactly codec::WarpOrderAbsSum, so scales (and
// therefore residuals) are bit-identical to the CPU.
__device__ __forceinline__ float WarpScale(float lane_sum, uint32_t len) {
  for (int offset = 16; offset >= 1; offset /= 2) lane_sum = __fadd_rn(lane_sum, __shfl_xor_sync(kFullMask, lane_sum, offset));
  return __fdiv_rn(lane_sum, static_cast<float>(len));
}

// Signs of one 32-element round go to one word; lanes past len hold p = 0, so padding bits are 0.
template <int kMode>
__device__ __forceinline__ void EmitRound(float v, uint32_t o, uint32_t len, float scale, float* r, uint32_t* word) {
  const uint32_t bits = __ballot_sync(kFullMask, v < 0.0f);
  if (threadIdx.x % 32 == 0) *word = bits;
  if (kMode != kPlain && o < len) r[o] = __fsub_rn(v, v < 0.0f ? -scale : scale);
}

// kPer = chunk/32 values per lane kept in registers between the scale and the signs.
template <int kMode, int kPer>
__device__ void OneBitChunkInRegisters(const float* g, float* r, uint32_t len, float* scale_out, uint32_t* words) {
  const uint32_t lane = threadIdx.x % 32;
  float p[kPer];
  float acc = 0.0f;
#pragma unroll
  for (int j = 0; j < kPer; ++j) {
    const uint32_t o = j * 32 + lane;
    p[j] = o < len ? ComputeP<kMode>(g[o], kMode != kPlain ? r[o] : 0.0f, nullptr, 0.0f) : 0.0f;
    if (o < len) acc = __fadd_rn(acc, fabsf(p[j]));
  }
  const float scale = WarpScale(acc, len);
  if (lane == 0) *scale_out = scale;
#pragma unroll
  for (int j = 0; j < kPer; ++j) {
    if (j * 32u >= len) break;  // warp-uniform
    EmitRound<kMode>(p[j], j * 32 + lane, len, scale, r, &words[j]);
  }
}

// Chunks above 1024 elements: a second read of the chunk (from L1/L2) instead of registers.
template <int kMode>
__device__ void OneBitChunkTwoPass(const float* g, float* r, uint32_t len, float* scale_out, uint32_t* words) {
  const uint32_t lane = threadIdx.x % 32;
  float acc = 0.0f;
  for (uint32_t o = lane; o < len; o += 32) {
    acc = __fadd_rn(acc, fabsf(ComputeP<kMode>(g[o], kMode != kPlain ? r[o] : 0.0f, nullptr, 0.0f)));
  }
  const float scale = WarpScale(acc, len);
  if (lane == 0) *scale_out = scale;
  for (uint32_t j = 0; j * 32 < len; ++j) {
    const uint32_t o = j * 32 + lane;
    const float v = o < len ? ComputeP<kMode>(g[o], kMode != kPlain ? r[o] : 0.0f, nullptr, 0.0f) : 0.0f;
    EmitRound<kMode>(v, o, len, scale, r, &words[j]);
  }
}

template <int kMode, int kPer>
__global__ void __launch_bounds__(kThreads) OneBitKernel(const float* g, float* r, uint32_t n, uint32_t chunk,
                                                         float* scales, uint32_t* words) {
  const uint32_t num_chunks = (n + chunk - 1) / chunk;
  const uint32_t warps = gridDim.x * (blockDim.x / 32);
  for (uint32_t c = (blockIdx.x * blockDim.x + threadIdx.x) / 32; c < num_chunks; c += warps) {
    const size_t base = size_t{c} * chunk;
    const uint32_t len = static_cast<uint32_t>(min(size_t{chunk}, n - base));
    float* rc = kMode != kPlain ? r + base : nullptr;
    if (kPer > 0) {
      OneBitChunkInRegisters<kMode, (kPer > 0 ? kPer : 1)>(g + base, rc, len, &scales[c], words + base / 32);
    } else {
      OneBitChunkTwoPass<kMode>(g + base, rc, len, &scales[c], words + base / 32);
    }
  }
}

template <int kMode>
__global__ void CastKernel(const float* g, float* r, uint32_t n, codec::ValueType type, void* payload) {
  for (size_t i = blockIdx.x * size_t{blockDim.x} + threadIdx.x; i < n; i += size_t{gridDim.x} * blockDim.x) {
    const float p = ComputeP<kMode>(g[i], kMode != kPlain ? r[i] : 0.0f, nullptr, 0.0f);
    const float decoded = StoreValue(payload, type, static_cast<uint32_t>(i), p);
    if (kMode != kPlain) r[i] = __fsub_rn(p, decoded);
  }
}

__device__ __forceinline__ float LoadValue(const void* values, codec::ValueType type, size_t i) {
  if (type == codec::ValueType::kFp16) return codec::HalfBitsToFloat(static_cast<const uint16_t*>(values)[i]);
  if (type == codec::ValueType::kBf16) return codec::Bf16BitsToFloat(static_cast<const uint16_t*>(values)[i]);
  return static_cast<const float*>(values)[i];
}

__global__ void ValidateSparseKernel(const uint32_t* indices, uint32_t count, uint32_t n, uint32_t* bad) {
  for (size_t j = blockIdx.x * size_t{blockDim.x} + threadIdx.x; j < count; j += size_t{gridDim.x} * blockDim.x) {
    if (indices[j] >= n) atomicAdd(bad, 1u);
  }
}

// Multiply then add, never fused (__fmul_rn / atomicAdd), as codec::DecodeAddFrame rounds. A
// thread loads all its pairs before its first atomic: dst may alias the payload as far as the
// compiler knows, so interleaving would wait out one memory latency per pair.
constexpr int kApplyItems = 4;
__global__ void ApplySparseKernel(const uint32_t* indices, const void* values, codec::ValueType type, uint32_t count,
                                  float* dst, float scale, const uint32_t* bad) {
  if (*bad) return;
  const size_t tile = size_t{blockDim.x} * kApplyItems;
  for (size_t base = blockIdx.x * tile; base < count; base += gridDim.x * tile) {
    uint32_t index[kApplyItems];
    float v[kApplyItems];
#pragma unroll
    for (int q = 0; q < kApplyItems; ++q) {
      const size_t j = base + q * blockDim.x + threadIdx.x;
      index[q] = j < count ? indices[j] : 0u;
      v[q] = j < count ? LoadValue(values, type, j) : 0.0f;
    }
#pragma unroll
    for (int q = 0; q < kApplyItems; ++q) {
      if (base + q * blockDim.x + threadIdx.x < count) atomicAdd(dst + index[q], __fmul_rn(scale, v[q]));
    }
  }
}

__global__ void CheckPaddingKernel(const uint32_t* words, uint32_t n, uint32_t* bad) {
  if (n % 32 != 0 && (words[(n - 1) / 32] >> (n % 32)) != 0) atomicAdd(bad, 1u);
}

__global__ void ApplyOneBitKernel(const float* scales, const uint32_t* words, uint32_t chunk, uint32_t n, float* dst,
                                  float scale, const uint32_t* bad) {
  if (*bad) return;
  for (size_t e = blockIdx.x * size_t{blockDim.x} + threadIdx.x; e < n; e += size_t{gridDim.x} * blockDim.x) {
    const float s = scales[e / chunk];
    const float v = (words[e / 32] >> (e % 32)) & 1u ? -s : s;
    dst[e] = __fadd_rn(dst[e], __fmul_rn(scale, v));
  }
}

__global__ void ApplyDenseKernel(const void* values, codec::ValueType type, uint32_t n, float* dst, float scale,
                                 const uint32_t* bad) {
  if (*bad) return;
  for (size_t i = blockIdx.x * size_t{blockDim.x} + threadIdx.x; i < n; i += size_t{gridDim.x} * blockDim.x) {
    dst[i] = __fadd_rn(dst[i], __fmul_rn(scale, LoadValue(values, type, i)));
  }
}

int NumSms() {
  int device = 0;
  int sms = 132;
  if (cudaGetDevice(&device) == cudaSuccess) cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device);
  return sms;
}

Status CheckEf(const EfTensor& t) {
  if (t.n > UINT32_MAX) return InvalidArgument("tensor of " + std::to_string(t.n) + " elements exceeds u32");
  if (t.n > 0 && t.grad == nullptr) return InvalidArgument("null gradient");
  if (t.momentum) return InvalidArgument("DGC momentum applies to sparse codecs only");
  return Status::OK();
}

template <int kMode>
void LaunchOneBit(const EfTensor& t, uint32_t chunk, float* scales, uint32_t* words, cudaStream_t s) {
  const uint32_t n = static_cast<uint32_t>(t.n);
  const int grid = GridFor((n + chunk - 1) / chunk, kThreads / 32, NumSms(), 32);
  auto launch = [&](auto kernel) { kernel<<<grid, kThreads, 0, s>>>(t.grad, t.residual, n, chunk, scales, words); };
  switch (chunk) {
    case 32: return launch(OneBitKernel<kMode, 1>);
    case 64: return launch(OneBitKernel<kMode, 2>);
    case 128: return launch(OneBitKernel<kMode, 4>);
    case 256: return launch(OneBitKernel<kMode, 8>);
    case 512: return launch(OneBitKernel<kMode, 16>);
    case 1024: return launch(OneBitKernel<kMode, 32>);
    default: return launch(OneBitKernel<kMode, 0>);
  }
}

}  // namespace

Status OneBitEncode(const EfTensor& t, uint32_t chunk, void* d_payload, void* stream) {
  OSPREY_RETURN_IF_ERROR(CheckEf(t));
  if (chunk == 0 || chunk % 32 != 0) return InvalidArgument("onebit chunk " + std::to_string(chunk));
  if (t.n == 0) return Status::OK();
  if (d_payload == nullptr) return InvalidArgument("null payload");
  auto s = static_cast<cudaStream_t>(stream);
  float* scales = static_cast<float*>(d_payload);
  uint32_t* words = reinterpret_cast<uint32_t*>(scales + (t.n + chunk - 1) / chunk);
  if (t.residual) {
    LaunchOneBit<kResidual>(t, chunk, scales, words, s);
  } else {
    LaunchOneBit<kPlain>(t, chunk, scales, words, s);
  }
  OSPREY_CUDA_RETURN_IF_LAUNCH_FAILED();
  return Status::OK();
}

Status CastEncode(const EfTensor& t, codec::ValueType type, void* d_payload, void* stream) {
  OSPREY_RETURN_IF_ERROR(CheckEf(t));
  if (codec::ValueBytes(type) == 0) return InvalidArgument("unknown value type " + codec::ValueTypeName(type));
  if (t.n == 0) return Status::OK();
  if (d_payload == nullptr) return InvalidArgument("null payload");
  auto s = static_cast<cudaStream_t>(stream);
  const uint32_t n = static_cast<uint32_t>(t.n);
  const int grid = GridFor(n, kThreads * 8, NumSms(), 16);
  if (t.residual) {
    CastKernel<kResidual><<<grid, kThreads, 0, s>>>(t.grad, t.residual, n, type, d_payload);
  } else {
    CastKernel<kPlain><<<grid, kThreads, 0, s>>>(t.grad, t.residual, n, type, d_payload);
  }
  OSPREY_CUDA_RETURN_IF_LAUNCH_FAILED();
  return Status::OK();
}

Status DecodeAdd(const codec::EncodedMeta& meta, const void* d_payload, size_t payload_bytes, float* d_dst, size_t n,
                 float scale, uint32_t* d_bad, void* stream) {
  OSPREY_RETURN_IF_ERROR(codec::ValidateMeta(meta, payload_bytes, n));
  if (d_bad == nullptr) return InvalidArgument("null bad-frame counter");
  auto s = static_cast<cudaStream_t>(stream);
  OSPREY_CUDA_RETURN_IF_ERROR(cudaMemsetAsync(d_bad, 0, sizeof(uint32_t), s));
  if (n == 0 || payload_bytes == 0) return Status::OK();
  if (d_payload == nullptr || d_dst == nullptr) return InvalidArgument("null payload or destination");
  const uint32_t n32 = static_cast<uint32_t>(n);
  const int sms = NumSms();
  if (meta.codec == codec::CodecId::kTopK || meta.codec == codec::CodecId::kRandomK) {
    const uint32_t count = static_cast<uint32_t>(meta.count);
    const auto* indices = static_cast<const uint32_t*>(d_payload);
    const int grid = GridFor(count, kThreads * kApplyItems, sms, 16);
    ValidateSparseKernel<<<grid, kThreads, 0, s>>>(indices, count, n32, d_bad);
    ApplySparseKernel<<<grid, kThreads, 0, s>>>(indices, indices + count, meta.value_type, count, d_dst, scale, d_bad);
  } else if (meta.codec == codec::CodecId::kOneBit) {
    const auto* scales = static_cast<const float*>(d_payload);
    const auto* words = reinterpret_cast<const uint32_t*>(scales + (n + meta.chunk - 1) / meta.chunk);
    CheckPaddingKernel<<<1, 1, 0, s>>>(words, n32, d_bad);
    ApplyOneBitKernel<<<GridFor(n32, kThreads * 8, sms, 16), kThreads, 0, s>>>(scales, words, meta.chunk, n32, d_dst,
                                                                                scale, d_bad);
  } else {
    ApplyDenseKernel<<<GridFor(n32, kThreads * 8, sms, 16), kThreads, 0, s>>>(d_payload, meta.value_type, n32, d_dst,
                                                                               scale, d_bad);
  }
  OSPREY_CUDA_RETURN_IF_LAUNCH_FAILED();
  return Status::OK();
}

}  // namespace osprey::cuda
