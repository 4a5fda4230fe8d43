#include "common/codec/layer_stats.h"

#include <cmath>

namespace osprey::codec {

std::vector<LayerStepStats> ComputeLayerStepStats(const float* g, const std::vector<uint32_t>& begin,
                                                  const uint32_t* indices, const float* values, size_t count,
                                                  size_t max_samples) {
  const size_t layers = begin.empty() ? 0 : begin.size() - 1;
  std::vector<LayerStepStats> out(layers);
  size_t j = 0;
  for (size_t l = 0; l < layers; ++l) {
    const size_t b0 = begin[l], size = begin[l + 1] - b0;
    const size_t stride = SampleStride(size, max_samples);
    const size_t samples = size == 0 ? 0 : (size + stride - 1) / stride;
    double raw = 0;
    for (size_t s = 0; s < samples; ++s) {
      const double x = g[b0 + s * stride];
      raw += x * x;
    }
    out[l].raw_sq = samples > 0 ? raw * (static_cast<double>(size) / static_cast<double>(samples)) : 0.0;
    for (; j < count && indices[j] < begin[l + 1]; ++j) {
      const double v = values[j];
      out[l].sent_sq += v * v;
      out[l].dot += static_cast<double>(g[indices[j]]) * v;
      out[l].sent += values[j] != 0.0f ? 1u : 0u;
    }
  }
  return out;
}

double StepCosine(const LayerStepStats& s) {
  if (s.raw_sq <= 0 && s.sent_sq <= 0) return 1.0;
  if (s.raw_sq <= 0 || s.sent_sq <= 0) return 0.0;
  return s.dot / std::sqrt(s.raw_sq * s.sent_sq);
}

}  // namespace osprey::codec
