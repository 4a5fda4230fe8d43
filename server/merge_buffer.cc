#include "server/merge_buffer.h"

#include <algorithm>

#include "common/placement.h"

namespace osprey::server {

MergeBuffer::MergeBuffer() : slots_(256, kEmpty), mask_(255) {}

uint64_t MergeBuffer::Mix(uint64_t key) { return Mix64(key); }

void MergeBuffer::Add(uint64_t key, const float* g, size_t width, float lr_weight,
                      float staleness) {
  if ((keys_.size() + 1) * 2 > slots_.size()) Grow();
  size_t i = Mix64(key) & mask_;
  while (slots_[i] != kEmpty) {
    uint32_t e = slots_[i];
    if (keys_[e] == key) {
      float* dst = values_.data() + offsets_[e];
      for (size_t j = 0; j < width; ++j) dst[j] += g[j];
      EntryStats& st = stats_[e];
      ++st.adds;
      st.lr_weight_sum += lr_weight;
      st.staleness_sum += staleness;
      return;
    }
    i = (i + 1) & mask_;
  }
  slots_[i] = static_cast<uint32_t>(keys_.size());
  keys_.push_back(key);
  offsets_.push_back(values_.size());
  values_.insert(values_.end(), g, g + width);
  stats_.push_back(EntryStats{1, lr_weight, staleness});
}

void MergeBuffer::Scale(float factor) {
  for (float& v : values_) v *= factor;
}

void MergeBuffer::Clear() {
  // Only the used slots are reset when the buffer is sparse relative to its index, so a small
  // window after a big one costs little.
  if (keys_.size() * 8 < slots_.size()) {
    for (uint64_t k : keys_) {
      size_t i = Mix64(k) & mask_;
      while (slots_[i] != kEmpty) {
        slots_[i] = kEmpty;
        i = (i + 1) & mask_;
      }
    }
  } else {
    std::fill(slots_.begin(), slots_.end(), kEmpty);
  }
  keys_.clear();
  offsets_.clear();
  values_.clear();
  stats_.clear();
}

void MergeBuffer::Grow() {
  slots_.assign(slots_.size() * 2, kEmpty);
  mask_ = slots_.size() - 1;
  for (size_t e = 0; e < keys_.size(); ++e) {
    size_t i = Mix64(keys_[e]) & mask_;
    while (slots_[i] != kEmpty) i = (i + 1) & mask_;
    slots_[i] = static_cast<uint32_t>(e);
  }
}

}  // namespace osprey::server
