// DeviceRowCache's kernels (device_row_cache.h): lookup, insert and miss compaction of the
// set-associative index whose rules set_assoc_policy.h shares with the CPU reference.
#include <cub/device/device_radix_sort.cuh>
#include <cub/device/device_scan.cuh>

#include <algorithm>
#include <string>

#include "worker/cache/set_assoc_policy.h"
#include "worker/cuda/sparse/device_row_cache.h"
#include "worker/cuda/sparse/sparse_check.cuh"

namespace osprey::cuda {
namespace {

using worker::set_assoc::kNever;
using worker::set_assoc::kNoVictim;
using worker::set_assoc::kWays;

constexpr int kThreads = 256;
constexpr int kWarps = kThreads / 32;
constexpr int kMaxBlocks = 2048;  // warps stride over the keys: few blocks, few counter atomics
constexpr unsigned kFull = 0xFFFFFFFFu;

struct Counters {
  unsigned long long lookups, hits, stale, absent, evictions, overflows;
  int32_t misses;
  int32_t pad;
};

struct Ways {
  uint64_t* key;
  int64_t* version;
  int64_t* last_used;
  uint8_t* freq;
  uint8_t* ticks;  // per set
};

int Blocks(int n) { return std::max(1, std::min(kMaxBlocks, (n + kWarps - 1) / kWarps)); }

// Adds each thread's v[k] into dst[k] with one global atomic per block and counter.
template <int K>
__device__ void BlockAdd(const unsigned long long (&v)[K], unsigned long long* dst[K]) {
  __shared__ unsigned long long acc[K];
  if (threadIdx.x < K) acc[threadIdx.x] = 0;
  __syncthreads();
  for (int k = 0; k < K; ++k) {
    if (v[k] != 0) atomicAdd(&acc[k], v[k]);
  }
  __syncthreads();
  if (threadIdx.x < K && acc[threadIdx.x] != 0) atomicAdd(dst[threadIdx.x], acc[threadIdx.x]);
}

// One warp per key: its set's ways, a hit or stale way used at `step`, or an absent key flagged
// for the insert (its set as the sort key; everything else sorts last, at `sets`).
__global__ void LookupKernel(Ways w, uint32_t sets, const uint64_t* __restrict__ keys, int n, int64_t step,
                             int64_t bound, int32_t* __restrict__ slots, int32_t* __restrict__ miss,
                             uint32_t* __restrict__ sort_set, int32_t* __restrict__ sort_pos, Counters* c) {
  const int lane = threadIdx.x & 31;
  unsigned long long count[3] = {0, 0, 0};  // hits, stale, absent
  for (int i = blockIdx.x * kWarps + threadIdx.x / 32; i < n; i += gridDim.x * kWarps) {
    const uint64_t key = keys[i];
    const uint32_t set = worker::set_assoc::SetOf(key, sets);
    const size_t base = static_cast<size_t>(set) * kWays;
    const bool held = w.last_used[base + lane] != kNever && w.key[base + lane] == key;
    const unsigned match = __ballot_sync(kFull, held);
    if (match != 0) {
      const int way = __ffs(match) - 1;
      if (lane == way) {
        const size_t slot = base + way;
        const bool stale = step - w.version[slot] > bound;
        if (stale) w.version[slot] = step;
        w.last_used[slot] = step;
        w.freq[slot] = worker::set_assoc::Bump(w.freq[slot]);
        slots[i] = static_cast<int32_t>(slot);
        miss[i] = stale ? 1 : 0;
        sort_set[i] = sets;
        sort_pos[i] = i;
        ++count[stale ? 1 : 0];
      }
    } else if (lane == 0) {
      slots[i] = -1;
      miss[i] = 1;
      sort_set[i] = set;
      sort_pos[i] = i;
      ++count[2];
    }
  }
  unsigned long long* dst[3] = {&c->hits, &c->stale, &c->absent};
  BlockAdd<3>(count, dst);
}

// One warp per set with absent keys (the head of its run in the sorted order): the run's keys
// take their ways one after the other, exactly as SetAssocRowCache::Plan's phase 2.
__global__ void InsertKernel(Ways w, uint32_t sets, const uint64_t* __restrict__ keys, int n, int64_t step,
                             int pinned_steps, uint64_t scratch, const uint32_t* __restrict__ sorted_set,
                             const int32_t* __restrict__ sorted_pos, int32_t* __restrict__ slots, Counters* c) {
  const int lane = threadIdx.x & 31;
  unsigned long long count[2] = {0, 0};  // evictions, overflows
  for (int p = blockIdx.x * kWarps + threadIdx.x / 32; p < n; p += gridDim.x * kWarps) {
    const uint32_t set = sorted_set[p];
    if (set >= sets || (p > 0 && sorted_set[p - 1] == set)) continue;
    const size_t base = static_cast<size_t>(set) * kWays;
    for (int q = p; q < n && sorted_set[q] == set; ++q) {
      const int i = sorted_pos[q];
      const int64_t used = w.last_used[base + lane];
      const uint8_t freq = w.freq[base + lane];
      const uint32_t best =
          __reduce_min_sync(kFull, worker::set_assoc::VictimScore(used, freq, lane, step, pinned_steps));
      if (best == kNoVictim) {
        if (lane == 0) {
          slots[i] = static_cast<int32_t>(scratch + q);
          ++count[1];
        }
      } else {
        const int way = static_cast<int>(best & (kWays - 1));
        const bool evict = (best >> 5) != 0;  // rank 0: the way was free
        // Lane 0 counts the set's evictions; every kWays-th ages the other ways (the reference's Tick).
        int age = 0;
        if (lane == 0 && evict) age = worker::set_assoc::Tick(&w.ticks[set]) ? 1 : 0;
        age = __shfl_sync(kFull, age, 0);
        if (age && lane != way && used != kNever && !worker::set_assoc::Pinned(used, step, pinned_steps)) {
          w.freq[base + lane] = static_cast<uint8_t>(freq >> 1);
        }
        if (lane == way) {
          w.key[base + way] = keys[i];
          w.version[base + way] = step;
          w.last_used[base + way] = step;
          w.freq[base + way] = 0;
          slots[i] = static_cast<int32_t>(base + way);
          if (evict) ++count[0];
        }
      }
      __syncwarp();
    }
  }
  unsigned long long* dst[2] = {&c->evictions, &c->overflows};
  BlockAdd<2>(count, dst);
}

__global__ void MissKernel(const uint64_t* __restrict__ keys, const int32_t* __restrict__ slots,
                           const int32_t* __restrict__ miss, const int32_t* __restrict__ pos, int n,
                           uint64_t* __restrict__ miss_keys, int32_t* __restrict__ miss_slots, Counters* c) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  if (miss[i]) {
    miss_keys[pos[i]] = keys[i];
    miss_slots[pos[i]] = slots[i];
  }
  if (i == n - 1) {
    c->misses = pos[i] + miss[i];
    c->lookups += static_cast<unsigned long long>(n);
  }
}

// No sets: every key a miss in its scratch slot.
__global__ void NoReuseKernel(const uint64_t* __restrict__ keys, int n, uint64_t scratch, int32_t* __restrict__ slots,
                              uint64_t* __restrict__ miss_keys, int32_t* __restrict__ miss_slots, Counters* c) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  slots[i] = static_cast<int32_t>(scratch + i);
  miss_keys[i] = keys[i];
  miss_slots[i] = static_cast<int32_t>(scratch + i);
  if (i == 0) {
    const auto m = static_cast<unsigned long long>(n);
    c->misses = n;
    c->lookups += m;
    c->absent += m;
    c->overflows += m;
  }
}

