// One-bit codec (signSGD with per-chunk scale, as in 1-bit SGD / EF-SignSGD): each element is
// sent as its sign; each chunk of `chunk` elements also sends scale = mean |x| over the chunk.
// Decoding gives +-scale. Payload per encoded.h. Thread-safety: see codec.h.
#pragma once

#include "common/codec/codec.h"

namespace osprey::codec {

class OneBitCodec final : public Codec {
 public:
  // chunk: a positive multiple of 32 (validated by MakeCodec).
  explicit OneBitCodec(uint32_t chunk) : chunk_(chunk) {}

  Status Encode(const float* g, size_t n, CodecState* state, Encoded* out) const override;
  Status DecodeAdd(const EncodedView& in, float* dst, size_t n, float scale) const override;

 private:
  uint32_t chunk_;
};

// Sum of |x[0, len)| in the order one CUDA warp adds them: lane l (0..31) sums elements
// l, l+32, l+64, ... in turn, then lanes combine by xor-butterfly (16, 8, 4, 2, 1). Fixing the order
// makes the CPU and GPU scales bit-identical.
float WarpOrderAbsSum(const float* x, size_t len);

// Writes the one-bit payload of x[0, n) (layout of encoded.h: ceil(n/chunk) scales, then
// ceil(n/32) sign words) into payload. The CPU reference of the CUDA one-bit kernel.
void OneBitPack(const float* x, size_t n, uint32_t chunk, uint8_t* payload);

}  // namespace osprey::codec
