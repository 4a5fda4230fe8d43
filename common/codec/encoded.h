// The encoded form of one compressed tensor: small metadata plus ONE contiguous payload buffer,
// so the transport ships the metadata in the protobuf header and the payload as a single frame.
//
// Byte layout of the payload (all little-endian; Osprey only builds on little-endian hosts):
//
//   codec    value_type   payload                                             size in bytes
//   none     fp32         n x f32                                              4n
//   fp16     fp16         n x u16 (IEEE binary16 bits, round-to-nearest-even)  2n
//   bf16     bf16         n x u16 (bfloat16 bits, round-to-nearest-even)       2n
//   topk     fp32|fp16|bf16  count x u32 index, then count x value            count*(4+vbytes)
//   randomk  (same as topk)
//   onebit   fp32         ceil(n/chunk) x f32 scale, then ceil(n/32) x u32 sign words
//                                                                              4*ceil(n/chunk)+4*ceil(n/32)
//
// Sparse frames: indices are < n, in no particular order (the GPU compacts with atomics), and
// distinct (every encoder guarantees it; DecodeAdd does not check, duplicates would just add
// twice). The value of pair i is at byte 4*count + vbytes*i.
// One-bit frames: element e belongs to chunk e/chunk and its sign is bit (e%32) of word e/32;
// bit 1 means negative, decoded as -scale[e/chunk], bit 0 as +scale[e/chunk]. chunk is a
// multiple of 32, so every chunk starts on a word boundary. Bits past n in the last word are 0.
//
// Thread-safety: plain values.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "common/status.h"

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "Osprey codec payloads are little-endian; add byte swapping before building on this host"
#endif

namespace osprey::codec {

// Wire ids: stable, never renumber (they travel in the protobuf header).
enum class CodecId : uint8_t {
  kNone = 0,
  kFp16 = 1,
  kBf16 = 2,
  kTopK = 3,
  kRandomK = 4,
  kOneBit = 5,
};

// Wire ids of value encodings.
enum class ValueType : uint8_t {
  kFp32 = 0,
  kFp16 = 1,
  kBf16 = 2,
};

// "none", "fp16", ...; "unknown(7)" for ids outside the enum.
std::string CodecIdName(CodecId id);
std::string ValueTypeName(ValueType type);
// "fp16" -> kFp16, "bf16" -> kBf16, any other name (fp32, none, a codec's) -> kFp32: the 16-bit
// type a validated config name stands for.
ValueType ValueTypeOfName(const std::string& name);
// Bytes of one value: 4 or 2; 0 for ids outside the enum.
size_t ValueBytes(ValueType type);

struct EncodedMeta {
  CodecId codec = CodecId::kNone;
  ValueType value_type = ValueType::kFp32;
  uint64_t length = 0;  // n: elements of the dense tensor this frame decodes into
  uint64_t count = 0;   // sparse codecs: selected pairs; dense codecs and onebit: equal to length
  uint32_t chunk = 0;   // onebit: elements per scale; 0 for every other codec
};

// Read-only view of an encoded tensor; borrows `data` (the caller keeps it alive for the call).
struct EncodedView {
  EncodedMeta meta;
  const uint8_t* data = nullptr;
  size_t size = 0;
};

// An encoded tensor that owns its payload. Encoders resize `payload` and reuse its capacity, so a
// caller that keeps one Encoded per tensor allocates only on the first steps.
struct Encoded {
  EncodedMeta meta;
  std::vector<uint8_t> payload;

  EncodedView view() const { return EncodedView{meta, payload.data(), payload.size()}; }
};

// Payload bytes that `meta` implies, per the table above. Precondition: ValidateMeta(meta) is OK.
size_t PayloadBytes(const EncodedMeta& meta);

// Checks that the metadata is self-consistent and describes a tensor of length n: a known codec,
// a value type that codec allows, count <= length (== for dense codecs), a chunk that is a
// positive multiple of 32 for onebit and 0 otherwise, and that `payload_size` equals
// PayloadBytes. Returns InvalidArgument for an unknown codec or a length that is not n, DataLoss
// for an inconsistent or truncated frame. Does not look at the payload bytes.
Status ValidateMeta(const EncodedMeta& meta, size_t payload_size, size_t n);

// Validates the whole frame (ValidateMeta, then every sparse index < n and onebit padding bits
// zero) and adds scale * decoded into dst[0, n). Applies nothing unless the whole frame is valid.
// This is what every Codec::DecodeAdd does after checking the codec id; the server may call it
// directly, since decoding never depends on the encoder's configuration.
Status DecodeAddFrame(const EncodedView& in, float* dst, size_t n, float scale);

// The same validation, then writes decoded into dst[0, n) (every element: dst need not be
// initialized). A dense frame (none / fp16 / bf16 values) is widened in one vectorized pass; a
// sparse or onebit frame is zero-filled and decode-added. Writes nothing unless the frame is valid.
Status DecodeFrame(const EncodedView& in, float* dst, size_t n);

}  // namespace osprey::codec
