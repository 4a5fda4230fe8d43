#include "common/codec/row_cast.h"

#include <cmath>
#include <cstring>
#include <vector>

#include "common/codec/codec_math.h"

#if defined(__x86_64__) && defined(__GNUC__)
#include <cpuid.h>
#include <immintrin.h>
#define OSPREY_ROW_CAST_X86 1
#else
#define OSPREY_ROW_CAST_X86 0
#endif

namespace osprey::codec {
namespace row_cast_internal {

namespace {
constexpr float kMaxHalf = 65504.0f;
}  // namespace

uint16_t HalfReference(float x) { return SaturatingHalfBits(x); }

uint16_t Bf16Reference(float x) { return SaturatingBf16Bits(x); }

void CastHalfPortable(const float* src, size_t n, uint16_t* dst) {
  for (size_t i = 0; i < n; ++i) dst[i] = HalfReference(src[i]);
}

void WidenHalfPortable(const uint16_t* src, size_t n, float* dst) {
  for (size_t i = 0; i < n; ++i) dst[i] = HalfBitsToFloat(src[i]);
}

#if OSPREY_ROW_CAST_X86

// F16C from CPUID leaf 1 (ECX bit 29) rather than __builtin_cpu_supports("f16c"): clang 14 does
// not know that feature name (the -Wthread-safety build uses clang).
bool HaveF16c() {
  static const bool have = [] {
    unsigned int eax = 0, ebx = 0, ecx = 0, edx = 0;
    const bool f16c = __get_cpuid(1, &eax, &ebx, &ecx, &edx) && (ecx & bit_F16C) != 0;
    return f16c && __builtin_cpu_supports("avx2");
  }();
  return have;
}

// 8 values at a time: clamp the finite ones to +-65504 (min/max with the input second, so a NaN
// lane keeps its NaN), then vcvtps2ph with round-to-nearest-even, which is IEEE's conversion:
// the same bits as FloatToHalfBits, NaN included (quiet, payload truncated).
__attribute__((target("avx2,f16c"))) void CastHalfF16c(const float* src, size_t n, uint16_t* dst) {
  const __m256 hi = _mm256_set1_ps(kMaxHalf), lo = _mm256_set1_ps(-kMaxHalf);
  const __m256 inf = _mm256_set1_ps(INFINITY);
  const __m256 abs_mask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7FFFFFFF));
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 x = _mm256_loadu_ps(src + i);
    const __m256 clamped = _mm256_max_ps(lo, _mm256_min_ps(hi, x));
    const __m256 finite = _mm256_cmp_ps(_mm256_and_ps(x, abs_mask), inf, _CMP_LT_OQ);  // false for NaN, inf
    const __m256 y = _mm256_blendv_ps(x, clamped, finite);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + i),
                     _mm256_cvtps_ph(y, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
  }
  for (; i < n; ++i) dst[i] = HalfReference(src[i]);
}

__attribute__((target("avx2,f16c"))) void WidenHalfF16c(const uint16_t* src, size_t n, float* dst) {
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i));
    _mm256_storeu_ps(dst + i, _mm256_cvtph_ps(h));
  }
  for (; i < n; ++i) dst[i] = HalfBitsToFloat(src[i]);
}

#else

bool HaveF16c() { return false; }
void CastHalfF16c(const float* src, size_t n, uint16_t* dst) { CastHalfPortable(src, n, dst); }
void WidenHalfF16c(const uint16_t* src, size_t n, float* dst) { WidenHalfPortable(src, n, dst); }

#endif

}  // namespace row_cast_internal

namespace {

// Bf16Reference without branches, so the loop vectorizes: round to nearest even on the bits, a
// NaN keeps its top bits (made quiet), a finite value that rounded to infinity saturates.
#if OSPREY_ROW_CAST_X86
__attribute__((target_clones("avx2", "default")))
#endif
void CastBf16(const float* src, size_t n, uint16_t* dst) {
  for (size_t i = 0; i < n; ++i) {
    uint32_t f;
    std::memcpy(&f, src + i, sizeof(f));
    const uint32_t a = f & 0x7FFFFFFFu;
    const uint32_t rounded = (f + 0x7FFFu + ((f >> 16) & 1u)) >> 16;
    const uint32_t quiet_nan = (f >> 16) | 0x40u;
    uint32_t b = a > 0x7F800000u ? quiet_nan : rounded;
    const bool overflowed = a < 0x7F800000u && (b & 0x7FFFu) == 0x7F80u;
    b = overflowed ? ((b & 0x8000u) | 0x7F7Fu) : b;
    dst[i] = static_cast<uint16_t>(b);
  }
}

void WidenBf16(const uint16_t* src, size_t n, float* dst) {
  for (size_t i = 0; i < n; ++i) {
    const uint32_t f = static_cast<uint32_t>(src[i]) << 16;
    std::memcpy(dst + i, &f, sizeof(f));
  }
}

}  // namespace

size_t CastRowValues(const float* src, size_t n, ValueType type, uint8_t* dst) {
  if (type == ValueType::kFp32) {
    std::memcpy(dst, src, n * sizeof(float));
    return n * sizeof(float);
  }
  // dst may be unaligned for uint16_t only in theory (frames are allocated whole); the casts
  // write through uint16_t pointers, so keep them on 2-byte boundaries.
  uint16_t* out = reinterpret_cast<uint16_t*>(dst);
  if (type == ValueType::kBf16) {
    CastBf16(src, n, out);
  } else if (row_cast_internal::HaveF16c()) {
    row_cast_internal::CastHalfF16c(src, n, out);
  } else {
    row_cast_internal::CastHalfPortable(src, n, out);
  }
  return n * sizeof(uint16_t);
}

void WidenRowValues(const uint8_t* src, size_t n, ValueType type, float* dst) {
  if (type == ValueType::kFp32) {
    std::memcpy(dst, src, n * sizeof(float));
    return;
  }
  // Reply frames carry no alignment promise: widen from an aligned copy when src is odd.
  const uint16_t* in = reinterpret_cast<const uint16_t*>(src);
  std::vector<uint16_t> aligned;
  if (reinterpret_cast<uintptr_t>(src) % alignof(uint16_t) != 0) {
    aligned.resize(n);
    std::memcpy(aligned.data(), src, n * sizeof(uint16_t));
    in = aligned.data();
  }
  if (type == ValueType::kBf16) {
    WidenBf16(in, n, dst);
  } else if (row_cast_internal::HaveF16c()) {
    row_cast_internal::WidenHalfF16c(in, n, dst);
  } else {
    row_cast_internal::WidenHalfPortable(in, n, dst);
  }
}

}  // namespace osprey::codec