// One thread: group g's misses are the miss positions between its first key and the next group's.
__global__ void GroupMissKernel(const int32_t* __restrict__ counts, int groups, const int32_t* __restrict__ miss,
                                const int32_t* __restrict__ pos, int n, bool all_miss, int32_t* __restrict__ out) {
  const int total = n == 0 ? 0 : all_miss ? n : pos[n - 1] + miss[n - 1];
  auto misses_before = [&](int j) { return all_miss ? j : j < n ? pos[j] : total; };
  int first = 0;
  for (int g = 0; g < groups; ++g) {
    const int end = min(n, first + max(0, counts[g]));
    out[g] = misses_before(end) - misses_before(first);
    first = end;
  }
}

__global__ void ResetKernel(Ways w, size_t ways) {
  for (size_t j = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; j < ways;
       j += static_cast<size_t>(gridDim.x) * blockDim.x) {
    w.key[j] = 0;
    w.version[j] = kNever;
    w.last_used[j] = kNever;
    w.freq[j] = 0;
    if (j % kWays == 0) w.ticks[j / kWays] = 0;
  }
}

template <typename T>
Status AllocateArray(DeviceBuffer* b, size_t n, const char* what) {
  auto got = DeviceBuffer::Allocate(std::max<size_t>(n, 1) * sizeof(T));
  if (!got.ok()) return got.status().WithContext(std::string("device row cache: ") + what);
  *b = std::move(got).value();
  return Status::OK();
}

}  // namespace

