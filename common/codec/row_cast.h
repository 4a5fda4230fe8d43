// Sparse-table rows in 16 bits on the wire: the casts of a sparse table's gradient rows on push
// (tables[].codec fp16 / bf16) and of its weight rows on pull (tables[].pull_codec).
//
// Round to nearest even, with codec_math.h's bit-exact casts, except that a finite value beyond
// the format's range goes as the format's largest finite value (fp16: +-65504) instead of an
// infinity a receiver would refuse or train on; NaN stays NaN and infinities stay infinities.
// Layout as encoded.h's fp16 / bf16 payloads: the values one after the other, 2 bytes each.
//
// Thread-safety: pure functions.
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>

#include "common/codec/codec_math.h"
#include "common/codec/encoded.h"

namespace osprey::codec {

// Bytes of one row value as `type`.
inline size_t RowValueBytes(ValueType type) { return type == ValueType::kFp32 ? sizeof(float) : sizeof(uint16_t); }

// Writes src[0, n) as `type` at dst and returns the bytes written (n * RowValueBytes(type)).
inline size_t CastRowValues(const float* src, size_t n, ValueType type, uint8_t* dst) {
  if (type == ValueType::kFp32) {
    std::memcpy(dst, src, n * sizeof(float));
    return n * sizeof(float);
  }
  uint16_t* out = reinterpret_cast<uint16_t*>(dst);
  if (type == ValueType::kFp16) {
    constexpr float kMaxHalf = 65504.0f;
    for (size_t i = 0; i < n; ++i) {
      const float x = src[i];
      out[i] = FloatToHalfBits(x > kMaxHalf ? kMaxHalf : x < -kMaxHalf ? -kMaxHalf : x);
    }
  } else {
    for (size_t i = 0; i < n; ++i) {
      uint16_t b = FloatToBf16Bits(src[i]);
      // Rounding up past the largest finite bf16 gives infinity; keep the sign, saturate.
      if ((b & 0x7FFFu) == 0x7F80u && std::isfinite(src[i])) b = static_cast<uint16_t>((b & 0x8000u) | 0x7F7Fu);
      out[i] = b;
    }
  }
  return n * sizeof(uint16_t);
}

// Reads n values of `type` at src into dst[0, n) as fp32 (exact: every fp16 / bf16 is a float).
inline void WidenRowValues(const uint8_t* src, size_t n, ValueType type, float* dst) {
  if (type == ValueType::kFp32) {
    std::memcpy(dst, src, n * sizeof(float));
    return;
  }
  uint16_t v;
  for (size_t i = 0; i < n; ++i) {
    std::memcpy(&v, src + 2 * i, sizeof(v));  // reply frames carry no alignment promise
    dst[i] = type == ValueType::kFp16 ? HalfBitsToFloat(v) : Bf16BitsToFloat(v);
  }
}

}  // namespace osprey::codec
