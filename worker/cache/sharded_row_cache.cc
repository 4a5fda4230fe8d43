#include "worker/cache/sharded_row_cache.h"

#include <algorithm>
#include <new>
#include <string>
#include <system_error>

#include "worker/data/random.h"

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#endif

namespace osprey::worker {
namespace {

// How long a thread spins at a barrier before it sleeps: the phases of one Plan are tens to
// hundreds of microseconds and the threads arrive within a few of each other, so a futex wake-up
// per phase would cost more than the spin. The periodic yield lets a thread that is still working
// run when there are more planning threads than cores.
constexpr int kSpins = 4096;

inline void CpuRelax() {
#if defined(__x86_64__) || defined(__i386__)
  _mm_pause();
#elif defined(__aarch64__)
  asm volatile("yield");
#endif
}

// The low half of Mix64 (RowCache's index uses the high half) reduced to [0, shards) by a
// multiply-shift, which needs no division.
inline int ShardOfHash(uint64_t hash, uint64_t shards) {
  return static_cast<int>(((hash & 0xffffffffu) * shards) >> 32);
}

}  // namespace

void ShardedRowCache::Barrier::Wait() {
  // This thread cannot be late for the generation it reads: it completes only with its arrival.
  const uint64_t generation = generation_.load(std::memory_order_acquire);
  if (arrived_.fetch_add(1, std::memory_order_acq_rel) + 1 == parties_.load(std::memory_order_acquire)) {
    arrived_.store(0, std::memory_order_relaxed);  // published by the generation's release
    {
      MutexLock lock(&mu_);
      generation_.store(generation + 1, std::memory_order_release);
    }
    cv_.SignalAll();
    return;
  }
  for (int i = 0; i < kSpins; ++i) {
    if (generation_.load(std::memory_order_acquire) != generation) return;
    CpuRelax();
    if (i % 64 == 63) std::this_thread::yield();
  }
  MutexLock lock(&mu_);
  cv_.Wait(&lock, [&] { return generation_.load(std::memory_order_acquire) != generation; });
}

StatusOr<std::unique_ptr<ShardedRowCache>> ShardedRowCache::Make(const RowCacheOptions& options, int shards,
                                                                  size_t min_parallel_keys) {
  // Checked here, not only by the shards: slots are global, so the whole capacity must fit int32.
  if (options.capacity_rows < 1 || options.capacity_rows >= (uint64_t{1} << 31)) {
    return InvalidArgument("RowCacheOptions.capacity_rows must be in [1, 2^31), got " +
                           std::to_string(options.capacity_rows));
  }
  const int p = static_cast<int>(
      std::min<uint64_t>(std::clamp(shards, 1, kMaxShards), options.capacity_rows));
  std::unique_ptr<ShardedRowCache> cache;
  try {
    cache.reset(new ShardedRowCache(options, p, min_parallel_keys));
  } catch (const std::bad_alloc&) {
    return ResourceExhausted("sharded row cache: cannot allocate its state");
  }
  for (int j = 0; j < p; ++j) {
    RowCacheOptions shard = options;
    shard.capacity_rows = cache->base_[j + 1] - cache->base_[j];
    auto made = RowCache::Make(shard);
    if (!made.ok()) return made.status();  // bad staleness_bound / pinned_steps, or no memory
    cache->shards_.push_back(std::move(made).value());
  }
  try {
    for (int t = 1; t < p; ++t) cache->workers_.emplace_back(&ShardedRowCache::WorkerLoop, cache.get(), t);
  } catch (const std::system_error& e) {
    // The destructor stops the threads started so far through the start barrier, which must then
    // count only them and the caller.
    cache->barrier_.set_parties(static_cast<int>(cache->workers_.size()) + 1);
    return ResourceExhausted(std::string("sharded row cache: cannot start its threads: ") + e.what());
  }
  return cache;
}

ShardedRowCache::ShardedRowCache(const RowCacheOptions& options, int shards, size_t min_parallel_keys)
    : capacity_(options.capacity_rows),
      min_parallel_keys_(min_parallel_keys),
      base_(shards + 1),
      count_(static_cast<size_t>(shards) * shards),
      seg_begin_(shards + 1),
      miss_begin_(shards + 1),
      out_(shards),
      barrier_(shards) {
  const uint64_t q = capacity_ / shards, r = capacity_ % shards;
  for (int j = 0; j < shards; ++j) base_[j + 1] = base_[j] + q + (static_cast<uint64_t>(j) < r ? 1 : 0);
}

ShardedRowCache::~ShardedRowCache() {
  if (workers_.empty()) return;  // P = 1, or Make failed before starting any
  stop_.store(true, std::memory_order_relaxed);  // published by the start barrier
  barrier_.Wait();
  for (std::thread& w : workers_) w.join();
}

int ShardedRowCache::ShardOf(uint64_t key) const { return ShardOfHash(data::Mix64(key), shards_.size()); }

Status ShardedRowCache::CheckArguments(int64_t step, const uint64_t* keys, size_t n, int32_t* slots,
                                       const std::vector<uint64_t>* miss_keys,
                                       const std::vector<int32_t>* miss_slots) const {
  // RowCache's checks and messages, so that callers see the same errors whatever P is.
  OSPREY_RETURN_IF_ERROR(RowCache::CheckPlanArguments(step, last_step_, keys, n, slots, miss_keys, miss_slots));
  if (n >= (uint64_t{1} << 32)) {
    return InvalidArgument("sharded row cache: at most 2^32 - 1 keys per Plan, got " + std::to_string(n));
  }
  return Status::OK();
}

Status ShardedRowCache::Plan(int64_t step, const uint64_t* keys, size_t n, int32_t* slots,
                             std::vector<uint64_t>* miss_keys, std::vector<int32_t>* miss_slots) {
  if (shards_.size() == 1) return shards_[0]->Plan(step, keys, n, slots, miss_keys, miss_slots);
  OSPREY_RETURN_IF_ERROR(CheckArguments(step, keys, n, slots, miss_keys, miss_slots));
  call_ = RowCachePlanCall{step, keys, n, slots, miss_keys, miss_slots};
  if (keys_.size() < n) {  // grows only: steady state allocates nothing
    shard_of_.resize(n);
    dest_.resize(n);
    keys_.resize(n);
    local_.resize(n);
  }
  seg_begin_[shards_.size()] = n;
  if (n < min_parallel_keys_) {
    RunSerial();
  } else {
    barrier_.Wait();  // start: the workers read call_ after this
    RunPhases(0);
  }
  for (size_t j = 0; j < shards_.size(); ++j) {
    const Status& s = out_[j].prepared;
    if (s.ok()) continue;
    miss_keys->clear();
    miss_slots->clear();
    std::string message = s.message();
    const std::string prefix = "row cache: ";
    if (message.compare(0, prefix.size(), prefix) == 0) message.erase(0, prefix.size());
    return Status(s.code(), "row cache shard " + std::to_string(j) + " of " + std::to_string(shards_.size()) +
                                ": " + message);
  }
  last_step_ = step;
  return Status::OK();
}

void ShardedRowCache::RunPhases(int t) {
  Count(t);
  barrier_.Wait();
  Scatter(t);
  barrier_.Wait();
  PrepareShard(t);
  barrier_.Wait();
  if (!AllPrepared()) return;  // every thread sees the same statuses: all of them stop here
  CommitShard(t);
  barrier_.Wait();
  if (t == 0) SizeMissOutputs();
  GatherSlots(t);
  barrier_.Wait();
  CopyMisses(t);
  barrier_.Wait();  // the caller returns only when every thread is done with its arrays
}

void ShardedRowCache::RunSerial() {
  const int p = num_shards();
  for (int t = 0; t < p; ++t) Count(t);
  for (int t = 0; t < p; ++t) Scatter(t);
  for (int j = 0; j < p; ++j) PrepareShard(j);
  if (!AllPrepared()) return;
  for (int j = 0; j < p; ++j) CommitShard(j);
  SizeMissOutputs();
  for (int t = 0; t < p; ++t) GatherSlots(t);
  for (int j = 0; j < p; ++j) CopyMisses(j);
}

void ShardedRowCache::WorkerLoop(int t) {
  for (;;) {
    barrier_.Wait();  // start
    if (stop_.load(std::memory_order_relaxed)) return;
    RunPhases(t);
  }
}

void ShardedRowCache::Count(int t) {
  const uint64_t p = shards_.size();
  uint32_t counts[kMaxShards] = {};
  const uint64_t* keys = call_.keys;
  for (size_t i = PartBegin(t), end = PartBegin(t + 1); i < end; ++i) {
    const int j = ShardOfHash(data::Mix64(keys[i]), p);
    shard_of_[i] = static_cast<uint8_t>(j);
    ++counts[j];
  }
  std::copy(counts, counts + p, count_.begin() + t * p);
}

void ShardedRowCache::Scatter(int t) {
  // Part t's keys of shard j go after shard j's keys of parts < t, so each segment keeps input
  // order. Every thread computes the offsets it needs from count_; only thread t writes
  // seg_begin_[t].
  const size_t p = shards_.size();
  size_t next[kMaxShards];
  size_t segment = 0;
  for (size_t j = 0; j < p; ++j) {
    if (j == static_cast<size_t>(t)) seg_begin_[j] = segment;
    next[j] = segment;
    for (size_t u = 0; u < p; ++u) {
      const uint32_t c = count_[u * p + j];
      if (u < static_cast<size_t>(t)) next[j] += c;
      segment += c;
    }
  }
  const uint64_t* keys = call_.keys;
  for (size_t i = PartBegin(t), end = PartBegin(t + 1); i < end; ++i) {
    const size_t k = next[shard_of_[i]]++;
    keys_[k] = keys[i];
    dest_[i] = static_cast<uint32_t>(k);
  }
}

void ShardedRowCache::PrepareShard(int j) {
  const size_t begin = seg_begin_[j];
  out_[j].prepared = shards_[j]->PreparePlan(call_.step, keys_.data() + begin, seg_begin_[j + 1] - begin,
                                             local_.data() + begin, &out_[j].miss_keys, &out_[j].miss_slots);
}

bool ShardedRowCache::AllPrepared() const {
  return std::all_of(out_.begin(), out_.end(), [](const ShardOutput& o) { return o.prepared.ok(); });
}

void ShardedRowCache::CommitShard(int j) { shards_[j]->CommitPlan(); }

void ShardedRowCache::SizeMissOutputs() {
  for (size_t j = 0; j < shards_.size(); ++j) miss_begin_[j + 1] = miss_begin_[j] + out_[j].miss_keys.size();
  // Shrinking or growing by the step-to-step change in misses: only the growth is zero-filled.
  call_.miss_keys->resize(miss_begin_[shards_.size()]);
  call_.miss_slots->resize(miss_begin_[shards_.size()]);
}

void ShardedRowCache::GatherSlots(int t) {
  const uint8_t* shard_of = shard_of_.data();
  const uint32_t* dest = dest_.data();
  const int32_t* local = local_.data();
  int32_t* slots = call_.slots;
  for (size_t i = PartBegin(t), end = PartBegin(t + 1); i < end; ++i) {
    slots[i] = static_cast<int32_t>(base_[shard_of[i]]) + local[dest[i]];
  }
}

void ShardedRowCache::CopyMisses(int j) {
  const std::vector<uint64_t>& keys = out_[j].miss_keys;
  const std::vector<int32_t>& slots = out_[j].miss_slots;
  std::copy(keys.begin(), keys.end(), call_.miss_keys->begin() + miss_begin_[j]);
  const int32_t base = static_cast<int32_t>(base_[j]);
  int32_t* out = call_.miss_slots->data() + miss_begin_[j];
  for (size_t k = 0; k < slots.size(); ++k) out[k] = base + slots[k];
}

void ShardedRowCache::Invalidate(const int32_t* slots, size_t n) {
  for (size_t i = 0; i < n; ++i) {
    if (slots[i] < 0 || static_cast<uint64_t>(slots[i]) >= capacity_) continue;
    // The shard whose range holds the slot: the last base <= slot.
    const size_t j = std::upper_bound(base_.begin(), base_.end(), static_cast<uint64_t>(slots[i])) - base_.begin() - 1;
    const int32_t local = slots[i] - static_cast<int32_t>(base_[j]);
    shards_[j]->Invalidate(&local, 1);
  }
}

RowCacheStats ShardedRowCache::stats() const {
  RowCacheStats sum;
  for (const auto& shard : shards_) sum += shard->stats();
  return sum;
}

uint64_t ShardedRowCache::size() const {
  uint64_t held = 0;
  for (const auto& shard : shards_) held += shard->size();
  return held;
}

}  // namespace osprey::worker
