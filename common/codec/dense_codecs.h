// Dense codecs: "none" (fp32 copy) and the fp16/bf16 casts (round-to-nearest-even).
// Payloads per encoded.h. Thread-safety: see codec.h.
#pragma once

#include "common/codec/codec.h"

namespace osprey::codec {

// Encodes every element as `type` (fp32 for CodecId::kNone, fp16, bf16).
class DenseCodec final : public Codec {
 public:
  // id must be kNone (with kFp32), kFp16 (with kFp16) or kBf16 (with kBf16).
  DenseCodec(CodecId id, ValueType type) : id_(id), type_(type) {}

  Status Encode(const float* g, size_t n, CodecState* state, Encoded* out) const override;
  Status DecodeAdd(const EncodedView& in, float* dst, size_t n, float scale) const override;

 private:
  CodecId id_;
  ValueType type_;
};

// Writes x as `type` into values[0, n * ValueBytes(type)): the CPU reference of the CUDA cast.
void StoreValues(const float* x, size_t n, ValueType type, uint8_t* values);

// Rounds v to `type` and back: what the receiver will decode for v.
float RoundTrip(float v, ValueType type);

// Checks n fits u32 indices and that an existing state buffer matches n; sizes it (zeros) if empty.
Status PrepareStateBuffer(const char* what, size_t n, std::vector<float>* buffer);
Status CheckTensorLength(size_t n);
// Checks a frame's codec id before decoding it: InvalidArgument naming both ids.
Status CheckCodecId(CodecId expected, const EncodedView& in);

}  // namespace osprey::codec
