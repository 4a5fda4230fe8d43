// Bit-level helpers shared by the CPU codecs and the CUDA kernels (worker/cuda).
//
// Everything here is integer arithmetic on float bit patterns, so the host and the device compute
// bit-identical results: the same fp16/bf16 rounding, the same magnitude keys, the same sample
// positions. The CUDA kernels include this header; it never includes CUDA headers itself, it only
// marks functions __host__ __device__ when compiled by nvcc.
//
// Thread-safety: pure functions.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>

#if defined(__CUDACC__)
#define OSPREY_HD __host__ __device__ __forceinline__
#else
#define OSPREY_HD inline
#endif

namespace osprey::codec {

OSPREY_HD uint32_t FloatBits(float x) {
#if defined(__CUDA_ARCH__)
  return __float_as_uint(x);
#else
  uint32_t u;
  std::memcpy(&u, &x, sizeof(u));
  return u;
#endif
}

OSPREY_HD float BitsToFloat(uint32_t u) {
#if defined(__CUDA_ARCH__)
  return __uint_as_float(u);
#else
  float x;
  std::memcpy(&x, &u, sizeof(x));
  return x;
#endif
}

// Magnitude key: the bit pattern of |x| (31 bits). For non-NaN values key order equals |x| order,
// so top-k by magnitude is top-k by key. NaN keys sort above +inf (a NaN gradient is selected and
// sent, and the server's non-finite policy handles it; it is never trapped in a residual).
inline constexpr uint32_t kKeyMask = 0x7FFFFFFFu;
// One past the largest key; `key >= kKeyEnd` is never true.
inline constexpr uint32_t kKeyEnd = 0x80000000u;

OSPREY_HD uint32_t MagnitudeKey(float x) { return FloatBits(x) & kKeyMask; }

// IEEE binary16 from float, round-to-nearest-even, with subnormals, overflow to inf, NaN kept NaN
// (quiet, payload truncated). Matches __float2half_rn for every non-NaN input.
OSPREY_HD uint16_t FloatToHalfBits(float x) {
  const uint32_t f = FloatBits(x);
  const uint16_t sign = static_cast<uint16_t>((f >> 16) & 0x8000u);
  const uint32_t a = f & kKeyMask;
  if (a >= 0x7F800000u) {  // inf or NaN
    return static_cast<uint16_t>(sign | 0x7C00u | (a > 0x7F800000u ? 0x0200u | ((a >> 13) & 0x3FFu) : 0u));
  }
  if (a >= 0x477FF000u) return static_cast<uint16_t>(sign | 0x7C00u);  // rounds to >= 65520: inf
  if (a < 0x38800000u) {  // result is subnormal (or zero) in half
    if (a < 0x33000000u) return sign;  // below half of the smallest subnormal: +-0
    const uint32_t e = a >> 23;
    const uint32_t m = (a & 0x7FFFFFu) | 0x800000u;
    const uint32_t shift = 126u - e;  // 14..24: aligns m to units of 2^-24
    uint32_t h = m >> shift;
    const uint32_t rem = m & ((1u << shift) - 1u);
    const uint32_t half = 1u << (shift - 1u);
    if (rem > half || (rem == half && (h & 1u))) ++h;
    return static_cast<uint16_t>(sign | h);
  }
  // Normal: rebias exponent (127 -> 15) and round the 13 dropped mantissa bits to nearest even.
  uint32_t h = (a - 0x38000000u) >> 13;
  const uint32_t rem = a & 0x1FFFu;
  if (rem > 0x1000u || (rem == 0x1000u && (h & 1u))) ++h;  // may carry into the exponent: fine
  return static_cast<uint16_t>(sign | h);
}

OSPREY_HD float HalfBitsToFloat(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t e = (h >> 10) & 0x1Fu;
  const uint32_t m = h & 0x3FFu;
  if (e == 0x1Fu) return BitsToFloat(sign | 0x7F800000u | (m << 13));
  if (e != 0) return BitsToFloat(sign | ((e + 112u) << 23) | (m << 13));
  // Zero or subnormal: m * 2^-24 exactly (a small integer times a power of two), a normal float.
  return BitsToFloat(sign | FloatBits(static_cast<float>(m) * 5.9604644775390625e-8f));
}

// bfloat16 from float, round-to-nearest-even; NaN stays a quiet NaN.
OSPREY_HD uint16_t FloatToBf16Bits(float x) {
  const uint32_t f = FloatBits(x);
  if ((f & kKeyMask) > 0x7F800000u) return static_cast<uint16_t>((f >> 16) | 0x40u);
  const uint32_t rounded = f + 0x7FFFu + ((f >> 16) & 1u);
  return static_cast<uint16_t>(rounded >> 16);
}

OSPREY_HD float Bf16BitsToFloat(uint16_t b) { return BitsToFloat(static_cast<uint32_t>(b) << 16); }

// The row casts (common/codec/row_cast.h, and the GPU worker's device cast of its row gradients):
// as above, except that a finite value beyond the format's range becomes its largest finite value
// of that sign (+-65504 for half, +-0x7F7F for bf16) instead of infinity.
OSPREY_HD uint16_t SaturatingHalfBits(float x) {
  if ((FloatBits(x) & kKeyMask) < 0x7F800000u) x = x > 65504.0f ? 65504.0f : x < -65504.0f ? -65504.0f : x;
  return FloatToHalfBits(x);
}

OSPREY_HD uint16_t SaturatingBf16Bits(float x) {
  uint16_t b = FloatToBf16Bits(x);
  const bool finite = (FloatBits(x) & kKeyMask) < 0x7F800000u;
  if ((b & 0x7FFFu) == 0x7F80u && finite) b = static_cast<uint16_t>((b & 0x8000u) | 0x7F7Fu);
  return b;
}

// 64-bit mix (splitmix64 finalizer): the random source for sampling and random-k, so the CPU and
// the GPU draw the same positions from the same seed.
OSPREY_HD uint64_t Mix64(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

// Seed of one Encode call: distinct per tensor seed and per step.
OSPREY_HD uint64_t StepSeed(uint64_t tensor_seed, uint64_t step) {
  return Mix64(tensor_seed ^ Mix64(step + 0x5851F42D4C957F2Dull));
}

// Position of draw j of `count` stratified draws over [0, n): one uniform position inside stratum
// [j*n/count, (j+1)*n/count). Requires 0 < count <= n, j < count. Used by the sample threshold
// estimate and by random-k (strata never overlap, so random-k indices are distinct).
OSPREY_HD uint64_t StratifiedPosition(uint64_t seed, uint64_t j, uint64_t count, uint64_t n) {
  // n * j fits in 64 bits for any tensor below 2^32 elements (indices are u32 on the wire).
  const uint64_t lo = j * n / count;
  const uint64_t hi = (j + 1) * n / count;
  return lo + Mix64(seed + j) % (hi - lo);
}

}  // namespace osprey::codec
