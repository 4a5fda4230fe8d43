// RowCache: the Redis store's in-memory rows of one sparse table -- the hot-row cache and the
// dirty rows not yet written to Redis. Clean rows beyond `capacity` are evicted (LRU: least
// recently used; LFU: fewest uses, halved at every eviction so old popularity fades), in
// batches once the cache is capacity/8 (at least 64) over; dirty rows are never evicted.
// Dirty tracking is by generation: TakeDirty hands out (key, generation) pairs and MarkClean
// cleans a row only if it was not written again since, so a concurrent flush never loses a write.
//
// Thread-safety: none (the store's mutex).
#pragma once

#include <algorithm>
#include <cstdint>
#include <memory>
#include <unordered_map>
#include <utility>
#include <vector>

#include "common/config/store_config.h"
#include "server/store.h"

namespace osprey::server::redis_store {

class RowCache {
 public:
  struct Row {
    std::unique_ptr<float[]> record;  // row_floats floats
    uint64_t history[kRowHistory] = {};
    uint64_t dirty_gen = 0;  // 0: clean
    bool listed = false;     // in dirty_ (awaiting TakeDirty)
    uint64_t last_use = 0;
    uint64_t uses = 0;
  };

  RowCache(size_t row_floats, uint64_t capacity, config::CachePolicy policy)
      : row_floats_(row_floats), capacity_(capacity), policy_(policy) {
    rows_.reserve(static_cast<size_t>(std::min<uint64_t>(capacity, 1u << 20)));
  }

  // What one cached row of `row_floats` floats costs in memory, estimated: its record, the map
  // node holding its key and bookkeeping, a bucket pointer and two allocator headers. A cache
  // given a budget in bytes (store.redis.cache_bytes) holds budget / BytesPerRow rows.
  static constexpr uint64_t BytesPerRow(size_t row_floats) {
    return row_floats * sizeof(float) + sizeof(std::pair<const uint64_t, Row>) + 2 * sizeof(void*) + 2 * 16;
  }

  size_t row_floats() const { return row_floats_; }
  uint64_t capacity() const { return capacity_; }
  size_t size() const { return rows_.size(); }
  size_t dirty() const { return dirty_count_; }

  // The cached row (counted as a use) or nullptr.
  Row* Find(uint64_t key);
  // The cached row without counting a use (flushes), or nullptr.
  Row* Peek(uint64_t key) {
    auto it = rows_.find(key);
    return it == rows_.end() ? nullptr : &it->second;
  }
  // A new row (record uninitialized) for a key not cached.
  Row* Insert(uint64_t key);
  void MarkDirty(uint64_t key, Row* row);
  // The dirty rows written since the last TakeDirty, with their generations.
  std::vector<std::pair<uint64_t, uint64_t>> TakeDirty();
  // After a write of generation `gen` of `key` succeeded.
  void MarkClean(uint64_t key, uint64_t gen);
  // After a write failed: the row is listed again (its data is still here, the newest).
  void Relist(uint64_t key);
  template <typename Fn>
  void ForEach(Fn&& fn) const {
    for (const auto& [key, r] : rows_) fn(key, r);
  }
  // Evicts clean rows down to capacity when over it by the slack.
  void MaybeEvict();
  // Drops the rows of keys[0..n), dirty or not (they moved to another server, or were evicted);
  // returns how many were cached. Not during a flush (TakeDirty .. MarkClean).
  size_t Erase(const uint64_t* keys, size_t n);

 private:
  const size_t row_floats_;
  const uint64_t capacity_;
  const config::CachePolicy policy_;
  std::unordered_map<uint64_t, Row> rows_;
  std::vector<uint64_t> dirty_;
  // Records of evicted rows, reused by Insert (a window's misses replace the evicted rows).
  static constexpr size_t kMaxFree = 1 << 16;
  std::vector<std::unique_ptr<float[]>> free_;
  size_t dirty_count_ = 0;
  uint64_t gen_ = 0;
  uint64_t tick_ = 0;
};

}  // namespace osprey::server::redis_store
