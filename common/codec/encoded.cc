#include "common/codec/encoded.h"

#include <algorithm>
#include <cstring>

#include "common/codec/codec_math.h"
#include "common/codec/row_cast.h"

namespace osprey::codec {
namespace {

// Reads are memcpy-based because payload bytes carry no alignment guarantee (a frame may start at
// any offset of a receive buffer); compilers turn these into plain loads.
uint32_t LoadU32(const uint8_t* p) {
  uint32_t v;
  std::memcpy(&v, p, sizeof(v));
  return v;
}

// One decoder per wire type, so the per-element loops carry no switch.
struct Fp32Value {
  static float Load(const uint8_t* values, size_t i) {
    float v;
    std::memcpy(&v, values + 4 * i, sizeof(v));
    return v;
  }
};
struct Fp16Value {
  static float Load(const uint8_t* values, size_t i) {
    uint16_t h;
    std::memcpy(&h, values + 2 * i, sizeof(h));
    return HalfBitsToFloat(h);
  }
};
struct Bf16Value {
  static float Load(const uint8_t* values, size_t i) {
    uint16_t b;
    std::memcpy(&b, values + 2 * i, sizeof(b));
    return Bf16BitsToFloat(b);
  }
};

// Calls f(Value{}) with the decoder of `type`.
template <typename F>
void WithValueType(ValueType type, F&& f) {
  switch (type) {
    case ValueType::kFp32: return f(Fp32Value{});
    case ValueType::kFp16: return f(Fp16Value{});
    case ValueType::kBf16: return f(Bf16Value{});
  }
}

bool IsSparse(CodecId id) { return id == CodecId::kTopK || id == CodecId::kRandomK; }

bool KnownCodec(CodecId id) { return static_cast<uint8_t>(id) <= static_cast<uint8_t>(CodecId::kOneBit); }

// The value types each codec may carry.
bool AllowedValueType(CodecId id, ValueType type) {
  switch (id) {
    case CodecId::kNone:
    case CodecId::kOneBit:
      return type == ValueType::kFp32;
    case CodecId::kFp16:
      return type == ValueType::kFp16;
    case CodecId::kBf16:
      return type == ValueType::kBf16;
    case CodecId::kTopK:
    case CodecId::kRandomK:
      return ValueBytes(type) != 0;
  }
  return false;
}

// The payload checks ValidateMeta leaves to the decode: every sparse index < n, onebit padding bits
// zero. Run before the first write, so a bad frame changes nothing.
Status CheckPayload(const EncodedView& in, size_t n) {
  if (IsSparse(in.meta.codec)) {
    for (size_t i = 0; i < in.meta.count; ++i) {
      const uint32_t idx = LoadU32(in.data + 4 * i);
      if (idx >= n) {
        return DataLoss("sparse frame: pair " + std::to_string(i) + " has index " + std::to_string(idx) +
                        " >= length " + std::to_string(n));
      }
    }
  } else if (in.meta.codec == CodecId::kOneBit && n % 32 != 0) {
    const size_t num_chunks = (n + in.meta.chunk - 1) / in.meta.chunk;
    const uint32_t last = LoadU32(in.data + 4 * num_chunks + 4 * ((n + 31) / 32 - 1));
    if ((last >> (n % 32)) != 0) return DataLoss("onebit frame: padding bits past length are not zero");
  }
  return Status::OK();
}

// Sparse frames (CheckPayload passed).
Status DecodeAddSparse(const EncodedView& in, float* dst, size_t n, float scale) {
  const size_t count = in.meta.count;
  const uint8_t* values = in.data + 4 * count;
  WithValueType(in.meta.value_type, [&](auto value) {
    for (size_t i = 0; i < count; ++i) {
      // Multiply then add, never fused: the CUDA decode rounds the same way.
      const float t = scale * value.Load(values, i);
      dst[LoadU32(in.data + 4 * i)] += t;
    }
  });
  return Status::OK();
}

// Onebit frames (CheckPayload passed).
Status DecodeAddOneBit(const EncodedView& in, float* dst, size_t n, float scale) {
  const size_t chunk = in.meta.chunk;
  const size_t num_chunks = (n + chunk - 1) / chunk;
  const size_t num_words = (n + 31) / 32;
  const uint8_t* words = in.data + 4 * num_chunks;
  for (size_t w = 0; w < num_words; ++w) {
    const uint32_t bits = LoadU32(words + 4 * w);
    const uint32_t scale_bits = LoadU32(in.data + 4 * (w * 32 / chunk));
    const size_t len = std::min<size_t>(32, n - w * 32);
    float* out = dst + w * 32;
    for (size_t j = 0; j < len; ++j) {
      // Negation is a sign-bit flip, so this equals `bit ? -s : s` exactly, without a branch.
      const float v = BitsToFloat(scale_bits ^ (((bits >> j) & 1u) << 31));
      const float t = scale * v;
      out[j] += t;
    }
  }
  return Status::OK();
}

Status DecodeAddDense(const EncodedView& in, float* dst, size_t n, float scale) {
  WithValueType(in.meta.value_type, [&](auto value) {
    for (size_t i = 0; i < n; ++i) {
      const float t = scale * value.Load(in.data, i);
      dst[i] += t;
    }
  });
  return Status::OK();
}

}  // namespace

std::string CodecIdName(CodecId id) {
  switch (id) {
    case CodecId::kNone: return "none";
    case CodecId::kFp16: return "fp16";
    case CodecId::kBf16: return "bf16";
    case CodecId::kTopK: return "topk";
    case CodecId::kRandomK: return "randomk";
    case CodecId::kOneBit: return "onebit";
  }
  return "unknown(" + std::to_string(static_cast<int>(id)) + ")";
}

ValueType ValueTypeOfName(const std::string& name) {
  if (name == "fp16") return ValueType::kFp16;
  if (name == "bf16") return ValueType::kBf16;
  return ValueType::kFp32;
}

std::string ValueTypeName(ValueType type) {
  switch (type) {
    case ValueType::kFp32: return "fp32";
    case ValueType::kFp16: return "fp16";
    case ValueType::kBf16: return "bf16";
  }
  return "unknown(" + std::to_string(static_cast<int>(type)) + ")";
}

size_t ValueBytes(ValueType type) {
  switch (type) {
    case ValueType::kFp32: return 4;
    case ValueType::kFp16:
    case ValueType::kBf16: return 2;
  }
  return 0;
}

size_t PayloadBytes(const EncodedMeta& meta) {
  const size_t n = meta.length;
  switch (meta.codec) {
    case CodecId::kNone:
    case CodecId::kFp16:
    case CodecId::kBf16:
      return n * ValueBytes(meta.value_type);
    case CodecId::kTopK:
    case CodecId::kRandomK:
      return meta.count * (4 + ValueBytes(meta.value_type));
    case CodecId::kOneBit:
      return 4 * ((n + meta.chunk - 1) / meta.chunk) + 4 * ((n + 31) / 32);
  }
  return 0;
}

Status ValidateMeta(const EncodedMeta& meta, size_t payload_size, size_t n) {
  if (!KnownCodec(meta.codec)) return InvalidArgument("frame has unknown codec id " + CodecIdName(meta.codec));
  const std::string codec = CodecIdName(meta.codec);
  if (meta.length != n) {
    return InvalidArgument(codec + " frame has length " + std::to_string(meta.length) + ", destination has " +
                           std::to_string(n));
  }
  if (n > UINT32_MAX) return InvalidArgument(codec + " frame length " + std::to_string(n) + " exceeds u32 indices");
  if (!AllowedValueType(meta.codec, meta.value_type)) {
    return DataLoss(codec + " frame has value type " + ValueTypeName(meta.value_type));
  }
  if (IsSparse(meta.codec) ? meta.count > n : meta.count != n) {
    return DataLoss(codec + " frame has count " + std::to_string(meta.count) + " for length " + std::to_string(n));
  }
  const bool onebit = meta.codec == CodecId::kOneBit;
  if (onebit ? (meta.chunk == 0 || meta.chunk % 32 != 0) : meta.chunk != 0) {
    return DataLoss(codec + " frame has chunk " + std::to_string(meta.chunk));
  }
  const size_t expected = PayloadBytes(meta);
  if (payload_size != expected) {
    return DataLoss(codec + " frame payload is " + std::to_string(payload_size) + " bytes, expected " +
                    std::to_string(expected) + " for count " + std::to_string(meta.count) + " (" +
                    ValueTypeName(meta.value_type) + ")");
  }
  return Status::OK();
}

Status DecodeAddFrame(const EncodedView& in, float* dst, size_t n, float scale) {
  OSPREY_RETURN_IF_ERROR(ValidateMeta(in.meta, in.size, n));
  if (n == 0) return Status::OK();
  OSPREY_RETURN_IF_ERROR(CheckPayload(in, n));
  if (IsSparse(in.meta.codec)) return DecodeAddSparse(in, dst, n, scale);
  if (in.meta.codec == CodecId::kOneBit) return DecodeAddOneBit(in, dst, n, scale);
  return DecodeAddDense(in, dst, n, scale);
}

Status DecodeFrame(const EncodedView& in, float* dst, size_t n) {
  OSPREY_RETURN_IF_ERROR(ValidateMeta(in.meta, in.size, n));
  if (n == 0) return Status::OK();
  if (!IsSparse(in.meta.codec) && in.meta.codec != CodecId::kOneBit) {
    WidenRowValues(in.data, n, in.meta.value_type, dst);
    return Status::OK();
  }
  OSPREY_RETURN_IF_ERROR(CheckPayload(in, n));
  std::fill(dst, dst + n, 0.0f);
  return IsSparse(in.meta.codec) ? DecodeAddSparse(in, dst, n, 1.0f) : DecodeAddOneBit(in, dst, n, 1.0f);
}

}  // namespace osprey::codec
