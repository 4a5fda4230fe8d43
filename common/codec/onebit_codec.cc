#include "common/codec/onebit_codec.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "common/codec/dense_codecs.h"

namespace osprey::codec {

float WarpOrderAbsSum(const float* x, size_t len) {
  float lanes[32] = {};
  // Row by row: lane l still adds x[l], x[l+32], ... in order, but full rows vectorize.
  size_t e = 0;
  for (; e + 32 <= len; e += 32) {
    for (int l = 0; l < 32; ++l) lanes[l] += std::fabs(x[e + l]);
  }
  for (int l = 0; e + l < len; ++l) lanes[l] += std::fabs(x[e + l]);
  for (int offset = 16; offset >= 1; offset /= 2) {
    float next[32];
    for (int l = 0; l < 32; ++l) next[l] = lanes[l] + lanes[l ^ offset];
    std::copy(next, next + 32, lanes);
  }
  return lanes[0];
}

void OneBitPack(const float* x, size_t n, uint32_t chunk, uint8_t* payload) {
  // memcpy stores: the payload may sit at any byte offset of a frame buffer.
  size_t c = 0;
  for (size_t base = 0; base < n; base += chunk, ++c) {
    const size_t len = std::min<size_t>(chunk, n - base);
    const float scale = WarpOrderAbsSum(x + base, len) / static_cast<float>(len);
    std::memcpy(payload + 4 * c, &scale, sizeof(scale));
  }
  uint8_t* words = payload + 4 * c;
  for (size_t w = 0; w * 32 < n; ++w) {
    uint32_t bits = 0;
    const size_t end = std::min(n, w * 32 + 32);
    for (size_t e = w * 32; e < end; ++e) bits |= static_cast<uint32_t>(x[e] < 0.0f) << (e % 32);
    std::memcpy(words + 4 * w, &bits, sizeof(bits));
  }
}

Status OneBitCodec::Encode(const float* g, size_t n, CodecState* state, Encoded* out) const {
  OSPREY_RETURN_IF_ERROR(CheckTensorLength(n));
  out->meta = EncodedMeta{CodecId::kOneBit, ValueType::kFp32, n, n, chunk_};
  out->payload.resize(4 * ((n + chunk_ - 1) / chunk_ + (n + 31) / 32));
  OneBitPack(g, n, chunk_, out->payload.data());
  return Status::OK();
}

Status OneBitCodec::DecodeAdd(const EncodedView& in, float* dst, size_t n, float scale) const {
  OSPREY_RETURN_IF_ERROR(CheckCodecId(CodecId::kOneBit, in));
  return DecodeAddFrame(in, dst, n, scale);
}

}  // namespace osprey::codec
