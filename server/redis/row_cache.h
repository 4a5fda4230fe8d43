// RowCache: the Redis store's in-memory rows of one sparse table -- the hot-row cache and the
// dirty rows not yet written to Redis. Clean rows beyond `capacity` are evicted (LRU: least
// recently used; LFU: fewest uses, halved at every eviction so old popularity fades), in
// batches once the cache is capacity/8 (at least 64) over; dirty rows are never evicted.
// Dirty tracking is by generation: TakeDirty hands out (key, generation) pairs and MarkClean
// cleans a row only if it was not written again since, so a concurrent flush never loses a write.
// Layout: an open-addressing index (key -> row id, 12 bytes a slot) over rows and records kept in
// fixed chunks: a lookup is one probe into a flat array and one row, where a node-based hash map
// chased three pointers (it was a quarter of a write_back push's CPU time).
//
// Thread-safety: none (the store's mutex).
#pragma once

#include <algorithm>
#include <cstdint>
#include <memory>
#include <utility>
#include <vector>

#include "common/config/store_config.h"
#include "server/store.h"

namespace osprey::server::redis_store {

class RowCache {
 public:
  // A cached row. Its address and its record's stay fixed until the row is evicted or erased.
  struct Row {
    float* record = nullptr;  // row_floats floats
    uint64_t history[kRowHistory] = {};
    uint64_t key = 0;
    uint64_t dirty_gen = 0;  // 0: clean
    uint64_t last_use = 0;
    uint64_t uses = 0;
    uint32_t id = 0;  // its place in the chunks (fixed)
    bool listed = false;  // in dirty_ (awaiting TakeDirty)
    bool live = false;
  };

  RowCache(size_t row_floats, uint64_t capacity, config::CachePolicy policy);

  // What one cached row of `row_floats` floats costs in memory, estimated: its record, its Row and
  // two index slots (the index stays at most half full). A cache given a budget in bytes
  // (store.redis.cache_bytes) holds budget / BytesPerRow rows.
  static constexpr uint64_t BytesPerRow(size_t row_floats) {
    return row_floats * sizeof(float) + sizeof(Row) + 2 * sizeof(Slot);
  }

  size_t row_floats() const { return row_floats_; }
  uint64_t capacity() const { return capacity_; }
  size_t size() const { return size_; }
  size_t dirty() const { return dirty_count_; }

  // The cached row (counted as a use) or nullptr.
  Row* Find(uint64_t key) {
    Row* r = Peek(key);
    if (r != nullptr) {
      r->last_use = ++tick_;
      ++r->uses;
    }
    return r;
  }
  // The cached row without counting a use (flushes), or nullptr.
  Row* Peek(uint64_t key) {
    for (size_t i = Home(key);; i = (i + 1) & mask_) {
      const Slot& s = index_[i];
      if (s.id == kNone) return nullptr;
      if (s.key == key) return RowAt(s.id);
    }
  }
  // The live row whose id is `id` (Row::id), or nullptr.
  Row* ById(uint32_t id) const {
    if (id >= next_id_) return nullptr;
    Row* r = RowAt(id);
    return r->live ? r : nullptr;
  }
  // Hints the CPU to load the index slot of `key` (a batch walks its keys a few ahead).
  void Prefetch(uint64_t key) const { __builtin_prefetch(&index_[Home(key)]); }
  // A new row (record uninitialized, history zero) for a key not cached; the cached row if it is.
  Row* Insert(uint64_t key);
  void MarkDirty(Row* row);
  // The dirty rows written since the last TakeDirty, with their generations.
  std::vector<std::pair<uint64_t, uint64_t>> TakeDirty();
  // After a write of generation `gen` of `key` succeeded.
  void MarkClean(uint64_t key, uint64_t gen);
  // After a write failed: the row is listed again (its data is still here, the newest).
  void Relist(uint64_t key);
  template <typename Fn>
  void ForEach(Fn&& fn) const {
    for (uint32_t id = 0; id < next_id_; ++id) {
      const Row& r = *RowAt(id);
      if (r.live) fn(r.key, r);
    }
  }
  // Evicts clean rows down to capacity when over it by the slack.
  void MaybeEvict();
  // Drops the rows of keys[0..n), dirty or not (they moved to another server, or were evicted);
  // returns how many were cached. Not during a flush (TakeDirty .. MarkClean).
  size_t Erase(const uint64_t* keys, size_t n);

 private:
  // The index: open addressing, linear probing, deletion by backward shift; id kNone = empty.
  struct Slot {
    uint64_t key;
    uint32_t id;
  };
  static constexpr uint32_t kNone = ~0u;
  // Rows and records live in chunks of kChunkRows, so their addresses never move.
  static constexpr int kChunkShift = 12;
  static constexpr uint32_t kChunkRows = 1u << kChunkShift;

  size_t Home(uint64_t key) const {
    uint64_t x = key * 0x9e3779b97f4a7c15ull;
    return static_cast<size_t>(x ^ (x >> 29)) & mask_;
  }
  Row* RowAt(uint32_t id) const { return &row_chunks_[id >> kChunkShift][id & (kChunkRows - 1)]; }
  void Grow();
  void RemoveFromIndex(uint64_t key);
  // Takes row `r` out of the cache (index, dirty count) and frees its id; not out of dirty_.
  void Drop(Row* r);

  const size_t row_floats_;
  const uint64_t capacity_;
  const config::CachePolicy policy_;
  std::vector<Slot> index_;
  size_t mask_ = 0;
  std::vector<std::unique_ptr<Row[]>> row_chunks_;
  std::vector<std::unique_ptr<float[]>> record_chunks_;
  uint32_t next_id_ = 0;             // ids handed out so far
  std::vector<uint32_t> free_ids_;  // of evicted or erased rows, reused first
  std::vector<uint32_t> dirty_;     // ids listed for the next TakeDirty
  size_t size_ = 0;
  size_t dirty_count_ = 0;
  uint64_t gen_ = 0;
  uint64_t tick_ = 0;
};

}  // namespace osprey::server::redis_store
