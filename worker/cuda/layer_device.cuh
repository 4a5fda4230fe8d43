// Private to worker/cuda: the device-side state of LayerTopK (layer_topk.cu) and the layout of its
// workspace (layer_workspace.cu).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "worker/cuda/layer_kernels.h"

namespace osprey::cuda {

// tie_key of a layer without ties: no 31-bit magnitude key equals it.
inline constexpr uint32_t kNoTieKey = UINT32_MAX;

// Selection progress of one layer, written only by the per-layer decide kernel. Once done, the
// layer sends every key >= lo and the `need` lowest-index elements whose key == tie_key.
struct LayerState {
  uint32_t prefix;       // resolved key digits above the next level
  uint32_t count_above;  // keys above the prefix range (all sent)
  uint32_t done;
  uint32_t lo;
  uint32_t tie_key;
  uint32_t need;
};

// One block of the segmented kernels: chunk `chunk` of layer `layer`. The table lists the layers
// in order and each layer's chunks in order, so a layer's chunks are consecutive blocks.
struct LayerSpan {
  uint32_t layer;
  uint32_t chunk;
};

// What every segmented kernel needs to find its floats.
struct LayerDeviceArgs {
  const LayerSpan* spans;
  const uint32_t* begin;  // LayerTopKArgs::d_begin
  uint32_t chunk;         // floats per block
};

struct LayerTopKWorkspace::Impl {
  DeviceBuffer spans;   // LayerSpan[num_blocks]
  DeviceBuffer states;  // LayerState[num_layers]
  DeviceBuffer hists;   // u32[num_layers * kMaxDigitBins]; all zero between calls
  DeviceBuffer counts;  // uint2[num_blocks]: keys sent whole, ties, per chunk
  size_t n = 0;
  uint32_t num_layers = 0;
  uint32_t chunk = 0;
  uint32_t num_blocks = 0;

  LayerDeviceArgs args(const uint32_t* d_begin) const { return LayerDeviceArgs{spans.as<LayerSpan>(), d_begin, chunk}; }
};

}  // namespace osprey::cuda
