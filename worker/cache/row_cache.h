// RowCache: the host-side index of a worker's hot-row cache of sparse-table rows.
//
// The rows themselves live elsewhere: a [capacity x dim] array that the caller owns (GPU memory,
// or a host array). RowCache only decides which slot of that array holds which key, which rows
// must be (re)pulled from the servers before a step may use them, and which rows to evict. It
// never touches row data.
//
// Per step the caller dedupes the step's keys (data::DedupeKeys), calls Plan, pulls the rows of
// the returned misses into the returned slots, and then gathers rows by slot. A row pulled for
// step p may serve step t while t - p <= staleness_bound (bounded staleness, as SSP allows);
// staleness_bound 0 re-pulls every row every step, which only saves the memory placement.
//
// Eviction rule (exact). Every slot carries an 8-bit use counter `freq` and the step it was last
// used at, `last_used` (a use: the slot was planned for some step; it counts once per step, so a
// key planned twice for the same step is one use). A slot is *pinned* at step t when last_used >
// t - pinned_steps: pinned slots are never evicted, so rows that steps still in flight (e.g. a
// pull or a gather overlapped with the next Plan) read stay put; the slots assigned by the
// current call are pinned by the same rule, since pinned_steps >= 1. A key that needs a slot gets
// a free one when there is one (lowest slot first on a fresh cache); otherwise a CLOCK hand sweeps
// the slots in index order from where it last stopped: a pinned slot is skipped unchanged; an
// unpinned slot with freq 0 is evicted and given to the key (the hand stops just past it); an
// unpinned slot with freq > 0 has freq halved and the hand moves on. A key entering the cache
// starts with freq 0; each later use adds 1 (saturating at 255). So the counters age by halving:
// a key used k times survives about log2(k) passes of the hand with no further use, while a key
// used once goes at the first pass after it leaves the pinned window. This is approximate LFU with
// exponential decay: one-off keys go first (a scan of new keys cannot flush the hot set), hot keys
// stay, keys that were hot long ago eventually leave. One search for a victim ends within 9 laps.
//
// Capacity: Plan fails with ResourceExhausted, changing nothing, when the distinct keys of the
// pinned window plus the call's new keys exceed capacity.
//
// Cost: Plan is O(n) expected (open addressing with linear probing at load <= 1/2, software
// prefetched) plus the hand's moves, O(evictions) amortised; no allocation in steady state. When
// n <= capacity - (slots pinned by earlier steps) the plan cannot fail and the lookup and the
// present keys take one pass; otherwise an extra counting pass precedes any change. Measured
// (osprey-bench-row-cache, 150k distinct Zipf keys per step): ~5 ms per Plan with no evictions,
// ~10 ms with ~67k evictions per step, on a loaded 2-core VM.
// Memory: about 64-96 bytes per slot (32 bytes of per-slot metadata, 2-4 hash entries of 16).
//
// Thread-safety: none. One planner thread owns a RowCache; it must not be shared without
// external locking. ShardedRowCache (sharded_row_cache.h) plans several RowCaches, one per shard,
// on a pool of threads.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <new>
#include <vector>

#include "common/status.h"

namespace osprey::worker {

struct RowCacheOptions {
  uint64_t capacity_rows = 0;   // slots, >= 1 and < 2^31
  int64_t staleness_bound = 0;  // a row pulled for step p serves step t while t - p <= bound; >= 0
  int pinned_steps = 2;         // slots used by steps > t - pinned_steps are never evicted; >= 1
};

// Cumulative counters since Make. lookups = hits + misses_absent + misses_stale; a failed Plan
// counts nothing. evictions counts slots the hand took from other keys (not Invalidate).
// The arguments of one Plan call (RowCache::Plan's contract), held between the phases of a plan:
// RowCache keeps them from PreparePlan to CommitPlan, ShardedRowCache for its planning threads.
struct RowCachePlanCall {
  int64_t step = 0;
  const uint64_t* keys = nullptr;
  size_t n = 0;
  int32_t* slots = nullptr;
  std::vector<uint64_t>* miss_keys = nullptr;
  std::vector<int32_t>* miss_slots = nullptr;
};

struct RowCacheStats {
  uint64_t lookups = 0;
  uint64_t hits = 0;
  uint64_t misses_absent = 0;
  uint64_t misses_stale = 0;
  uint64_t evictions = 0;

  RowCacheStats& operator+=(const RowCacheStats& o) {
    lookups += o.lookups;
    hits += o.hits;
    misses_absent += o.misses_absent;
    misses_stale += o.misses_stale;
    evictions += o.evictions;
    return *this;
  }
};

// Cache-line aligned, so that RowCaches planned on different threads (the shards of a
// ShardedRowCache) never share a line: stats_ is written for every key.
class alignas(64) RowCache {
 public:
  // Returns the cache, empty, or InvalidArgument naming the bad field, e.g.
  // "RowCacheOptions.capacity_rows must be in [1, 2^31), got 0".
  static StatusOr<std::unique_ptr<RowCache>> Make(const RowCacheOptions& options);

