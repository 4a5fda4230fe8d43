#include "worker/cache/row_cache.h"

#include <sys/mman.h>

#include <algorithm>
#include <cstdlib>
#include <memory>
#include <new>
#include <string>
#include <type_traits>

#include "common/logging.h"  // OSPREY_CHECK
#include "worker/data/random.h"  // Mix64: keys such as (feature << 48) ^ id are far from uniform

namespace osprey::worker {
namespace {

// How far ahead the lookup loops prefetch: enough to keep the core's line-fill buffers busy, which is
// what makes a plan over 10^5 keys scattered over a large table take milliseconds, not tens.
constexpr size_t kPrefetchDistance = 32;
constexpr uint8_t kMaxFreq = 255;


}  // namespace

StatusOr<std::unique_ptr<RowCache>> RowCache::Make(const RowCacheOptions& options) {
  if (options.capacity_rows < 1 || options.capacity_rows >= (uint64_t{1} << 31)) {
    return InvalidArgument("RowCacheOptions.capacity_rows must be in [1, 2^31), got " +
                           std::to_string(options.capacity_rows));
  }
  if (options.staleness_bound < 0) {
    return InvalidArgument("RowCacheOptions.staleness_bound must be >= 0, got " +
                           std::to_string(options.staleness_bound));
  }
  if (options.pinned_steps < 1) {
    return InvalidArgument("RowCacheOptions.pinned_steps must be >= 1, got " + std::to_string(options.pinned_steps));
  }
  try {
    return std::unique_ptr<RowCache>(new RowCache(options));
  } catch (const std::bad_alloc&) {
    return ResourceExhausted("row cache: cannot allocate the index of " + std::to_string(options.capacity_rows) +
                             " rows");
  }
}

void RowCache::FreeHuge::operator()(void* p) const { std::free(p); }

template <typename T>
RowCache::HugeArray<T> RowCache::AllocateHuge(size_t n, const T& fill) {
  static_assert(std::is_trivially_destructible<T>::value, "FreeHuge runs no destructors");
  constexpr size_t kHugePage = size_t{2} << 20;
  size_t bytes = std::max<size_t>(n * sizeof(T), 1);
  void* p = nullptr;
  if (bytes >= kHugePage) {
    bytes = (bytes + kHugePage - 1) / kHugePage * kHugePage;
    p = std::aligned_alloc(kHugePage, bytes);
#ifdef MADV_HUGEPAGE
    // Before the first touch, so that the faults themselves map huge pages. Only a hint: without
    // THP the array works the same, slower.
    if (p != nullptr) madvise(p, bytes, MADV_HUGEPAGE);
#endif
  } else {
    p = std::malloc(bytes);
  }
  if (p == nullptr) throw std::bad_alloc();
  HugeArray<T> array(static_cast<T*>(p));
  std::uninitialized_fill_n(array.get(), n, fill);
  return array;
}

RowCache::RowCache(const RowCacheOptions& options)
    : capacity_(options.capacity_rows),
      staleness_bound_(options.staleness_bound),
      pinned_steps_(options.pinned_steps),
      meta_(AllocateHuge(options.capacity_rows, SlotMeta{})) {
  free_.reserve(capacity_);
  for (uint64_t s = capacity_; s-- > 0;) free_.push_back(static_cast<int32_t>(s));  // slot 0 first
  int bits = 4;
  while ((uint64_t{1} << bits) < 2 * capacity_) ++bits;
  table_ = AllocateHuge(size_t{1} << bits, Entry{0, -1, 0});
  shift_ = 64 - bits;
  mask_ = (size_t{1} << bits) - 1;
}

inline size_t RowCache::Home(uint64_t key) const { return static_cast<size_t>(data::Mix64(key) >> shift_); }

int32_t RowCache::Find(uint64_t key) const {
  for (size_t i = Home(key);; i = (i + 1) & mask_) {
    const Entry& e = table_[i];
    if (e.slot < 0) return -1;
    if (e.key == key) return e.slot;
  }
}

int32_t RowCache::InsertOrFind(uint64_t key, int32_t slot) {
  const size_t home = Home(key);
  for (size_t i = home;; i = (i + 1) & mask_) {
    Entry& e = table_[i];
    if (e.slot < 0) {
      e = Entry{key, slot, static_cast<uint32_t>(home)};
      return slot;
    }
    if (e.key == key) return e.slot;
  }
}

void RowCache::Erase(uint64_t key) {
  size_t i = Home(key);
  while (table_[i].slot < 0 || table_[i].key != key) i = (i + 1) & mask_;
  // Backward-shift deletion: pull later entries of the probe run into the hole when the hole lies
  // on their probe path, so lookups never need tombstones and the load stays exact.
  for (size_t j = (i + 1) & mask_; table_[j].slot >= 0; j = (j + 1) & mask_) {
    const size_t home = table_[j].home;
    const bool stays = i <= j ? (i < home && home <= j) : (i < home || home <= j);
    if (!stays) {
      table_[i] = table_[j];
      i = j;
    }
  }
  table_[i].slot = -1;
}

uint64_t RowCache::PinnedSlots(int64_t step) const {
  uint64_t pinned = 0;
  for (const StepUses& u : uses_) {
    if (u.step > step - pinned_steps_) pinned += u.count;
  }
  return pinned;
}

void RowCache::ForgetUse(int64_t last_used) {
  auto it = std::lower_bound(uses_.begin(), uses_.end(), last_used,
                             [](const StepUses& u, int64_t s) { return u.step < s; });
  if (it != uses_.end() && it->step == last_used) --it->count;
}

void RowCache::Touch(SlotMeta* meta, int64_t step) {
  if (meta->last_used == step) return;  // one use per step
  if (meta->last_used != kNever) ForgetUse(meta->last_used);
  meta->last_used = step;
  if (uses_.empty() || uses_.back().step != step) uses_.push_back(StepUses{step, 0});
  ++uses_.back().count;
  if (meta->freq < kMaxFreq) ++meta->freq;
}

int32_t RowCache::AcquireSlot(int64_t step) {
  if (!free_.empty()) {
    const int32_t slot = free_.back();
    free_.pop_back();
    return slot;
  }
  const int64_t pinned_after = step - pinned_steps_;
  for (;;) {
    const int32_t slot = static_cast<int32_t>(hand_);
    if (++hand_ == capacity_) hand_ = 0;
    SlotMeta& m = meta_[slot];
    if (m.last_used > pinned_after) continue;
    if (m.freq == 0) {
      evicted_.push_back(m.key);  // erased from table_ by the caller, in one prefetched pass
      ++stats_.evictions;
      m.last_used = kNever;  // its step has left uses_ already: nothing to forget
      return slot;
    }
    m.freq >>= 1;
  }
}

Status RowCache::CheckCapacity(int64_t step, const int32_t* slots, size_t n, uint64_t pinned_now) {
  const uint64_t absent = absent_.size();
  if (absent <= free_.size()) return Status::OK();
  const int64_t pinned_after = step - pinned_steps_;
  uint64_t newly_pinned = 0;
  for (size_t i = 0; i < n; ++i) {
    if (i + kPrefetchDistance < n && slots[i + kPrefetchDistance] >= 0) {
      __builtin_prefetch(&meta_[slots[i + kPrefetchDistance]]);
    }
    if (slots[i] < 0) continue;
    SlotMeta& m = meta_[slots[i]];
    if (m.epoch == epoch_) continue;  // a repeated key
    m.epoch = epoch_;                 // scratch: the next call starts a new epoch
    newly_pinned += m.last_used <= pinned_after;
  }
  const uint64_t needed = pinned_now + newly_pinned + absent;
  if (needed <= capacity_) return Status::OK();
  return ResourceExhausted("row cache: capacity " + std::to_string(capacity_) + " rows cannot hold the " +
                           std::to_string(needed) + " distinct keys of the last " + std::to_string(pinned_steps_) +
                           " steps");
}

void RowCache::PlanOnePresent(int64_t step, uint64_t key, int32_t slot, std::vector<uint64_t>* miss_keys,
                              std::vector<int32_t>* miss_slots) {
  SlotMeta& m = meta_[slot];
  if (step - m.version > staleness_bound_) {
    m.version = step;
    miss_keys->push_back(key);
    miss_slots->push_back(slot);
    ++stats_.misses_stale;
  } else {
    ++stats_.hits;
  }
  Touch(&m, step);
}

void RowCache::LookupAndPlanPresent(int64_t step, const uint64_t* keys, size_t n, int32_t* slots,
                                    std::vector<uint64_t>* miss_keys, std::vector<int32_t>* miss_slots) {
  // A three-stage pipeline in one pass: key i + 2D's bucket is prefetched, key i + D is looked up
  // and its slot's metadata prefetched, key i is planned.
  constexpr size_t kD = kPrefetchDistance / 2;
  for (size_t j = 0; j < n + kD; ++j) {
    if (j + kD < n) __builtin_prefetch(&table_[Home(keys[j + kD])]);
    if (j < n) {
      slots[j] = Find(keys[j]);
      if (slots[j] >= 0) {
        __builtin_prefetch(&meta_[slots[j]]);
      } else {
        absent_.push_back(j);
      }
    }
    if (j >= kD && slots[j - kD] >= 0) PlanOnePresent(step, keys[j - kD], slots[j - kD], miss_keys, miss_slots);
  }
}

void RowCache::PlanPresent(int64_t step, const uint64_t* keys, size_t n, const int32_t* slots,
                           std::vector<uint64_t>* miss_keys, std::vector<int32_t>* miss_slots) {
  for (size_t i = 0; i < n; ++i) {
    if (i + kPrefetchDistance < n && slots[i + kPrefetchDistance] >= 0) {
      __builtin_prefetch(&meta_[slots[i + kPrefetchDistance]]);
    }
    if (slots[i] >= 0) PlanOnePresent(step, keys[i], slots[i], miss_keys, miss_slots);
  }
}

void RowCache::PlanAbsent(int64_t step, const uint64_t* keys, int32_t* slots, std::vector<uint64_t>* miss_keys,
                          std::vector<int32_t>* miss_slots) {
  // Three passes, so that each one's random probes of table_ can be prefetched: take a slot per
  // absent key (the hand's victims are pinned at once, so none is taken twice), erase the
  // victims' keys, insert the new keys.
  const size_t count = absent_.size();
  acquired_.clear();
  evicted_.clear();
  for (size_t k = 0; k < count; ++k) {
    const int32_t slot = AcquireSlot(step);
    SlotMeta& m = meta_[slot];
    m.version = step;
    Touch(&m, step);
    m.freq = 0;  // counts the uses after this one: a one-off key is the first to go
    acquired_.push_back(slot);
  }
  for (size_t k = 0; k < evicted_.size(); ++k) {
    if (k + kPrefetchDistance < evicted_.size()) __builtin_prefetch(&table_[Home(evicted_[k + kPrefetchDistance])]);
    Erase(evicted_[k]);
  }
  for (size_t k = 0; k < count; ++k) {
    if (k + kPrefetchDistance < count) __builtin_prefetch(&table_[Home(keys[absent_[k + kPrefetchDistance]])]);
    const size_t i = absent_[k];
    const int32_t fresh = acquired_[k];
    const int32_t slot = InsertOrFind(keys[i], fresh);
    slots[i] = slot;
    if (slot != fresh) {  // a repeat of a key this call inserted: give the slot back
      ForgetUse(step);
      meta_[fresh] = SlotMeta{};
      free_.push_back(fresh);
      ++stats_.hits;
      continue;
    }
    meta_[slot].key = keys[i];
    miss_keys->push_back(keys[i]);
    miss_slots->push_back(slot);
    ++stats_.misses_absent;
  }
}

void RowCache::StartStep(int64_t step) {
  // Steps that can no longer pin anything (now or later) leave uses_.
  uses_.erase(uses_.begin(), std::find_if(uses_.begin(), uses_.end(), [&](const StepUses& u) {
                return u.step > step - pinned_steps_;
              }));
  last_step_ = step;
}

Status RowCache::Plan(int64_t step, const uint64_t* keys, size_t n, int32_t* slots,
                      std::vector<uint64_t>* miss_keys, std::vector<int32_t>* miss_slots) {
  OSPREY_RETURN_IF_ERROR(PreparePlan(step, keys, n, slots, miss_keys, miss_slots));
  CommitPlan();
  return Status::OK();
}

Status RowCache::CheckPlanArguments(int64_t step, int64_t last_step, const uint64_t* keys, size_t n,
                                    const int32_t* slots, const std::vector<uint64_t>* miss_keys,
                                    const std::vector<int32_t>* miss_slots) {
  if (step < 0) return InvalidArgument("row cache: step must be >= 0, got " + std::to_string(step));
  if (step < last_step) {
    return InvalidArgument("row cache: step " + std::to_string(step) + " planned after step " +
                           std::to_string(last_step) + "; steps must be non-decreasing");
  }
  if (miss_keys == nullptr || miss_slots == nullptr || (n > 0 && (keys == nullptr || slots == nullptr))) {
    return InvalidArgument("row cache: Plan needs non-null keys, slots, miss_keys and miss_slots");
  }
  return Status::OK();
}

Status RowCache::PreparePlan(int64_t step, const uint64_t* keys, size_t n, int32_t* slots,
                             std::vector<uint64_t>* miss_keys, std::vector<int32_t>* miss_slots) {
  pending_.valid = false;
  OSPREY_RETURN_IF_ERROR(CheckPlanArguments(step, last_step_, keys, n, slots, miss_keys, miss_slots));
  miss_keys->clear();
  miss_slots->clear();
  if (++epoch_ == 0) {  // wrapped: old marks could alias the new epoch
    for (uint64_t s = 0; s < capacity_; ++s) meta_[s].epoch = 0;
    epoch_ = 1;
  }

  // When the call's keys fit beside the pinned slots whatever is present, nothing can fail: the
  // commit looks up and plans the present keys in one pass. Otherwise look up now, and count
  // exactly before anything changes.
  absent_.clear();
  miss_keys->reserve(n);
  miss_slots->reserve(n);
  const uint64_t pinned_now = PinnedSlots(step);
  const bool looked_up = n > capacity_ - pinned_now;
  if (looked_up) {
    for (size_t i = 0; i < n; ++i) {
      if (i + kPrefetchDistance < n) __builtin_prefetch(&table_[Home(keys[i + kPrefetchDistance])]);
      slots[i] = Find(keys[i]);
      if (slots[i] < 0) absent_.push_back(i);
    }
    OSPREY_RETURN_IF_ERROR(CheckCapacity(step, slots, n, pinned_now));
  }
  pending_ = PendingPlan{RowCachePlanCall{step, keys, n, slots, miss_keys, miss_slots}, true, looked_up};
  return Status::OK();
}

void RowCache::CommitPlan() {
  OSPREY_CHECK(pending_.valid);
  pending_.valid = false;
  const PendingPlan& p = pending_;
  StartStep(p.step);
  if (p.looked_up) {
    PlanPresent(p.step, p.keys, p.n, p.slots, p.miss_keys, p.miss_slots);
  } else {
    LookupAndPlanPresent(p.step, p.keys, p.n, p.slots, p.miss_keys, p.miss_slots);
  }
  // Present keys went first, so that all of them are pinned before the hand looks for victims.
  if (!absent_.empty()) PlanAbsent(p.step, p.keys, p.slots, p.miss_keys, p.miss_slots);
  stats_.lookups += p.n;
}

void RowCache::Invalidate(const int32_t* slots, size_t n) {
  pending_.valid = false;  // its lookup may name the slots freed here
  for (size_t i = 0; i < n; ++i) {
    const int32_t slot = slots[i];
    if (slot < 0 || static_cast<uint64_t>(slot) >= capacity_) continue;
    SlotMeta& m = meta_[slot];
    if (m.last_used == kNever) continue;  // already free
    Erase(m.key);
    ForgetUse(m.last_used);
    m = SlotMeta{};
    free_.push_back(slot);
  }
}

}  // namespace osprey::worker
