// Layer-wise top-k on the GPU: exact top-k_l of every layer of one flat gradient, with error
// feedback (and DGC momentum) fused, all layers in one launch (one thread block per layer). The
// CPU reference is granularity "layer" of worker/compression.h: per layer, the codec stack of
// codec::MakeCodec (topk exact + error feedback) on that layer's floats, the frames merged with
// indices shifted by the layer's offset. Host API only (no CUDA headers); conventions of
// codec_kernels.h (device pointers, work enqueued on `stream`, nothing synchronizes).
//
// Cost: per layer one fused EF pass, three key-histogram passes (12, 12, 7 bits), tie passes only
// when the k-th magnitude is tied, and one ordered compaction pass; each block streams its
// layer from global memory, so the time is that of the largest layer when there are fewer
// layers than SMs, and of the total size over the SMs' bandwidth otherwise.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "common/codec/layer_stats.h"
#include "common/status.h"
#include "worker/cuda/codec_kernels.h"

namespace osprey::cuda {

// The layers of one gradient, device arrays. Layer l is floats [begin[l], begin[l + 1]) of the
// EfTensor; it sends k[l] <= its size pairs at payload positions [out[l], out[l + 1]).
struct LayerTopKArgs {
  const uint32_t* d_begin = nullptr;  // num_layers + 1, ascending, begin[0] = 0, begin[L] = t.n
  const uint32_t* d_k = nullptr;      // num_layers
  const uint32_t* d_out = nullptr;    // num_layers + 1: exclusive prefix sums of k
  uint32_t num_layers = 0;
  uint64_t total_k = 0;               // out[L] (host copy): the frame's count
};

// The k of each layer exactly as the CPU codec picks it: MakeTargets(size, FlooredDensity(
// density, size, min_k), 0).k (at least 1, at most the size).
std::vector<uint32_t> LayerKs(const std::vector<uint32_t>& sizes, double density, uint64_t min_k);

// Fused EF + exact per-layer top-k of t (p as in EfTensor): writes total_k pairs (indices
// ascending, global to the tensor; then values of out.value_type) into out.payload, r = p minus
// what was sent, u = 0 where sent. Ties at a layer's k-th magnitude go to its lowest indices.
// Errors: InvalidArgument for null pointers, n >= 2^32, out.capacity < total_k.
Status LayerTopK(const EfTensor& t, const LayerTopKArgs& layers, const SparseOutput& out, void* stream);

// The compression diagnostics of one step on the device: per layer (d_begin as above) the
// sampled ||g||^2, and over the sent pairs (indices ascending and global, values of `type`)
// ||sent||^2, <g, sent> and the nonzero count, into d_out[num_layers] (device). One block per
// layer. Reference: codec::ComputeLayerStepStats (equal up to the order of double additions).
// Errors: InvalidArgument for null pointers.
Status LayerStepStats(const float* d_g, const uint32_t* d_begin, uint32_t num_layers, const uint32_t* d_indices,
                      const void* d_values, codec::ValueType type, uint64_t count, uint32_t max_samples,
                      codec::LayerStepStats* d_out, void* stream);

}  // namespace osprey::cuda
