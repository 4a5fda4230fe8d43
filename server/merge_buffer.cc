#include "server/merge_buffer.h"

#include <algorithm>

#include "common/placement.h"

namespace osprey::server {

MergeBuffer::MergeBuffer() : slots_(256, Slot{0, kEmpty}), mask_(255) {}

uint64_t MergeBuffer::Mix(uint64_t key) { return Mix64(key); }

uint32_t MergeBuffer::Find(uint64_t key, bool* added) {
  if ((keys_.size() + 1) * 2 > slots_.size()) Grow();
  size_t i = Mix64(key) & mask_;
  while (slots_[i].entry != kEmpty) {
    if (slots_[i].key == key) {
      *added = false;
      return slots_[i].entry;
    }
    i = (i + 1) & mask_;
  }
  const uint32_t e = static_cast<uint32_t>(keys_.size());
  slots_[i] = Slot{key, e};
  keys_.push_back(key);
  src_.push_back(nullptr);
  arena_.push_back(kNoArena);
  stats_.push_back(EntryStats{0, 0.0f, 0.0f});
  *added = true;
  return e;
}

void MergeBuffer::Merge(uint32_t e, const float* g, size_t width, float lr_weight,
                        float staleness) {
  if (arena_[e] == kNoArena) {
    // Second add of a referenced key: copy its first gradient into the arena, then sum there.
    arena_[e] = values_.size();
    values_.insert(values_.end(), src_[e], src_[e] + width);
    src_[e] = nullptr;
  }
  float* dst = values_.data() + arena_[e];
  for (size_t j = 0; j < width; ++j) dst[j] += g[j];
  EntryStats& st = stats_[e];
  ++st.adds;
  st.lr_weight_sum += lr_weight;
  st.staleness_sum += staleness;
}

void MergeBuffer::AddRef(uint64_t key, const float* g, size_t width, float lr_weight,
                         float staleness) {
  bool added = false;
  const uint32_t e = Find(key, &added);
  if (!added) return Merge(e, g, width, lr_weight, staleness);
  src_[e] = g;
  stats_[e] = EntryStats{1, lr_weight, staleness};
}

void MergeBuffer::Add(uint64_t key, const float* g, size_t width, float lr_weight,
                      float staleness) {
  bool added = false;
  const uint32_t e = Find(key, &added);
  if (!added) return Merge(e, g, width, lr_weight, staleness);
  arena_[e] = values_.size();
  values_.insert(values_.end(), g, g + width);
  stats_[e] = EntryStats{1, lr_weight, staleness};
}

const float* const* MergeBuffer::Gradients() {
  grads_.resize(keys_.size());
  for (size_t e = 0; e < keys_.size(); ++e) {
    grads_[e] = arena_[e] == kNoArena ? src_[e] : values_.data() + arena_[e];
  }
  return grads_.data();
}

void MergeBuffer::Clear() {
  // Only the used slots are reset when the buffer is sparse relative to its index, so a small
  // window after a big one costs little.
  if (keys_.size() * 8 < slots_.size()) {
    for (uint64_t k : keys_) {
      size_t i = Mix64(k) & mask_;
      while (slots_[i].entry != kEmpty) {
        slots_[i].entry = kEmpty;
        i = (i + 1) & mask_;
      }
    }
  } else {
    std::fill(slots_.begin(), slots_.end(), Slot{0, kEmpty});
  }
  keys_.clear();
  src_.clear();
  arena_.clear();
  values_.clear();
  stats_.clear();
  grads_.clear();
  held_.clear();
}

void MergeBuffer::Grow() {
  slots_.assign(slots_.size() * 2, Slot{0, kEmpty});
  mask_ = slots_.size() - 1;
  for (size_t e = 0; e < keys_.size(); ++e) {
    size_t i = Mix64(keys_[e]) & mask_;
    while (slots_[i].entry != kEmpty) i = (i + 1) & mask_;
    slots_[i] = Slot{keys_[e], static_cast<uint32_t>(e)};
  }
}

}  // namespace osprey::server

namespace osprey::server {

void RowMergeBuffer::Add(uint32_t row, const float* g, size_t width, float lr_weight,
                         float staleness) {
  adds_.push_back(PendingAdd{nullptr, values_.size(), lr_weight, staleness, row});
  values_.insert(values_.end(), g, g + width);
}

void RowMergeBuffer::SortByRow() {
  const size_t n = adds_.size();
  order_.resize(n);
  uint32_t max_row = 0;
  for (size_t i = 0; i < n; ++i) {
    order_[i] = (uint64_t{adds_[i].row} << 32) | i;
    max_row = std::max(max_row, adds_[i].row);
  }
  // LSD radix sort on the row bits only, 11 bits a pass: 2 passes for up to 4M rows. Each pass is
  // stable and the add index breaks no ties itself, so equal rows keep their add order.
  constexpr int kBits = 11;
  constexpr size_t kBuckets = size_t{1} << kBits;
  tmp_.resize(n);
  std::vector<size_t> count(kBuckets);
  for (int shift = 32; shift < 64 && (uint64_t{max_row} >> (shift - 32)) != 0; shift += kBits) {
    std::fill(count.begin(), count.end(), 0);
    for (uint64_t v : order_) ++count[(v >> shift) & (kBuckets - 1)];
    size_t sum = 0;
    for (size_t& c : count) {
      const size_t k = c;
      c = sum;
      sum += k;
    }
    for (uint64_t v : order_) tmp_[count[(v >> shift) & (kBuckets - 1)]++] = v;
    order_.swap(tmp_);
  }
}

void RowMergeBuffer::Merge(size_t width) {
  SortByRow();
  rows_.clear();
  sum_at_.clear();
  stats_.clear();
  grads_.clear();
  const size_t n = order_.size();
  for (size_t i = 0; i < n;) {
    const PendingAdd& first = adds_[static_cast<uint32_t>(order_[i])];
    size_t j = i + 1;
    while (j < n && (order_[j] >> 32) == first.row) ++j;
    EntryStats st{1, first.lr_weight, first.staleness};
    size_t at = first.arena;  // a copied single add is read from the arena
    if (j - i > 1) {
      // Sum in add order, starting from a copy of the first: as MergeBuffer does.
      at = values_.size();
      const float* f = Source(first);
      values_.insert(values_.end(), f, f + width);
      for (size_t k = i + 1; k < j; ++k) {
        const PendingAdd& a = adds_[static_cast<uint32_t>(order_[k])];
        const float* g = Source(a);
        float* dst = values_.data() + at;
        for (size_t d = 0; d < width; ++d) dst[d] += g[d];
        ++st.adds;
        st.lr_weight_sum += a.lr_weight;
        st.staleness_sum += a.staleness;
      }
    }
    rows_.push_back(first.row);
    sum_at_.push_back(at);
    stats_.push_back(st);
    grads_.push_back(at == kNoArena ? first.src : nullptr);
    i = j;
  }
  // The arena may have moved while sums were appended: point into it only now.
  for (size_t r = 0; r < rows_.size(); ++r) {
    if (sum_at_[r] != kNoArena) grads_[r] = values_.data() + sum_at_[r];
  }
}

void RowMergeBuffer::Clear() {
  adds_.clear();
  values_.clear();
  held_.clear();
  order_.clear();
  rows_.clear();
  grads_.clear();
  sum_at_.clear();
  stats_.clear();
}

}  // namespace osprey::server
