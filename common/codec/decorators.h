// Decorators that refine a lossy codec. Each owns the codec it wraps and keeps its state in the
// CodecState passed to Encode, so the decorator objects themselves stay immutable.
// MakeCodec stacks them (outermost first): StepCounting(ClipNorm(DgcMomentum(ErrorFeedback(base)))).
// Thread-safety: see codec.h.
#pragma once

#include <memory>

#include "common/codec/codec.h"

namespace osprey::codec {

// Error feedback (Seide et al. 2014, Karimireddy et al. 2019): p = g + r; send C(p);
// r = p - decode(C(p)). Keeps r in state->residual (p is formed in place there, then the decoded
// frame is subtracted, so no dense temporary is needed).
class ErrorFeedbackCodec final : public Codec {
 public:
  explicit ErrorFeedbackCodec(std::unique_ptr<Codec> inner) : inner_(std::move(inner)) {}

  // g must not alias state->residual.
  Status Encode(const float* g, size_t n, CodecState* state, Encoded* out) const override;
  Status DecodeAdd(const EncodedView& in, float* dst, size_t n, float scale) const override;

 private:
  std::unique_ptr<Codec> inner_;
};

// DGC momentum correction with momentum-factor masking (Lin et al. 2018): u = m*u + g (fused
// multiply-add, as on the GPU), the inner codec (error feedback over a sparse codec) encodes u,
// then u[i] = 0 for every sent index i. Keeps u in state->momentum. The inner codec must emit a
// sparse frame (MakeCodec ensures it).
class DgcMomentumCodec final : public Codec {
 public:
  DgcMomentumCodec(float momentum, std::unique_ptr<Codec> inner) : momentum_(momentum), inner_(std::move(inner)) {}

  Status Encode(const float* g, size_t n, CodecState* state, Encoded* out) const override;
  Status DecodeAdd(const EncodedView& in, float* dst, size_t n, float scale) const override;

 private:
  float momentum_;
  std::unique_ptr<Codec> inner_;
};

// Scales g by min(1, clip_norm / ||g||_2) before encoding (DGC's local gradient clipping). The
// norm is accumulated in double; the scaled copy lives in state->clipped.
class ClipNormCodec final : public Codec {
 public:
  ClipNormCodec(float clip_norm, std::unique_ptr<Codec> inner) : clip_norm_(clip_norm), inner_(std::move(inner)) {}

  Status Encode(const float* g, size_t n, CodecState* state, Encoded* out) const override;
  Status DecodeAdd(const EncodedView& in, float* dst, size_t n, float scale) const override;

 private:
  float clip_norm_;
  std::unique_ptr<Codec> inner_;
};

// Advances state->step after each successful Encode; the outermost layer of every MakeCodec stack,
// so exactly one layer counts steps however the stack is composed.
class StepCountingCodec final : public Codec {
 public:
  explicit StepCountingCodec(std::unique_ptr<Codec> inner) : inner_(std::move(inner)) {}

  Status Encode(const float* g, size_t n, CodecState* state, Encoded* out) const override;
  Status DecodeAdd(const EncodedView& in, float* dst, size_t n, float scale) const override;

 private:
  std::unique_ptr<Codec> inner_;
};

}  // namespace osprey::codec
