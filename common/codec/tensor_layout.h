// TensorLayout: where a model's parameter tensors lie in its flat dense vector (names, offsets,
// sizes), so that compression can choose k per layer (granularity "layer") and report per-layer
// diagnostics. A model lists its tensors in order (models::Model::dense_tensors); the compressor
// maps them onto each push message (LayerSegments).
//
// Thread-safety: plain values and pure functions.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "common/status.h"

namespace osprey::codec {

struct TensorSpan {
  std::string name;     // e.g. "bottom.0.weight"
  uint64_t offset = 0;  // first float in the flat vector
  uint64_t size = 0;    // floats, > 0
};
using TensorLayout = std::vector<TensorSpan>;

// OK when the spans are non-empty, ascending, back to back from 0 and cover exactly `total`
// floats; else InvalidArgument naming the first bad span ("tensor 2 'top.0.weight' starts at 40,
// expected 36").
Status ValidateTensorLayout(const TensorLayout& layout, uint64_t total);

// One piece of a push message that belongs to one tensor: message floats [begin, begin + size).
struct LayerSegment {
  uint32_t tensor = 0;  // index into the layout
  size_t begin = 0;
  size_t size = 0;
};

// Cuts a message into per-tensor segments. The message is the concatenation of the table ranges
// (first float, floats) in ascending order; a tensor's floats inside the message are therefore
// one contiguous run of it (a tensor split across servers gets one segment in each server's
// message). `layout` must be valid for a vector covering every range. Segments come in message
// order; their sizes sum to the message length.
std::vector<LayerSegment> LayerSegments(const TensorLayout& layout,
                                        const std::vector<std::pair<uint64_t, uint64_t>>& ranges);

}  // namespace osprey::codec
