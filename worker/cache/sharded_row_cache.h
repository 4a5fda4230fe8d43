// ShardedRowCache: RowCache split into P independent shards planned in parallel.
//
// The planner of a worker's hot-row cache runs once per step on one host thread and, at 150-250k
// distinct keys per step, RowCache::Plan takes milliseconds (its probes are cache misses, one
// after the other). ShardedRowCache splits both the keys and the slots into P shards, each an
// ordinary RowCache, and plans the shards on P threads: the calling thread plus P - 1 workers that
// the object owns for its whole life (no thread is created per Plan).
//
// Sharding. A key belongs to shard ShardOf(key) = (low 32 bits of data::Mix64(key)) * P >> 32.
// RowCache places a key in its own index by the *top* bits of the same Mix64, so the two are
// independent and every shard's index stays evenly spread. Shard j owns the contiguous global
// slots [shard_base(j), shard_base(j) + shard_capacity(j)); the capacity is split as evenly as
// possible (the first capacity % P shards get one slot more; the sizes sum to capacity_rows).
// A shard's keys only ever live in its slots. The mapping depends only on the key and P, never
// on the machine, so the same P gives the same plans everywhere.
//
// Semantics, compared with one RowCache of the same capacity (P = 1 is exactly RowCache: same
// slots, misses in the same order, same stats and errors):
//   - Eviction is per shard. Each shard has its own CLOCK hand and counters, and a new key can
//     only evict an unpinned key of its own shard: the approximate LFU ranks keys within a shard,
//     not across the whole cache. With many keys per shard this is statistically the same policy.
//   - Capacity is per shard. Plan fails with ResourceExhausted when ANY shard's pinned window plus
//     its share of the call's keys exceeds that shard's capacity, even if the cache as a whole has
//     room. Hashing spreads N keys over P shards as N/P +- about sqrt(N/P) each, so leave a few
//     standard deviations of headroom: 300k keys of the pinned window over P = 8 shards are
//     37.5k +- 194 a shard, and 2% more capacity than RowCache would need covers 4 of them.
//   - Misses come out shard by shard: shard 0's misses (its stale keys in input order, then its
//     absent keys in input order), then shard 1's, and so on. Each missed key still appears once,
//     with its own distinct slot.
//   - All or nothing: when any shard fails, no shard changes (each shard first checks, with
//     RowCache::PreparePlan, and commits only when every shard can).
//
// Cost: per Plan, one partition of the keys by shard (parallel: every thread counts and scatters
// a contiguous part of the input), the shard plans in parallel, then the slots gathered back to
// input order (each thread its part of the input, so no two threads write one cache line) and the
// misses concatenated, also in parallel; seven barrier crossings in all. What one thread writes
// per key (a shard's RowCache, its miss vectors) sits in cache lines of its own: sharing one
// with another shard halved the speed. Calls with fewer than min_parallel_keys keys run every
// phase on the calling thread (same result; a barrier costs more than planning a few thousand
// keys). No allocation in steady state: the partition arrays and the shards' miss lists keep
// their memory. Memory: RowCache's per slot, plus 17 bytes per key of the largest call.
// Measured (osprey-bench-row-cache, 150k distinct Zipf keys per step, on a 2-core VM): P = 2
// plans 1.5-2.0x as fast as RowCache; P above the core count only adds barrier waits.
//
// Threads: the P - 1 workers sleep (after a short spin) between Plans, and are joined by the
// destructor. Thread-safety of the object: as RowCache -- one caller thread at a time. Inside a
// Plan no field is guarded by a lock: the barriers order the phases, and within a phase each
// thread writes only its own input part and its own shard (see the phases below), so there is
// nothing for GUARDED_BY to name.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <thread>
#include <vector>

#include "common/mutex.h"
#include "common/status.h"
#include "worker/cache/row_cache.h"

namespace osprey::worker {

class ShardedRowCache {
 public:
  static constexpr int kMaxShards = 64;
  // Below this many keys a Plan runs on the calling thread alone (wake-ups and barriers cost more).
  static constexpr size_t kDefaultMinParallelKeys = 8192;

  // Returns the cache, empty, with P = shards clamped to [1, kMaxShards] and to capacity_rows, or
  // InvalidArgument naming the bad field of options (as RowCache::Make), or ResourceExhausted when
  // memory or threads cannot be had. min_parallel_keys: see the cost note above (tests set 0 to
  // run every call on the threads).
  static StatusOr<std::unique_ptr<ShardedRowCache>> Make(const RowCacheOptions& options, int shards,
                                                         size_t min_parallel_keys = kDefaultMinParallelKeys);

  ShardedRowCache(const ShardedRowCache&) = delete;
  ShardedRowCache& operator=(const ShardedRowCache&) = delete;
  ~ShardedRowCache();  // joins the worker threads; no Plan may be running

  // RowCache::Plan's contract, with global slots, the misses in shard order (see above), and the
  // per-shard capacity rule. Errors, all leaving every shard as it was:
  //   InvalidArgument: as RowCache::Plan, with the same messages; also n >= 2^32.
  //   ResourceExhausted: "row cache shard J of P: capacity C rows cannot hold the N distinct keys of
  //     the last S steps" for the first shard J that does not fit (C, N: that shard's).
  Status Plan(int64_t step, const uint64_t* keys, size_t n, int32_t* slots, std::vector<uint64_t>* miss_keys,
              std::vector<int32_t>* miss_slots);