  // The argument checks of Plan, for a cache whose last planned step is last_step (-1: none):
  // InvalidArgument for a negative or decreasing step or a null array Plan needs. Shared with
  // ShardedRowCache so both report the same errors.
  static Status CheckPlanArguments(int64_t step, int64_t last_step, const uint64_t* keys, size_t n,
                                   const int32_t* slots, const std::vector<uint64_t>* miss_keys,
                                   const std::vector<int32_t>* miss_slots);

  RowCache(const RowCache&) = delete;
  RowCache& operator=(const RowCache&) = delete;

  // Plans step `step` for the n keys at `keys`, which should be distinct. On success slots[i]
  // (caller-owned, n entries) is the slot that holds keys[i]'s row for this step, distinct for
  // distinct keys. The keys whose rows must be pulled -- absent keys, and keys whose row was pulled
  // for a step p with step - p > staleness_bound -- are written to *miss_keys with their slots in
  // *miss_slots (both cleared first; their capacity is reused across calls): the stale keys in
  // input order, then the absent ones in input order (present keys are all pinned before the hand
  // looks for a victim, so none of this call's rows can be evicted by its own new keys). The
  // caller must write those rows into those slots before using the step; misses are recorded as
  // pulled for `step`. Every planned slot becomes used at `step` (see the eviction rule above).
  //
  // Errors, all leaving the cache as it was (no partial plan, stats unchanged; the contents of
  // slots[] and of the miss vectors are then unspecified):
  //   InvalidArgument: step < 0, step smaller than the last successfully planned step, or null
  //     pointers.
  //   ResourceExhausted: "row cache: capacity C rows cannot hold the N distinct keys of the last P
  //     steps" when the keys held for steps in (step - P, step] together with this call's keys
  //     number N > C (P = pinned_steps).
  // A repeated key gets the same slot as its first occurrence and is missed at most once (it is
  // counted as a hit), but it is tolerated, not intended: repeated absent keys are counted once
  // each by the capacity check, which may then refuse a plan that would have fit, and the repeat of
  // an absent key may evict one extra unpinned row.
  Status Plan(int64_t step, const uint64_t* keys, size_t n, int32_t* slots, std::vector<uint64_t>* miss_keys,
              std::vector<int32_t>* miss_slots);

  // Plan in two phases, for a caller that must make the plans of several caches all-or-nothing
  // (ShardedRowCache). PreparePlan takes Plan's arguments, runs all of Plan's checks -- including,
  // when the call might not fit, the lookup and the exact count -- and returns the error Plan would
  // return, changing nothing the cache means (slots[] and the miss vectors may be written). On OK
  // the plan is pending: CommitPlan() completes it exactly as Plan would have, and cannot fail;
  // Plan itself is PreparePlan then CommitPlan. A pending plan that is not wanted is simply dropped:
  // the next PreparePlan or Plan replaces it, and Invalidate cancels it. The arguments must stay
  // valid, and the cache otherwise untouched, until CommitPlan returns. CommitPlan with no pending
  // plan is a programmer error (OSPREY_CHECK).
  Status PreparePlan(int64_t step, const uint64_t* keys, size_t n, int32_t* slots, std::vector<uint64_t>* miss_keys,
                     std::vector<int32_t>* miss_slots);
  void CommitPlan();

  // The pull of these slots failed (or their rows are otherwise garbage): forgets the keys they
  // hold, so that the slots become free and the keys miss when next planned. Slots that are out of
  // range or already free are ignored.
  void Invalidate(const int32_t* slots, size_t n);

  RowCacheStats stats() const { return stats_; }
  uint64_t size() const { return capacity_ - free_.size(); }  // keys currently held
  uint64_t capacity() const { return capacity_; }

 private:
  static constexpr int64_t kNever = INT64_MIN;  // last_used / version of a free slot

  // Per-slot state; one 32-byte record so that a hit touches one cache line.
  struct SlotMeta {
    uint64_t key = 0;
    int64_t version = kNever;    // step the row was pulled for
    int64_t last_used = kNever;  // kNever: the slot is free
    uint32_t epoch = 0;          // == epoch_: already seen by the current Plan
    uint8_t freq = 0;
  };
  // One entry of the key -> slot table; slot < 0: empty. home (Home(key), < 2^32 since the table
  // has at most 2^32 entries) spares deletion a rehash of every entry it shifts.
  struct Entry {
    uint64_t key;
    int32_t slot;
    uint32_t home;
  };
  // How many occupied slots were last used at `step` (one record per recent planned step).
  struct StepUses {
    int64_t step;
    uint64_t count;
  };

