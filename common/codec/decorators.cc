#include "common/codec/decorators.h"

#include <cmath>
#include <cstring>

#include "common/codec/dense_codecs.h"

namespace osprey::codec {

Status ErrorFeedbackCodec::Encode(const float* g, size_t n, CodecState* state, Encoded* out) const {
  OSPREY_RETURN_IF_ERROR(PrepareStateBuffer("residual", n, &state->residual));
  float* r = state->residual.data();
  for (size_t i = 0; i < n; ++i) r[i] += g[i];  // r now holds p = g + r
  OSPREY_RETURN_IF_ERROR(inner_->Encode(r, n, state, out));
  // r = p - decode(C(p)): adding -1 * v rounds exactly like p - v, which is what the fused CUDA
  // kernels compute, so residuals match bit for bit.
  return inner_->DecodeAdd(out->view(), r, n, -1.0f);
}

Status ErrorFeedbackCodec::DecodeAdd(const EncodedView& in, float* dst, size_t n, float scale) const {
  return inner_->DecodeAdd(in, dst, n, scale);
}

Status DgcMomentumCodec::Encode(const float* g, size_t n, CodecState* state, Encoded* out) const {
  OSPREY_RETURN_IF_ERROR(PrepareStateBuffer("momentum", n, &state->momentum));
  float* u = state->momentum.data();
  for (size_t i = 0; i < n; ++i) u[i] = std::fma(momentum_, u[i], g[i]);
  OSPREY_RETURN_IF_ERROR(inner_->Encode(u, n, state, out));
  if (out->meta.codec != CodecId::kTopK && out->meta.codec != CodecId::kRandomK) {
    return Internal("dgc momentum wraps a codec that emitted " + CodecIdName(out->meta.codec) + ", not a sparse frame");
  }
  // Momentum-factor masking: the sent coordinates restart their momentum, so stale momentum does
  // not keep pushing a coordinate whose accumulated update was just applied.
  for (uint64_t i = 0; i < out->meta.count; ++i) {
    uint32_t index;
    std::memcpy(&index, out->payload.data() + 4 * i, sizeof(index));
    u[index] = 0.0f;
  }
  return Status::OK();
}

Status DgcMomentumCodec::DecodeAdd(const EncodedView& in, float* dst, size_t n, float scale) const {
  return inner_->DecodeAdd(in, dst, n, scale);
}

Status ClipNormCodec::Encode(const float* g, size_t n, CodecState* state, Encoded* out) const {
  OSPREY_RETURN_IF_ERROR(CheckTensorLength(n));
  double sum = 0.0;
  for (size_t i = 0; i < n; ++i) sum += static_cast<double>(g[i]) * g[i];
  const double norm = std::sqrt(sum);
  if (!(norm > clip_norm_)) return inner_->Encode(g, n, state, out);  // also passes NaN norms through
  const float factor = static_cast<float>(clip_norm_ / norm);
  state->clipped.resize(n);
  for (size_t i = 0; i < n; ++i) state->clipped[i] = g[i] * factor;
  return inner_->Encode(state->clipped.data(), n, state, out);
}

Status ClipNormCodec::DecodeAdd(const EncodedView& in, float* dst, size_t n, float scale) const {
  return inner_->DecodeAdd(in, dst, n, scale);
}

Status StepCountingCodec::Encode(const float* g, size_t n, CodecState* state, Encoded* out) const {
  OSPREY_RETURN_IF_ERROR(inner_->Encode(g, n, state, out));
  ++state->step;
  return Status::OK();
}

Status StepCountingCodec::DecodeAdd(const EncodedView& in, float* dst, size_t n, float scale) const {
  return inner_->DecodeAdd(in, dst, n, scale);
}

}  // namespace osprey::codec