  // RowCache::Invalidate on global slots: each slot goes to the shard that owns it; out-of-range
  // or free slots are ignored.
  void Invalidate(const int32_t* slots, size_t n);

  RowCacheStats stats() const;  // the sum over the shards
  uint64_t size() const;        // keys held, all shards
  uint64_t capacity() const { return capacity_; }
  int num_shards() const { return static_cast<int>(shards_.size()); }
  uint64_t shard_base(int j) const { return base_[j]; }
  uint64_t shard_capacity(int j) const { return base_[j + 1] - base_[j]; }
  RowCacheStats shard_stats(int j) const { return shards_[j]->stats(); }
  int ShardOf(uint64_t key) const;

 private:
  // A reusable barrier for the P planning threads: spins briefly (the phases of one Plan are
  // short and the threads usually arrive close together), then sleeps on a condition variable.
  // The arrival counter's acq_rel chain and the generation's release/acquire make everything a
  // thread wrote before Wait visible to every thread after it.
  class Barrier {
   public:
    explicit Barrier(int parties) : parties_(parties) {}
    void Wait();
    // For a pool that could not start all its threads: the threads that exist (plus the caller)
    // become the parties. Call before the caller's next Wait.
    void set_parties(int parties) { parties_.store(parties, std::memory_order_release); }

   private:
    std::atomic<int> parties_;
    std::atomic<int> arrived_{0};
    // Stored only with mu_ held, so a sleeper (which checks it under mu_) cannot miss it; read
    // without the lock by the spinning waiters, hence atomic and not GUARDED_BY.
    std::atomic<uint64_t> generation_{0};
    // Guards no field: only the sleep on cv_ and the store that ends it.
    Mutex mu_;
    CondVar cv_;
  };

  ShardedRowCache(const RowCacheOptions& options, int shards, size_t min_parallel_keys);
  Status CheckArguments(int64_t step, const uint64_t* keys, size_t n, int32_t* slots,
                        const std::vector<uint64_t>* miss_keys, const std::vector<int32_t>* miss_slots) const;

  // The phases of one Plan over the call_ arguments. Thread t (0: the caller) runs the phases of
  // input part t and of shard t; RunPhases(t) runs thread t's share between the barriers, and
  // RunSerial all of them on the calling thread, in the same order.
  void Count(int t);         // shard of each key of part t; part t's keys per shard
  void Scatter(int t);       // part t's keys into the shards' segments; seg_begin_[t]
  void PrepareShard(int j);  // RowCache::PreparePlan of shard j's segment
  void CommitShard(int j);
  void SizeMissOutputs();    // thread 0 only: miss_begin_, and the caller's miss vectors resized
  void GatherSlots(int t);   // global slots of part t's keys, into the caller's slots
  void CopyMisses(int j);    // shard j's misses, at miss_begin_[j] of the caller's vectors
  bool AllPrepared() const;
  void RunPhases(int t);
  void RunSerial();
  void WorkerLoop(int t);

  const uint64_t capacity_;
  const size_t min_parallel_keys_;
  std::vector<std::unique_ptr<RowCache>> shards_;
  std::vector<uint64_t> base_;  // [P + 1]: shard j's slots are [base_[j], base_[j + 1])
  int64_t last_step_ = -1;

  // The current call's arguments, written by the caller before the start barrier.
  RowCachePlanCall call_;

  // Partition state, reused across calls (sized to the largest n seen). Input part t is
  // [PartBegin(t), PartBegin(t + 1)). count_[t * P + j]: keys of part t in shard j. Shard j's keys
  // occupy [seg_begin_[j], seg_begin_[j + 1]) of keys_ and local_, in input order.
  size_t PartBegin(int t) const { return call_.n * t / shards_.size(); }
  std::vector<uint8_t> shard_of_;   // [n] shard of input key i
  std::vector<uint32_t> dest_;      // [n] index of input key i in keys_ / local_
  std::vector<uint32_t> count_;     // [P * P]
  std::vector<size_t> seg_begin_;   // [P + 1]
  std::vector<uint64_t> keys_;      // [n]
  std::vector<int32_t> local_;      // [n] shard-local slot
  std::vector<size_t> miss_begin_;  // [P + 1] offsets of the shards' misses in the output
  // What only shard j's thread writes during a call, one cache line (or more) per shard: the miss
  // vectors' ends move with every miss, and two shards' in one line would ping-pong it.
  struct alignas(64) ShardOutput {
    Status prepared;                  // PreparePlan's result
    std::vector<uint64_t> miss_keys;  // with local slots
    std::vector<int32_t> miss_slots;
  };
  std::vector<ShardOutput> out_;  // [P]

  // Worker pool: thread t in [1, P) runs WorkerLoop(t). A call crosses barrier_ seven times:
  // start, counted, scattered, prepared (where a call that does not fit ends), committed, gathered,
  // copied.
  Barrier barrier_;
  std::atomic<bool> stop_{false};
  std::vector<std::thread> workers_;
};

}  // namespace osprey::worker
