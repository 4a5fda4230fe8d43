// MergeBuffer: the gradients of the pushes of one merge window, summed per key.
//
// Keys are sparse row ids (every entry `dim` floats) or dense chunk ids (each entry as wide as its
// chunk). Add() sums into an existing entry (duplicate keys, within one push or across pushes,
// are summed) or appends a new one; keys() / values() then hold the distinct keys in first-seen
// order and their summed gradients concatenated in that order, which is the layout
// Store::PushRows / PushChunks take, so a closed window is one Store call.
//
// The index is an open-addressing table of entry numbers (linear probing, grown at 50% load);
// Clear() keeps every allocation, so a steady stream of windows does not allocate.
//
// Thread-safety: none; owned by one TableShard, used under the server's work lock.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace osprey::server {

class MergeBuffer {
 public:
  MergeBuffer();

  // Per-entry statistics of the additions (per-row staleness policies): how many adds, the sum of
  // their lr weights 1 / max(1, s) and the sum of their staleness s.
  struct EntryStats {
    uint32_t adds = 0;
    float lr_weight_sum = 0;
    float staleness_sum = 0;
  };

  // Adds `width` floats of gradient `g` for `key`. A key must always be added with the same width.
  // `lr_weight` and `staleness` go into the entry's EntryStats.
  void Add(uint64_t key, const float* g, size_t width, float lr_weight = 1.0f,
           float staleness = 0.0f);
  // Hint: `key` will be added soon (prefetches its index slot; a batch of adds is bound by these
  // cache misses once the index outgrows the cache).
  void Prefetch(uint64_t key) const { __builtin_prefetch(&slots_[Mix(key) & mask_]); }
  // Multiplies every summed value by `factor` (the mean of a window: 1 / pushes).
  void Scale(float factor);
  // Forgets every entry, keeping the memory.
  void Clear();

  size_t num_keys() const { return keys_.size(); }
  bool empty() const { return keys_.empty(); }
  const uint64_t* keys() const { return keys_.data(); }
  const float* values() const { return values_.data(); }
  size_t num_values() const { return values_.size(); }
  const EntryStats* stats() const { return stats_.data(); }  // num_keys() entries

 private:
  static constexpr uint32_t kEmpty = 0xFFFFFFFFu;
  static uint64_t Mix(uint64_t key);
  void Grow();

  std::vector<uint64_t> keys_;     // distinct keys, first-seen order
  std::vector<size_t> offsets_;    // offsets_[i]: first float of keys_[i] in values_
  std::vector<float> values_;
  std::vector<EntryStats> stats_;  // parallel to keys_
  std::vector<uint32_t> slots_;    // entry index or kEmpty
  size_t mask_ = 0;
};

}  // namespace osprey::server
