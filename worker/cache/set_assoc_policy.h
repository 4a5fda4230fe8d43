// The rules of the GPU worker's device-resident row cache index (worker/cuda/sparse
// device_row_cache.h), shared by the device kernels and their CPU reference
// (worker/cache/set_assoc_row_cache.h) so that both decide every slot alike. Plain inline
// functions on integers; host and device (nvcc) code.
//
// The index is set-associative: `sets` sets of kWays ways each, slot = set * kWays + way. A key
// lives only in set SetOf(key, sets). Per way: the key, the step its row was pulled for
// (version), the step it was last used at (last_used; kNever: the way is free) and an 8-bit use
// counter (freq); per set, an 8-bit count of its evictions (ticks, for the counters' aging). Why sets and not one open-addressing table: a lookup is one warp reading the 32
// ways of one set (two coalesced 256-byte loads), eviction is a choice among those 32 ways (no
// global free list, no tombstones, no rehash), and sets never interact, so the absent keys of a
// step are inserted set by set in parallel with the same result as one after the other.
#pragma once

#include <cstdint>

#include "common/placement.h"

namespace osprey::worker::set_assoc {

constexpr int kWays = 32;
constexpr int64_t kNever = INT64_MIN;  // last_used / version of a free way
constexpr uint32_t kNoVictim = 0xFFFFFFFFu;

// The set of `key` among `sets` (> 0): the top 32 bits of Mix64(key), scaled (multiply-shift),
// so the sets stay independent of the servers' placement, which uses the same mix differently.
inline OSPREY_HOST_DEVICE uint32_t SetOf(uint64_t key, uint32_t sets) {
  return static_cast<uint32_t>(((Mix64(key) >> 32) * static_cast<uint64_t>(sets)) >> 32);
}

// A way used at a step > step - pinned_steps holds a row that a step still in flight reads: it is
// never evicted.
inline OSPREY_HOST_DEVICE bool Pinned(int64_t last_used, int64_t step, int pinned_steps) {
  return last_used != kNever && last_used > step - pinned_steps;
}

// The victim order of one way for a new key at `step`: a free way first, then the lowest use
// counter, then the lowest way; kNoVictim for a pinned way. The smallest score of the set wins.
inline OSPREY_HOST_DEVICE uint32_t VictimScore(int64_t last_used, uint8_t freq, int way, int64_t step,
                                               int pinned_steps) {
  if (Pinned(last_used, step, pinned_steps)) return kNoVictim;
  const uint32_t rank = last_used == kNever ? 0u : 1u + freq;
  return (rank << 5) | static_cast<uint32_t>(way);
}

// One more eviction in a set whose eviction count is *ticks: true (and the count back to 0) on
// every kWays-th, when the set's other unpinned counters are halved.
inline OSPREY_HOST_DEVICE bool Tick(uint8_t* ticks) {
  if (++*ticks < kWays) return false;
  *ticks = 0;
  return true;
}

// A hit's counter: one more use, saturating.
inline OSPREY_HOST_DEVICE uint8_t Bump(uint8_t freq) { return freq == 255 ? freq : static_cast<uint8_t>(freq + 1); }

}  // namespace osprey::worker::set_assoc
