#include "worker/cache/set_assoc_row_cache.h"

#include <algorithm>
#include <numeric>
#include <string>

namespace osprey::worker {

using set_assoc::kNever;
using set_assoc::kNoVictim;
using set_assoc::kWays;

Status CheckSetAssocPlan(int64_t step, int64_t last_step, int n, int max_keys, bool pointers_ok) {
  if (step < 0) return InvalidArgument("row cache: step " + std::to_string(step) + " is negative");
  if (step < last_step) {
    return InvalidArgument("row cache: step " + std::to_string(step) + " comes after step " +
                           std::to_string(last_step));
  }
  if (n < 0 || n > max_keys) {
    return InvalidArgument("row cache: " + std::to_string(n) + " keys in a step, at most " + std::to_string(max_keys));
  }
  if (n > 0 && !pointers_ok) return InvalidArgument("row cache: a null array");
  return Status::OK();
}

Status CheckSetAssocOptions(const SetAssocOptions& o) {
  if (o.staleness_bound < 0) {
    return InvalidArgument("row cache: staleness_bound must be >= 0, got " + std::to_string(o.staleness_bound));
  }
  if (o.pinned_steps < 1) return InvalidArgument("row cache: pinned_steps must be >= 1, got " + std::to_string(o.pinned_steps));
  if (o.max_keys < 1) return InvalidArgument("row cache: max_keys must be >= 1, got " + std::to_string(o.max_keys));
  const uint64_t slots = SetAssocSlotCount(o);
  if (slots >= (uint64_t{1} << 31)) {
    return InvalidArgument("row cache: " + std::to_string(slots) + " slots (capacity_rows " +
                           std::to_string(o.capacity_rows) + " plus " + std::to_string(o.pinned_steps) + " x " +
                           std::to_string(o.max_keys) + " scratch) exceed 2^31");
  }
  return Status::OK();
}

StatusOr<std::unique_ptr<SetAssocRowCache>> SetAssocRowCache::Make(const SetAssocOptions& o) {
  OSPREY_RETURN_IF_ERROR(CheckSetAssocOptions(o));
  return std::unique_ptr<SetAssocRowCache>(new SetAssocRowCache(o));
}

SetAssocRowCache::SetAssocRowCache(const SetAssocOptions& options)
    : options_(options), sets_(static_cast<uint32_t>(SetAssocSets(options))) {
  const size_t ways = static_cast<size_t>(sets_) * kWays;
  key_.assign(ways, 0);
  version_.assign(ways, kNever);
  last_used_.assign(ways, kNever);
  freq_.assign(ways, 0);
  ticks_.assign(sets_, 0);
}

void SetAssocRowCache::Reset() {
  std::fill(key_.begin(), key_.end(), 0);
  std::fill(version_.begin(), version_.end(), kNever);
  std::fill(last_used_.begin(), last_used_.end(), kNever);
  std::fill(freq_.begin(), freq_.end(), 0);
  std::fill(ticks_.begin(), ticks_.end(), 0);
  last_step_ = -1;
}

Status SetAssocRowCache::Plan(int64_t step, const uint64_t* keys, int n, int32_t* slots,
                              std::vector<uint64_t>* miss_keys, std::vector<int32_t>* miss_slots) {
  OSPREY_RETURN_IF_ERROR(CheckSetAssocPlan(step, last_step_, n, options_.max_keys,
                                           keys != nullptr && slots != nullptr && miss_keys != nullptr &&
                                               miss_slots != nullptr));
  last_step_ = step;
  const int pinned = options_.pinned_steps;
  std::vector<char> miss(n, 0);
  std::vector<int> absent;  // input positions
  std::vector<uint32_t> set_of(n, 0);
  SetAssocStats s;
  s.cache.lookups = n;
  // 1. lookup
  for (int i = 0; i < n; ++i) {
    if (sets_ == 0) {
      absent.push_back(i);
      continue;
    }
    const uint32_t set = set_assoc::SetOf(keys[i], sets_);
    set_of[i] = set;
    const size_t base = static_cast<size_t>(set) * kWays;
    int way = -1;
    for (int w = 0; w < kWays && way < 0; ++w) {
      if (last_used_[base + w] != kNever && key_[base + w] == keys[i]) way = w;
    }
    if (way < 0) {
      absent.push_back(i);
      continue;
    }
    const size_t slot = base + way;
    if (step - version_[slot] > options_.staleness_bound) {
      miss[i] = 1;
      version_[slot] = step;
      ++s.cache.misses_stale;
    } else {
      ++s.cache.hits;
    }
    last_used_[slot] = step;
    freq_[slot] = set_assoc::Bump(freq_[slot]);
    slots[i] = static_cast<int32_t>(slot);
  }
  // 2. insert, in (set, input position) order
  std::stable_sort(absent.begin(), absent.end(), [&](int a, int b) { return set_of[a] < set_of[b]; });
  const uint64_t scratch = ScratchBase(step);
  for (size_t p = 0; p < absent.size(); ++p) {
    const int i = absent[p];
    miss[i] = 1;
    ++s.cache.misses_absent;
    uint32_t best = kNoVictim;
    const size_t base = static_cast<size_t>(set_of[i]) * kWays;
    for (int w = 0; w < kWays && sets_ > 0; ++w) {
      best = std::min(best, set_assoc::VictimScore(last_used_[base + w], freq_[base + w], w, step, pinned));
    }
    if (best == kNoVictim) {
      ++s.overflows;
      slots[i] = static_cast<int32_t>(scratch + p);
      continue;
    }
    const int way = static_cast<int>(best & (kWays - 1));
    if (last_used_[base + way] != kNever) {
      ++s.cache.evictions;
      if (set_assoc::Tick(&ticks_[set_of[i]])) {
        for (int w = 0; w < kWays; ++w) {
          if (w != way && last_used_[base + w] != kNever && !set_assoc::Pinned(last_used_[base + w], step, pinned)) {
            freq_[base + w] >>= 1;
          }
        }
      }
    }
    key_[base + way] = keys[i];
    version_[base + way] = step;
    last_used_[base + way] = step;
    freq_[base + way] = 0;
    slots[i] = static_cast<int32_t>(base + way);
  }
  // 3. misses, input order
  miss_keys->clear();
  miss_slots->clear();
  for (int i = 0; i < n; ++i) {
    if (!miss[i]) continue;
    miss_keys->push_back(keys[i]);
    miss_slots->push_back(slots[i]);
  }
  stats_ += s;
  return Status::OK();
}

}  // namespace osprey::worker
