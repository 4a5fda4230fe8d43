// Per-layer statistics of one compressed step: what the compression diagnostics
// (worker/compression_diagnostics.h) are made of, as a pure function over a raw gradient and the
// sparse pairs sent for it. The CPU reference of the CUDA LayerStepStats (worker/cuda/
// layer_kernels.h), which computes the same numbers where the gradient lives on the GPU.
//
// Thread-safety: pure functions.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace osprey::codec {

struct LayerStepStats {
  double raw_sq = 0;   // ||g_l||^2, estimated from the sampled positions (exact when not sampled)
  double sent_sq = 0;  // ||sent_l||^2 over the pairs in the layer (exact)
  double dot = 0;      // <g_l, sent_l> over the pairs in the layer (exact)
  uint32_t sent = 0;   // nonzero pairs in the layer
};

// Positions sampled in a layer of `size` floats: every stride-th from its start, with
// stride = ceil(size / max_samples) (all of them when size <= max_samples).
inline size_t SampleStride(size_t size, size_t max_samples) {
  return max_samples == 0 || size <= max_samples ? 1 : (size + max_samples - 1) / max_samples;
}

// Layer l is g[begin[l], begin[l + 1]); pairs (indices[j], values[j]) are the sent update, indices
// global, ascending, < begin.back(). raw_sq of a sampled layer is the sum over its samples scaled
// by size / samples.
std::vector<LayerStepStats> ComputeLayerStepStats(const float* g, const std::vector<uint32_t>& begin,
                                                  const uint32_t* indices, const float* values, size_t count,
                                                  size_t max_samples);

// cos(g_l, sent_l) from a step's stats: dot / sqrt(raw_sq * sent_sq); 1 when both are zero, 0
// when only one is.
double StepCosine(const LayerStepStats& s);

}  // namespace osprey::codec
