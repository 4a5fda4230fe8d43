// Eviction: which rows of a sparse table to delete, from when each was last updated.
//
// It keeps, per live row key, the table version (step) and the time (µs of the caller's clock,
// which is injected: every call passes it) of the row's last update, in a list ordered by last
// update (least recent first). Since steps and times only grow, the front is the oldest by both,
// so a sweep looks only at the rows it evicts:
//   ttl_steps   evicted once step_now - last_step >= ttl_steps (ttl_steps versions passed
//               without updating it)
//   ttl_seconds evicted once now_us - last_us >= ttl_seconds * 1e6
//   max_rows    while more rows are tracked, the least recently updated are evicted
// A sweep evicts at most `max_ttl` rows by TTL (bounded work per merge window; the rest go at the
// next sweeps) and always enough by the cap to get back to max_rows.
//
// Pure: no store, no clock. Thread-safety: none.
#pragma once

#include <cstdint>
#include <functional>
#include <unordered_map>
#include <vector>

#include "common/config/table_config.h"

namespace osprey::server::admission {

class Eviction {
 public:
  explicit Eviction(const config::EvictionConfig& config);

  // Row `key` was updated at table version `step`, time `now_us` (both non-decreasing across
  // calls; an older pair is clamped to the newest seen).
  void Touch(uint64_t key, uint64_t step, int64_t now_us);
  // Forgets `key` (its row was deleted by someone else). No-op when not tracked.
  void Forget(uint64_t key);

  struct Evicted {
    std::vector<uint64_t> by_ttl;
    std::vector<uint64_t> by_cap;
  };
  // Removes and returns the rows to evict at (step, now_us) (see the file comment); clears *out
  // first.
  void Sweep(uint64_t step, int64_t now_us, size_t max_ttl, Evicted* out);

  size_t size() const { return index_.size(); }
  bool tracked(uint64_t key) const { return index_.count(key) != 0; }
  // fn(key, last_step, last_us) from least to most recently updated.
  void ForEach(const std::function<void(uint64_t, uint64_t, int64_t)>& fn) const;

 private:
  static constexpr uint32_t kNil = 0xFFFFFFFFu;
  struct Node {
    uint64_t key = 0;
    uint64_t step = 0;
    int64_t us = 0;
    uint32_t prev = kNil, next = kNil;
  };
  void Unlink(uint32_t i);
  void PushBack(uint32_t i);
  void Remove(uint32_t i);  // unlink, free the node, drop the index entry

  const config::EvictionConfig config_;
  std::vector<Node> nodes_;
  std::vector<uint32_t> free_;
  std::unordered_map<uint64_t, uint32_t> index_;
  uint32_t head_ = kNil, tail_ = kNil;  // least / most recently updated
  uint64_t last_step_ = 0;
  int64_t last_us_ = INT64_MIN;
};

}  // namespace osprey::server::admission
