#include "common/codec/dense_codecs.h"

#include <cstring>

#include "common/codec/codec_math.h"

namespace osprey::codec {

void StoreValues(const float* x, size_t n, ValueType type, uint8_t* values) {
  if (n == 0) return;
  switch (type) {
    case ValueType::kFp32:
      std::memcpy(values, x, n * sizeof(float));
      return;
    case ValueType::kFp16:
      for (size_t i = 0; i < n; ++i) {
        const uint16_t h = FloatToHalfBits(x[i]);
        std::memcpy(values + 2 * i, &h, sizeof(h));
      }
      return;
    case ValueType::kBf16:
      for (size_t i = 0; i < n; ++i) {
        const uint16_t b = FloatToBf16Bits(x[i]);
        std::memcpy(values + 2 * i, &b, sizeof(b));
      }
      return;
  }
}

float RoundTrip(float v, ValueType type) {
  switch (type) {
    case ValueType::kFp32: return v;
    case ValueType::kFp16: return HalfBitsToFloat(FloatToHalfBits(v));
    case ValueType::kBf16: return Bf16BitsToFloat(FloatToBf16Bits(v));
  }
  return v;
}

Status CheckTensorLength(size_t n) {
  if (n > UINT32_MAX) {
    return InvalidArgument("tensor of " + std::to_string(n) + " elements: codecs take at most 2^32-1 (u32 indices)");
  }
  return Status::OK();
}

Status PrepareStateBuffer(const char* what, size_t n, std::vector<float>* buffer) {
  OSPREY_RETURN_IF_ERROR(CheckTensorLength(n));
  if (buffer->empty()) {
    buffer->assign(n, 0.0f);
  } else if (buffer->size() != n) {
    return InvalidArgument(std::string("codec state holds a ") + what + " of " + std::to_string(buffer->size()) +
                           " elements, tensor has " + std::to_string(n));
  }
  return Status::OK();
}

Status CheckCodecId(CodecId expected, const EncodedView& in) {
  if (in.meta.codec != expected) {
    return InvalidArgument("frame codec is " + CodecIdName(in.meta.codec) + ", this codec decodes " +
                           CodecIdName(expected));
  }
  return Status::OK();
}

Status DenseCodec::Encode(const float* g, size_t n, CodecState* state, Encoded* out) const {
  OSPREY_RETURN_IF_ERROR(CheckTensorLength(n));
  out->meta = EncodedMeta{id_, type_, n, n, 0};
  out->payload.resize(n * ValueBytes(type_));
  StoreValues(g, n, type_, out->payload.data());
  return Status::OK();
}

Status DenseCodec::DecodeAdd(const EncodedView& in, float* dst, size_t n, float scale) const {
  OSPREY_RETURN_IF_ERROR(CheckCodecId(id_, in));
  return DecodeAddFrame(in, dst, n, scale);
}

}  // namespace osprey::codec
