#include "common/codec/tensor_layout.h"

#include <algorithm>

namespace osprey::codec {

Status ValidateTensorLayout(const TensorLayout& layout, uint64_t total) {
  uint64_t next = 0;
  for (size_t i = 0; i < layout.size(); ++i) {
    const TensorSpan& t = layout[i];
    const std::string what = "tensor " + std::to_string(i) + " '" + t.name + "'";
    if (t.offset != next) {
      return InvalidArgument(what + " starts at " + std::to_string(t.offset) + ", expected " + std::to_string(next));
    }
    if (t.size == 0) return InvalidArgument(what + " is empty");
    next += t.size;
  }
  if (next != total) {
    return InvalidArgument("tensor layout covers " + std::to_string(next) + " floats, the vector has " +
                           std::to_string(total));
  }
  return Status::OK();
}

std::vector<LayerSegment> LayerSegments(const TensorLayout& layout,
                                        const std::vector<std::pair<uint64_t, uint64_t>>& ranges) {
  std::vector<LayerSegment> out;
  size_t pos = 0;  // message float where the current range starts
  for (const auto& [first, len] : ranges) {
    // The first tensor that ends after `first`.
    auto it = std::upper_bound(layout.begin(), layout.end(), first,
                               [](uint64_t x, const TensorSpan& t) { return x < t.offset + t.size; });
    uint64_t at = first;
    const uint64_t end = first + len;
    for (; at < end && it != layout.end(); ++it) {
      const uint64_t stop = std::min(end, it->offset + it->size);
      const uint32_t tensor = static_cast<uint32_t>(it - layout.begin());
      const size_t begin = pos + static_cast<size_t>(at - first);
      if (!out.empty() && out.back().tensor == tensor && out.back().begin + out.back().size == begin) {
        out.back().size += static_cast<size_t>(stop - at);  // the same tensor continues in the next chunk
      } else {
        out.push_back({tensor, begin, static_cast<size_t>(stop - at)});
      }
      at = stop;
    }
    pos += static_cast<size_t>(len);
  }
  return out;
}

}  // namespace osprey::codec
