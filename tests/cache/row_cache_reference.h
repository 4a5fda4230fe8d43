// The reference model of RowCache's contract, shared by the tests of RowCache and ShardedRowCache:
// what the cache must hold, rebuilt from what its plans said, and the checks one successful plan
// must pass against it (slots in range and distinct, held keys keep their slot and miss iff stale,
// absent keys miss, only unpinned keys of other calls are evicted, stats move by what the plan did).
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <set>
#include <vector>

#include "common/status.h"
#include "worker/cache/row_cache.h"

namespace osprey::worker::cache_testing {

// One Plan call and everything it returned.
struct Planned {
  Status status;
  std::vector<int32_t> slots;
  std::vector<uint64_t> miss_keys;
  std::vector<int32_t> miss_slots;

  int32_t SlotOf(const std::vector<uint64_t>& keys, uint64_t key) const {
    return slots[std::find(keys.begin(), keys.end(), key) - keys.begin()];
  }
  bool Missed(uint64_t key) const {
    return std::find(miss_keys.begin(), miss_keys.end(), key) != miss_keys.end();
  }
};

template <typename Cache>
Planned PlanStep(Cache* cache, int64_t step, const std::vector<uint64_t>& keys) {
  Planned p;
  p.slots.assign(keys.size(), -7);
  p.status = cache->Plan(step, keys.data(), keys.size(), p.slots.data(), &p.miss_keys, &p.miss_slots);
  return p;
}

// The reference: what the cache must hold, from what its plans said.
struct Reference {
  struct Entry {
    int32_t slot;
    int64_t version;
    int64_t last_used;
  };
  std::map<uint64_t, Entry> by_key;
  std::map<int32_t, uint64_t> by_slot;

  void Remove(uint64_t key) {
    by_slot.erase(by_key.at(key).slot);
    by_key.erase(key);
  }
};

// Checks one successful plan against the reference and applies it there.
inline void CheckPlan(const Planned& p, const std::vector<uint64_t>& keys, int64_t step, int64_t bound, int pinned,
               uint64_t capacity, const RowCacheStats& before, const RowCacheStats& after, Reference* ref) {
  ASSERT_EQ(p.miss_keys.size(), p.miss_slots.size());
  std::map<uint64_t, int32_t> missed;
  for (size_t j = 0; j < p.miss_keys.size(); ++j) {
    ASSERT_TRUE(missed.emplace(p.miss_keys[j], p.miss_slots[j]).second) << "key missed twice";
  }
  std::set<int32_t> used;
  const std::set<uint64_t> call(keys.begin(), keys.end());
  uint64_t hits = 0, stale = 0, absent = 0, evicted = 0;
  for (size_t i = 0; i < keys.size(); ++i) {
    const int32_t slot = p.slots[i];
    ASSERT_GE(slot, 0);
    ASSERT_LT(static_cast<uint64_t>(slot), capacity);
    ASSERT_TRUE(used.insert(slot).second) << "two keys share slot " << slot << " at step " << step;
    auto m = missed.find(keys[i]);
    if (m != missed.end()) {
      ASSERT_EQ(m->second, slot);
    }
    auto it = ref->by_key.find(keys[i]);
    if (it != ref->by_key.end()) {
      // A held key cannot be evicted by the call that plans it: same slot, missed iff stale.
      ASSERT_EQ(slot, it->second.slot) << "key " << keys[i] << " moved";
      const bool is_stale = step - it->second.version > bound;
      ASSERT_EQ(m != missed.end(), is_stale) << "key " << keys[i] << " at step " << step;
      if (is_stale) {
        it->second.version = step;
        ++stale;
      } else {
        ++hits;
      }
      it->second.last_used = step;
      continue;
    }
    ASSERT_TRUE(m != missed.end()) << "absent key " << keys[i] << " served from slot " << slot;
    ++absent;
    auto held = ref->by_slot.find(slot);
    if (held != ref->by_slot.end()) {
      const uint64_t victim = held->second;
      ASSERT_EQ(call.count(victim), 0u) << "evicted key " << victim << " planned by the same step";
      ASSERT_LE(ref->by_key.at(victim).last_used, step - pinned) << "evicted pinned key " << victim;
      ref->Remove(victim);
      ++evicted;
    }
    ref->by_key[keys[i]] = {slot, step, step};
    ref->by_slot[slot] = keys[i];
  }
  EXPECT_EQ(after.hits - before.hits, hits);
  EXPECT_EQ(after.misses_stale - before.misses_stale, stale);
  EXPECT_EQ(after.misses_absent - before.misses_absent, absent);
  EXPECT_EQ(after.evictions - before.evictions, evicted);
  EXPECT_EQ(after.lookups - before.lookups, keys.size());
}

}  // namespace osprey::worker::cache_testing