StatusOr<std::unique_ptr<DeviceRowCache>> DeviceRowCache::Make(const worker::SetAssocOptions& options) {
  OSPREY_RETURN_IF_ERROR(worker::CheckSetAssocOptions(options));
  std::unique_ptr<DeviceRowCache> cache(new DeviceRowCache(options));
  OSPREY_RETURN_IF_ERROR(cache->Allocate());
  return StatusOr<std::unique_ptr<DeviceRowCache>>(std::move(cache));
}

DeviceRowCache::DeviceRowCache(const worker::SetAssocOptions& options)
    : options_(options), sets_(static_cast<uint32_t>(worker::SetAssocSets(options))) {
  while (sort_bits_ < 32 && (uint64_t{1} << sort_bits_) <= sets_) ++sort_bits_;  // values 0 .. sets
}

uint64_t DeviceRowCache::slot_count() const { return worker::SetAssocSlotCount(options_); }

Status DeviceRowCache::Allocate() {
  const size_t ways = static_cast<size_t>(sets_) * kWays;
  const size_t m = static_cast<size_t>(options_.max_keys);
  OSPREY_RETURN_IF_ERROR(AllocateArray<uint64_t>(&key_, ways, "keys"));
  OSPREY_RETURN_IF_ERROR(AllocateArray<int64_t>(&version_, ways, "versions"));
  OSPREY_RETURN_IF_ERROR(AllocateArray<int64_t>(&last_used_, ways, "uses"));
  OSPREY_RETURN_IF_ERROR(AllocateArray<uint8_t>(&freq_, ways, "counters"));
  OSPREY_RETURN_IF_ERROR(AllocateArray<uint8_t>(&ticks_, sets_, "eviction counts"));
  OSPREY_RETURN_IF_ERROR(AllocateArray<int32_t>(&flags_, 2 * m, "flags"));
  OSPREY_RETURN_IF_ERROR(AllocateArray<uint32_t>(&sort_set_, 2 * m, "sort keys"));
  OSPREY_RETURN_IF_ERROR(AllocateArray<int32_t>(&sort_pos_, 2 * m, "sort values"));
  size_t sort_bytes = 0, scan_bytes = 0;
  cub::DoubleBuffer<uint32_t> sk(nullptr, nullptr);
  cub::DoubleBuffer<int32_t> sv(nullptr, nullptr);
  OSPREY_SPARSE_CUDA_RETURN_IF_ERROR(cub::DeviceRadixSort::SortPairs(nullptr, sort_bytes, sk, sv, options_.max_keys, 0,
                                                                     32, cudaStream_t{nullptr}));
  OSPREY_SPARSE_CUDA_RETURN_IF_ERROR(cub::DeviceScan::ExclusiveSum(nullptr, scan_bytes, static_cast<int32_t*>(nullptr),
                                                                   static_cast<int32_t*>(nullptr), options_.max_keys,
                                                                   cudaStream_t{nullptr}));
  temp_bytes_ = std::max(sort_bytes, scan_bytes);
  OSPREY_RETURN_IF_ERROR(AllocateArray<char>(&temp_, temp_bytes_, "CUB scratch"));
  OSPREY_RETURN_IF_ERROR(AllocateArray<Counters>(&counters_, 1, "counters"));
  auto pinned = PinnedBuffer::Allocate(sizeof(Counters));
  if (!pinned.ok()) return pinned.status().WithContext("device row cache: pinned counters");
  h_counters_ = std::move(pinned).value();
  OSPREY_SPARSE_CUDA_RETURN_IF_ERROR(cudaMemset(counters_.data(), 0, sizeof(Counters)));
  *h_counters_.as<Counters>() = Counters{};
  OSPREY_RETURN_IF_ERROR(Reset(nullptr));
  OSPREY_SPARSE_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(nullptr));
  return Status::OK();
}

Status DeviceRowCache::Reset(void* stream) {
  const size_t ways = static_cast<size_t>(sets_) * kWays;
  last_step_ = -1;
  if (ways == 0) return Status::OK();
  const Ways w{key_.as<uint64_t>(), version_.as<int64_t>(), last_used_.as<int64_t>(), freq_.as<uint8_t>(),
                 ticks_.as<uint8_t>()};
  const int blocks = static_cast<int>(std::min<size_t>(4096, (ways + kThreads - 1) / kThreads));
  ResetKernel<<<blocks, kThreads, 0, static_cast<cudaStream_t>(stream)>>>(w, ways);
  OSPREY_SPARSE_RETURN_IF_LAUNCH_FAILED();
  return Status::OK();
}

