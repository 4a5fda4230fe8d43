// SetAssocRowCache: the CPU reference of the GPU worker's device-resident row cache index
// (cuda::DeviceRowCache, worker/cuda/sparse/device_row_cache.h). Both follow the rules below step
// for step, so for the same calls they return the same slots, the same misses in the same order
// and the same counters; gpu_sparse_test holds the device to that. The GPU loop uses the device
// index (worker.cache.index: device); this class is the specification and the test oracle.
//
// Layout: capacity_rows / kWays sets of kWays ways (set_assoc_policy.h); slot = set * kWays +
// way. Behind the sets, pinned_steps scratch areas of max_keys slots each: a key that finds no
// way it may take (every way of its set pinned) is served for this step only from scratch slot
// ScratchBase(step) + p, where p is its position among the step's absent keys ordered by (set,
// input position). With fewer than kWays rows of capacity there are no sets, and every key of
// every step is a scratch miss: the "no reuse" cache (every row re-pulled, exactly as without a
// cache) costs no index at all. A plan therefore never fails for lack of room.
//
// Plan(step, keys) for n distinct keys, in three phases:
//   1. lookup, each key alone: a key held by a way of its set is a hit when step - version <=
//      staleness_bound, else a stale miss (it keeps its way, version becomes step); either way
//      the way is used at step (last_used = step, which pins it) and its counter goes up by one.
//   2. insert: the absent keys, ordered by (set, input position), each takes the way of its set
//      with the smallest VictimScore (free first, then the least-used unpinned way, then the
//      lowest way): version = last_used = step, counter 0. Taking an occupied way is an eviction;
//      every kWays-th eviction of a set halves the counters of its other occupied unpinned ways
//      (aging, as a CLOCK hand's pass over kWays slots would: a key used k times outlives about
//      kWays x log2(k) evictions in its set without a use, a key used once goes first). A key
//      whose set has no such way is a scratch miss (overflow).
//   3. misses: every stale, absent and overflow key, in input order, with its slot.
// Sets never interact, so the device may run phase 2 one warp per set, and the result is the
// same as this sequential reference.
//
// Thread-safety: none (one planner thread).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "common/status.h"
#include "worker/cache/row_cache.h"
#include "worker/cache/set_assoc_policy.h"

namespace osprey::worker {

struct SetAssocOptions {
  uint64_t capacity_rows = 0;   // rows of the sets: capacity_rows / kWays sets (0 or < kWays: none)
  int64_t staleness_bound = 0;  // >= 0, as RowCacheOptions
  int pinned_steps = 2;         // >= 1, as RowCacheOptions (the GPU loop's ring)
  int max_keys = 0;             // distinct keys of one step at most; >= 1
};

// The layout, shared by the reference, the device index and the GPU loop's sizing: the sets
// (capacity_rows / kWays, rounded down), the first scratch row of `step`, and the rows in all.
inline uint64_t SetAssocSets(const SetAssocOptions& o) { return o.capacity_rows / set_assoc::kWays; }
inline uint64_t SetAssocScratchBase(const SetAssocOptions& o, int64_t step) {
  return SetAssocSets(o) * set_assoc::kWays +
         static_cast<uint64_t>(step % o.pinned_steps) * static_cast<uint64_t>(o.max_keys);
}
inline uint64_t SetAssocSlotCount(const SetAssocOptions& o) {
  return SetAssocScratchBase(o, 0) + static_cast<uint64_t>(o.pinned_steps) * static_cast<uint64_t>(o.max_keys);
}

// What one Plan did, and the sum over Plans (lookups = hits + misses_stale + misses_absent;
// overflows <= misses_absent are the absent keys served from scratch).
struct SetAssocStats {
  RowCacheStats cache;
  uint64_t overflows = 0;
  SetAssocStats& operator+=(const SetAssocStats& o) {
    cache += o.cache;
    overflows += o.overflows;
    return *this;
  }
};

class SetAssocRowCache {
 public:
  // InvalidArgument naming the field: staleness_bound < 0, pinned_steps < 1, max_keys < 1, or
  // more than 2^31 slots in all.
  static StatusOr<std::unique_ptr<SetAssocRowCache>> Make(const SetAssocOptions& options);

  // Plans `step` (see above). slots: n entries. Misses replace *miss_keys / *miss_slots.
  // InvalidArgument (nothing changed): step < 0, step below the last planned step, n < 0 or above
  // max_keys, a null pointer.
  Status Plan(int64_t step, const uint64_t* keys, int n, int32_t* slots, std::vector<uint64_t>* miss_keys,
              std::vector<int32_t>* miss_slots);
  // Every way free again (a rewind: the rows are from before it); the counters stay.
  void Reset();

  const SetAssocStats& stats() const { return stats_; }
  uint32_t sets() const { return sets_; }
  // Rows the caller's row array needs: the sets' slots, then the scratch areas.
  uint64_t slot_count() const { return SetAssocSlotCount(options_); }
  uint64_t ScratchBase(int64_t step) const { return SetAssocScratchBase(options_, step); }

 private:
  explicit SetAssocRowCache(const SetAssocOptions& options);

  SetAssocOptions options_;
  uint32_t sets_ = 0;
  std::vector<uint64_t> key_;
  std::vector<int64_t> version_, last_used_;
  std::vector<uint8_t> freq_;
  std::vector<uint8_t> ticks_;  // per set: evictions since its counters were last halved
  int64_t last_step_ = -1;
  SetAssocStats stats_;
};

// The checks of Make and of Plan's arguments, shared with the device index so both refuse alike.
Status CheckSetAssocOptions(const SetAssocOptions& options);
Status CheckSetAssocPlan(int64_t step, int64_t last_step, int n, int max_keys, bool pointers_ok);

}  // namespace osprey::worker
