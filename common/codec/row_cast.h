// Sparse-table rows in 16 bits on the wire: the casts of a sparse table's gradient rows on push
// (tables[].codec fp16 / bf16) and of its weight rows on pull (tables[].pull_codec).
//
// Round to nearest even, bit for bit codec_math.h's FloatToHalfBits / FloatToBf16Bits, except
// that a finite value beyond the format's range goes as the format's largest finite value
// (fp16: +-65504) instead of an infinity a receiver would refuse or train on; NaN stays NaN and
// infinities stay infinities. Widening is exact (every fp16 / bf16 value is a float; a signaling
// fp16 NaN may come out as a quiet float NaN, and the casts never produce one). Layout as
// encoded.h's fp16 / bf16 payloads: the values one after the other, 2 bytes each.
//
// Speed: these run on the host for every row a worker pushes or pulls (a GPU worker at batch
// 16384 moves about 1.6M values a step each way), so the loops are vectorized: the bf16 ones are
// branch-free integer code the compiler vectorizes; fp16 uses the F16C conversion instructions
// where the CPU has them (checked once), else the scalar reference. tests/codec/row_cast_test.cc
// checks every path against the scalar reference.
//
// Thread-safety: pure functions.
#pragma once

#include <cstddef>
#include <cstdint>

#include "common/codec/encoded.h"

namespace osprey::codec {

// Bytes of one row value as `type`.
inline size_t RowValueBytes(ValueType type) { return type == ValueType::kFp32 ? sizeof(float) : sizeof(uint16_t); }

// Writes src[0, n) as `type` at dst and returns the bytes written (n * RowValueBytes(type)).
size_t CastRowValues(const float* src, size_t n, ValueType type, uint8_t* dst);

// Reads n values of `type` at src (no alignment needed) into dst[0, n) as fp32.
void WidenRowValues(const uint8_t* src, size_t n, ValueType type, float* dst);

// The paths behind the two functions, for tests and benchmarks.
namespace row_cast_internal {
uint16_t HalfReference(float x);  // one value, the scalar definition (saturating)
uint16_t Bf16Reference(float x);
void CastHalfPortable(const float* src, size_t n, uint16_t* dst);
void WidenHalfPortable(const uint16_t* src, size_t n, float* dst);
// False where the build or the CPU lacks F16C and AVX2; the F16c functions must not run then.
bool HaveF16c();
void CastHalfF16c(const float* src, size_t n, uint16_t* dst);
void WidenHalfF16c(const uint16_t* src, size_t n, float* dst);
}  // namespace row_cast_internal

}  // namespace osprey::codec
