// Layer-wise top-k on the GPU: exact top-k_l of every layer of one flat gradient, with error
// feedback (and DGC momentum) fused. The CPU reference is granularity "layer" of
// worker/compression.h: per layer, the codec stack of codec::MakeCodec (topk exact + error
// feedback) on that layer's floats, the frames merged with indices shifted by the layer's offset.
// Host API only (no CUDA headers); conventions of codec_kernels.h (device pointers, work enqueued
// on `stream`, nothing synchronizes).
//
// Design (segmented): every layer is cut into chunks of LayerTopKWorkspace::chunk() floats and
// each kernel's grid has one block per (layer, chunk), from a block -> (layer, chunk) table built
// once by the workspace, so a large layer is spread over many blocks and a small one costs one
// block. A step is eight launches on `stream`, whatever the number of layers:
//   1. fused EF pass (p, r, u) that also builds each layer's level-0 key histogram (12 bits; per
//      block in shared memory, flushed to the layer's global histogram with atomics);
//   2. per-layer decide (one block per layer: boundary bin by a scan, codec::DecideKeyLevel);
//   3-6. key levels 1 and 2 (12 and 7 bits): histogram over the chunks of the layers still
//      undecided (blocks of decided layers return at once), then the decide;
//   7. per-chunk counts of the keys above the threshold and of the ties at it;
//   8. ordered compaction: each block adds the counts of the chunks before it in its layer and
//      writes its pairs at their rank, so indices come out ascending; the ties at a layer's k-th
//      key are ranked by index in the same pass, so the lowest-index ties are sent.
// The dense data are read by passes 1, 3, 5 (only undecided layers), 7 and 8.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
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

// Device scratch of LayerTopK for one layer list: the block -> (layer, chunk) table, per-layer
// selection state and a 4096-bin key histogram per layer (16 KiB each), per-chunk counts. Create
// once per layer list and reuse (no allocation per call); owns its device memory. A workspace
// serves one stream at a time; after an error of a LayerTopK using it, recreate it.
class LayerTopKWorkspace {
 public:
  struct Impl;

  // begin: the host copy of LayerTopKArgs::d_begin (num_layers + 1 offsets, ascending, begin[0]
  // = 0, begin.back() < 2^32). chunk: floats per block; 0 picks it from the total size and the
  // device's SM count (a multiple of 4096, about four blocks per SM in all; tests pass a small one
  // to put chunk boundaries inside small layers). Synchronizes the device once (setup only).
  // Errors: InvalidArgument for a bad begin, ResourceExhausted, Internal.
  static StatusOr<std::unique_ptr<LayerTopKWorkspace>> Create(const std::vector<uint32_t>& begin, uint32_t chunk = 0);
  ~LayerTopKWorkspace();

  uint32_t num_layers() const;
  size_t n() const;             // begin.back()
  uint32_t chunk() const;       // floats per block
  uint32_t num_blocks() const;  // grid of the segmented kernels

  Impl& impl() { return *impl_; }

 private:
  explicit LayerTopKWorkspace(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// Fused EF + exact per-layer top-k of t (p as in EfTensor): writes total_k pairs (indices
// ascending, global to the tensor; then values of out.value_type) into out.payload, r = p minus
// what was sent, u = 0 where sent. Ties at a layer's k-th magnitude go to its lowest indices (NaN
// counts as the largest magnitude). `ws` was created from the same begin offsets as
// layers.d_begin. Errors: InvalidArgument for null pointers, n >= 2^32, out.capacity < total_k, a
// workspace of another size or layer count.
Status LayerTopK(const EfTensor& t, const LayerTopKArgs& layers, const SparseOutput& out, LayerTopKWorkspace* ws,
                 void* stream);

// The compression diagnostics of one step on the device: per layer (d_begin as above) the
// sampled ||g||^2, and over the sent pairs (indices ascending and global, values of `type`)
// ||sent||^2, <g, sent> and the nonzero count, into d_out[num_layers] (device). One block per
// layer. Reference: codec::ComputeLayerStepStats (equal up to the order of double additions).
// Errors: InvalidArgument for null pointers.
Status LayerStepStats(const float* d_g, const uint32_t* d_begin, uint32_t num_layers, const uint32_t* d_indices,
                      const void* d_values, codec::ValueType type, uint64_t count, uint32_t max_samples,
                      codec::LayerStepStats* d_out, void* stream);

}  // namespace osprey::cuda
