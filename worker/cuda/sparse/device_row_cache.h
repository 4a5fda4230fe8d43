// DeviceRowCache: the GPU worker's hot-row cache index on the device. The host never walks a
// step's keys: the deduped keys are looked up, inserted and evicted by kernels, the misses are
// compacted on the device, and only the step's counters (one small copy) and the miss keys cross
// to the host. The rules are worker/cache/set_assoc_row_cache.h's (its CPU reference): for the
// same calls both give the same slots, the same misses in the same order and the same counters
// (gpu_sparse_test checks that on Zipf streams, with overflow, staleness and eviction).
//
// Per Plan, on the caller's stream, for n distinct keys (all n known on the host, nothing else):
//   lookup   one warp per key reads its set's 32 ways (two coalesced loads), marks hits and stale
//            keys used (pinned) and flags the absent ones;
//   sort     one stable radix sort of (set of each absent key | a sentinel, position) over the
//            bits of the set count, so each set's absent keys are together in input order;
//   insert   one warp per set that has absent keys takes its ways (or scratch slots) one key after
//            the other, as the reference does;
//   misses   one scan of the miss flags and one scatter: the miss keys and slots in input order;
//   result   the step's miss count and the cumulative counters, copied to pinned host memory.
// With no sets (capacity below 32 rows: no reuse) the plan is one kernel: slot = scratch + i and
// every key a miss. No allocation, no host synchronization.
//
// Conventions as worker/cuda/sparse/sparse_kernels.h: d_* are device pointers, work is enqueued
// on `stream` and the call returns without waiting; argument errors are InvalidArgument (before
// anything is enqueued), "no CUDA device" FailedPrecondition, other CUDA errors Internal.
// Thread-safety: one caller at a time (the GPU loop's planner thread); plans and Reset must be
// ordered on one stream.
#pragma once

#include <cstdint>
#include <memory>

#include "common/status.h"
#include "worker/cache/set_assoc_row_cache.h"
#include "worker/cuda/codec_kernels.h"

namespace osprey::cuda {

class DeviceRowCache {
 public:
  // The index (all ways free) and its scratch for options.max_keys keys, on the current device.
  // Errors: SetAssocRowCache::Make's InvalidArgument; ResourceExhausted when device or pinned
  // memory runs out; FailedPrecondition without a device.
  static StatusOr<std::unique_ptr<DeviceRowCache>> Make(const worker::SetAssocOptions& options);

  DeviceRowCache(const DeviceRowCache&) = delete;
  DeviceRowCache& operator=(const DeviceRowCache&) = delete;

  // Enqueues the plan of `step` for the n distinct keys at d_keys: d_slots[i] the slot of key i,
  // d_miss_keys / d_miss_slots (room for n) the misses in input order. After the stream has
  // passed this point, last_misses() is their count and stats() the counters. Errors as
  // SetAssocRowCache::Plan (InvalidArgument, nothing enqueued) plus launch errors.
  Status Plan(int64_t step, const uint64_t* d_keys, int n, int32_t* d_slots, uint64_t* d_miss_keys,
              int32_t* d_miss_slots, void* stream);
  // After a Plan, on the same stream: for keys that came grouped (group g's keys are the next
  // d_group_counts[g] keys of that plan's input, groups in order), d_miss_counts[g] = the misses
  // of group g. The misses keep input order, so group g's misses are the next d_miss_counts[g]
  // miss keys: a GPU worker's keys come grouped by server, and so its misses can be pulled by
  // server without hashing them again. InvalidArgument for groups < 1 or a null pointer.
  Status CountMissesByGroup(const int32_t* d_group_counts, int groups, int32_t* d_miss_counts, void* stream);
  // Enqueues: every way free (the counters stay). The next plan may be for any step >= 0.
  Status Reset(void* stream);

  // Valid once the stream has passed the last Plan.
  int32_t last_misses() const;
  worker::SetAssocStats stats() const;

  uint32_t sets() const { return sets_; }
  uint64_t slot_count() const;  // rows of the caller's row array: the ways, then the scratch
  const worker::SetAssocOptions& options() const { return options_; }

 private:
  explicit DeviceRowCache(const worker::SetAssocOptions& options);
  Status Allocate();

  worker::SetAssocOptions options_;
  uint32_t sets_ = 0;
  int sort_bits_ = 1;
  int64_t last_step_ = -1;
  int last_n_ = 0;  // keys of the last Plan
  DeviceBuffer key_, version_, last_used_, freq_;  // per way
  DeviceBuffer ticks_;                             // per set
  DeviceBuffer flags_;      // int32 [3 x max_keys]: miss, absent, miss position
  DeviceBuffer sort_set_;   // uint32 [2 x max_keys]
  DeviceBuffer sort_pos_;   // int32 [2 x max_keys]
  DeviceBuffer temp_;       // CUB scratch
  size_t temp_bytes_ = 0;
  DeviceBuffer counters_;   // the device's Counters (device_row_cache.cu)
  PinnedBuffer h_counters_;
};

}  // namespace osprey::cuda
