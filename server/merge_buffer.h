// MergeBuffer: the gradients of the pushes of one merge window, summed per key.
//
// Keys are sparse row ids (every entry `dim` floats) or dense chunk ids (each entry as wide as its
// chunk). keys() holds the distinct keys in first-seen order; Gradients() gives, per key, a
// pointer to its summed gradient, which is what Updater::ApplyRows / ApplyChunks (pointer form)
// take, so a closed window is one Updater call.
//
// Entries are kept by reference where possible: a key added once points at the floats it was
// added with (AddRef: the caller keeps them alive and unchanged until Clear(), e.g. by Hold()ing
// the push's values frame), so a window of mostly distinct keys copies no gradient at all. Only a
// key added a second time gets a slot in the buffer's own arena (its first gradient copied, later
// ones summed into it, in the order added: the same floats, bit for bit, as summing copies).
// Add() copies into the arena at once (for gradients the caller cannot keep alive).
//
// The index is an open-addressing table of (key, entry) slots (linear probing, grown at 50% load),
// so a probe touches one cache line; Clear() keeps every allocation, so a steady stream of windows
// does not allocate.
//
// Thread-safety: none; owned by one TableShard, used under the server's work lock.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "common/buffer.h"
#include "server/huge_pages.h"

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
  // `lr_weight` and `staleness` go into the entry's EntryStats. AddRef keeps a pointer to `g`
  // (valid and unchanged until Clear()); Add copies it.
  void AddRef(uint64_t key, const float* g, size_t width, float lr_weight = 1.0f,
              float staleness = 0.0f);
  void Add(uint64_t key, const float* g, size_t width, float lr_weight = 1.0f,
           float staleness = 0.0f);
  // Keeps `b` (e.g. the values frame AddRef points into) alive until Clear().
  void Hold(Buffer b) { held_.push_back(std::move(b)); }
  // Hint: `key` will be added soon (prefetches its index slot; a batch of adds is bound by these
  // cache misses once the index outgrows the cache).
  void Prefetch(uint64_t key) const { __builtin_prefetch(&slots_[Mix(key) & mask_], 1); }
  // Forgets every entry and releases the held buffers, keeping the memory.
  void Clear();

  size_t num_keys() const { return keys_.size(); }
  bool empty() const { return keys_.empty(); }
  const uint64_t* keys() const { return keys_.data(); }
  // num_keys() pointers: entry i's summed gradient. Valid until the next Add* or Clear().
  const float* const* Gradients();
  const EntryStats* stats() const { return stats_.data(); }  // num_keys() entries

 private:
  struct Slot {
    uint64_t key;
    uint32_t entry;  // kEmpty when unused
  };
  static constexpr uint32_t kEmpty = 0xFFFFFFFFu;
  static constexpr size_t kNoArena = ~size_t{0};
  static uint64_t Mix(uint64_t key);
  // The entry of `key`, or a new one (src = nullptr, arena = kNoArena); *added: whether new.
  uint32_t Find(uint64_t key, bool* added);
  void Merge(uint32_t e, const float* g, size_t width, float lr_weight, float staleness);
  void Grow();

  std::vector<uint64_t> keys_;     // distinct keys, first-seen order
  std::vector<const float*> src_;  // entry's gradient when not in the arena (AddRef'd once)
  std::vector<size_t> arena_;      // entry's first float in values_, or kNoArena
  std::vector<float> values_;      // arena: copied / summed gradients
  std::vector<EntryStats> stats_;  // parallel to keys_
  std::vector<const float*> grads_;  // Gradients()
  std::vector<Buffer> held_;
  std::vector<Slot, HugePageAllocator<Slot>> slots_;
  size_t mask_ = 0;
};

}  // namespace osprey::server

namespace osprey::server {

// RowMergeBuffer: the same merge for a sparse table whose store has row ids
// (Store::has_row_ids): pushes resolve their keys to row ids once (the one hash lookup their rows
// need anyway) and the buffer only appends (row id, gradient reference, stats) per pushed row, with
// no index of its own. Merge() then sorts the adds by row id (a stable radix sort, so a row's adds
// stay in the order added) and sums duplicates in that order, into its own arena: the same floats,
// bit for bit, as MergeBuffer. The rows come out in increasing id order, which is the order of the
// store's arena, so the window's apply streams through memory instead of jumping.
//
// Thread-safety: none; owned by one TableShard, used under the server's work lock.
class RowMergeBuffer {
 public:
  using EntryStats = MergeBuffer::EntryStats;

  // Appends a pushed row: `width` floats of gradient `g` for store row `row`. AddRef keeps the
  // pointer (valid and unchanged until Clear()); Add copies the floats.
  void AddRef(uint32_t row, const float* g, float lr_weight = 1.0f, float staleness = 0.0f) {
    adds_.push_back(PendingAdd{g, kNoArena, lr_weight, staleness, row});
  }
  void Add(uint32_t row, const float* g, size_t width, float lr_weight = 1.0f,
           float staleness = 0.0f);
  void Hold(Buffer b) { held_.push_back(std::move(b)); }
  size_t num_adds() const { return adds_.size(); }
  bool empty() const { return adds_.empty(); }

  // Sorts and merges the adds (every one `width` floats wide); then rows(), Gradients() and
  // stats() describe num_rows() distinct rows in increasing id order. Call once per window.
  void Merge(size_t width);
  size_t num_rows() const { return rows_.size(); }
  const uint32_t* rows() const { return rows_.data(); }
  const float* const* Gradients() const { return grads_.data(); }
  const EntryStats* stats() const { return stats_.data(); }

  // Forgets every add and releases the held buffers, keeping the memory.
  void Clear();

 private:
  static constexpr size_t kNoArena = ~size_t{0};
  struct PendingAdd {
    const float* src;  // when not copied
    size_t arena;      // first float in values_, or kNoArena
    float lr_weight;
    float staleness;
    uint32_t row;
  };
  const float* Source(const PendingAdd& a) const {
    return a.arena == kNoArena ? a.src : values_.data() + a.arena;
  }
  // order_: the indexes of adds_ sorted by row, stable.
  void SortByRow();

  std::vector<PendingAdd> adds_;
  std::vector<float> values_;  // arena: copied adds, then summed duplicates
  std::vector<Buffer> held_;
  std::vector<uint64_t> order_, tmp_;  // (row << 32) | add index
  std::vector<uint32_t> rows_;
  std::vector<const float*> grads_;
  std::vector<size_t> sum_at_;  // per output row: arena offset of its sum, or kNoArena
  std::vector<EntryStats> stats_;
};

}  // namespace osprey::server