  // Memory for the two randomly probed arrays, asking for transparent huge pages where the
  // kernel offers them (madvise): with 4 KiB pages nearly every probe of a large index is also a
  // TLB miss, and on a VM each one is a two-dimensional page walk.
  struct FreeHuge {
    void operator()(void* p) const;
  };
  template <typename T>
  using HugeArray = std::unique_ptr<T[], FreeHuge>;
  template <typename T>
  static HugeArray<T> AllocateHuge(size_t n, const T& fill);  // throws std::bad_alloc

  // Whole cache lines for a small vector written on every key (uses_): malloc could otherwise put
  // another thread's hot data, e.g. another shard's uses_, in the same line.
  template <typename T>
  struct LineAllocator {
    using value_type = T;
    LineAllocator() = default;
    template <typename U>
    LineAllocator(const LineAllocator<U>&) {}
    static size_t Bytes(size_t n) { return (n * sizeof(T) + 63) / 64 * 64; }
    T* allocate(size_t n) { return static_cast<T*>(::operator new(Bytes(n), std::align_val_t{64})); }
    void deallocate(T* p, size_t n) { ::operator delete(p, Bytes(n), std::align_val_t{64}); }
    bool operator==(const LineAllocator&) const { return true; }
    bool operator!=(const LineAllocator&) const { return false; }
  };

  explicit RowCache(const RowCacheOptions& options);

  size_t Home(uint64_t key) const;
  int32_t Find(uint64_t key) const;
  // Inserts key -> slot, or returns the slot already held by key (and inserts nothing).
  int32_t InsertOrFind(uint64_t key, int32_t slot);
  void Erase(uint64_t key);
  // Occupied slots last used at steps > step - pinned_steps_.
  uint64_t PinnedSlots(int64_t step) const;
  // Marks slot meta used at `step`: moves it to step's use count and bumps its counter.
  void Touch(SlotMeta* meta, int64_t step);
  void ForgetUse(int64_t last_used);
  // A slot for a new key at `step`: a free one, else the CLOCK victim (see the header comment),
  // whose key is appended to evicted_ but left in table_. Precondition: one exists (Plan's
  // capacity check).
  int32_t AcquireSlot(int64_t step);
  // The passes of Plan. The capacity check (after a lookup pass; it changes nothing the cache
  // means) is needed only when n > capacity - pinned_now; otherwise one pass looks up and plans
  // the present keys. StartStep commits to the step. The absent keys (absent_) go last.
  Status CheckCapacity(int64_t step, const int32_t* slots, size_t n, uint64_t pinned_now);
  void StartStep(int64_t step);
  void LookupAndPlanPresent(int64_t step, const uint64_t* keys, size_t n, int32_t* slots,
                            std::vector<uint64_t>* miss_keys, std::vector<int32_t>* miss_slots);
  void PlanPresent(int64_t step, const uint64_t* keys, size_t n, const int32_t* slots,
                   std::vector<uint64_t>* miss_keys, std::vector<int32_t>* miss_slots);
  void PlanOnePresent(int64_t step, uint64_t key, int32_t slot, std::vector<uint64_t>* miss_keys,
                      std::vector<int32_t>* miss_slots);
  void PlanAbsent(int64_t step, const uint64_t* keys, int32_t* slots, std::vector<uint64_t>* miss_keys,
                  std::vector<int32_t>* miss_slots);

  const uint64_t capacity_;
  const int64_t staleness_bound_;
  const int pinned_steps_;

  HugeArray<SlotMeta> meta_;      // [capacity]
  std::vector<int32_t> free_;     // free slots, popped from the back
  HugeArray<Entry> table_;        // [mask_ + 1], a power of two >= 2 * capacity
  int shift_ = 0;                 // 64 - log2(table size)
  size_t mask_ = 0;
  std::vector<StepUses, LineAllocator<StepUses>> uses_;  // ascending steps, only steps that may still pin
  uint64_t hand_ = 0;
  // Plan's scratch, kept to reuse its memory: positions of the absent keys, the slots taken for
  // them, the keys evicted from those slots.
  std::vector<size_t> absent_;
  std::vector<int32_t> acquired_;
  std::vector<uint64_t> evicted_;
  // The plan PreparePlan accepted, for CommitPlan. looked_up: slots[] and absent_ already hold the
  // lookup (the call might not have fit, so it was counted first).
  struct PendingPlan : RowCachePlanCall {
    bool valid = false;
    bool looked_up = false;
  };
  PendingPlan pending_;
  uint32_t epoch_ = 0;
  int64_t last_step_ = -1;
  RowCacheStats stats_;
};

}  // namespace osprey::worker