Status DeviceRowCache::Plan(int64_t step, const uint64_t* d_keys, int n, int32_t* d_slots, uint64_t* d_miss_keys,
                            int32_t* d_miss_slots, void* stream) {
  OSPREY_RETURN_IF_ERROR(worker::CheckSetAssocPlan(
      step, last_step_, n, options_.max_keys,
      d_keys != nullptr && d_slots != nullptr && d_miss_keys != nullptr && d_miss_slots != nullptr));
  last_step_ = step;
  last_n_ = n;
  const cudaStream_t s = static_cast<cudaStream_t>(stream);
  Counters* c = counters_.as<Counters>();
  const uint64_t scratch = worker::SetAssocScratchBase(options_, step);
  if (n == 0) {
    OSPREY_SPARSE_CUDA_RETURN_IF_ERROR(cudaMemsetAsync(&c->misses, 0, sizeof(int32_t), s));
  } else if (sets_ == 0) {
    NoReuseKernel<<<(n + kThreads - 1) / kThreads, kThreads, 0, s>>>(d_keys, n, scratch, d_slots, d_miss_keys,
                                                                     d_miss_slots, c);
    OSPREY_SPARSE_RETURN_IF_LAUNCH_FAILED();
  } else {
    const size_t m = static_cast<size_t>(options_.max_keys);
    const Ways w{key_.as<uint64_t>(), version_.as<int64_t>(), last_used_.as<int64_t>(), freq_.as<uint8_t>(),
                 ticks_.as<uint8_t>()};
    int32_t* miss = flags_.as<int32_t>();
    int32_t* miss_pos = miss + m;
    cub::DoubleBuffer<uint32_t> sort_set(sort_set_.as<uint32_t>(), sort_set_.as<uint32_t>() + m);
    cub::DoubleBuffer<int32_t> sort_pos(sort_pos_.as<int32_t>(), sort_pos_.as<int32_t>() + m);
    LookupKernel<<<Blocks(n), kThreads, 0, s>>>(w, sets_, d_keys, n, step, options_.staleness_bound, d_slots, miss,
                                                sort_set.Current(), sort_pos.Current(), c);
    OSPREY_SPARSE_RETURN_IF_LAUNCH_FAILED();
    size_t bytes = temp_bytes_;
    OSPREY_SPARSE_CUDA_RETURN_IF_ERROR(
        cub::DeviceRadixSort::SortPairs(temp_.data(), bytes, sort_set, sort_pos, n, 0, sort_bits_, s));
    InsertKernel<<<Blocks(n), kThreads, 0, s>>>(w, sets_, d_keys, n, step, options_.pinned_steps, scratch,
                                                sort_set.Current(), sort_pos.Current(), d_slots, c);
    OSPREY_SPARSE_RETURN_IF_LAUNCH_FAILED();
    bytes = temp_bytes_;
    OSPREY_SPARSE_CUDA_RETURN_IF_ERROR(cub::DeviceScan::ExclusiveSum(temp_.data(), bytes, miss, miss_pos, n, s));
    MissKernel<<<(n + kThreads - 1) / kThreads, kThreads, 0, s>>>(d_keys, d_slots, miss, miss_pos, n, d_miss_keys,
                                                                  d_miss_slots, c);
    OSPREY_SPARSE_RETURN_IF_LAUNCH_FAILED();
  }
  OSPREY_SPARSE_CUDA_RETURN_IF_ERROR(
      cudaMemcpyAsync(h_counters_.data(), c, sizeof(Counters), cudaMemcpyDeviceToHost, s));
  return Status::OK();
}

Status DeviceRowCache::CountMissesByGroup(const int32_t* d_group_counts, int groups, int32_t* d_miss_counts,
                                          void* stream) {
  if (groups < 1 || d_group_counts == nullptr || d_miss_counts == nullptr) {
    return InvalidArgument("device row cache: " + std::to_string(groups) + " groups, or a null array");
  }
  const int32_t* miss = flags_.as<int32_t>();
  const int32_t* pos = miss + options_.max_keys;
  GroupMissKernel<<<1, 1, 0, static_cast<cudaStream_t>(stream)>>>(d_group_counts, groups, miss, pos, last_n_,
                                                                  sets_ == 0, d_miss_counts);
  OSPREY_SPARSE_RETURN_IF_LAUNCH_FAILED();
  return Status::OK();
}

int32_t DeviceRowCache::last_misses() const { return h_counters_.as<Counters>()->misses; }

worker::SetAssocStats DeviceRowCache::stats() const {
  const Counters& c = *h_counters_.as<Counters>();
  worker::SetAssocStats s;
  s.cache.lookups = c.lookups;
  s.cache.hits = c.hits;
  s.cache.misses_stale = c.stale;
  s.cache.misses_absent = c.absent;
  s.cache.evictions = c.evictions;
  s.overflows = c.overflows;
  return s;
}

}  // namespace osprey::cuda
