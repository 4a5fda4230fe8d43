// cuda::DeviceRowCache against its CPU reference worker::SetAssocRowCache: the same steps of Zipf
// keys (hot keys repeat, a long tail streams through) planned by both, and every slot, every miss
// (in order) and every counter compared after every step -- with sets to spare, with sets so
// few that ways run out (overflow into scratch), with staleness bounds 0 and 4, and across a
// Reset. Skipped where no CUDA device is visible.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <set>
#include <string>
#include <vector>

#include "tests/testing/cuda_buffers.h"
#include "worker/cache/set_assoc_row_cache.h"
#include "worker/cuda/sparse/device_row_cache.h"
#include "worker/data/random.h"
#include "worker/data/zipf.h"

namespace osprey::cuda {
namespace {

using testing::Download;
using testing::Poisoned;
using testing::Upload;
using worker::SetAssocOptions;
using worker::SetAssocRowCache;

#define OSPREY_CACHE_REQUIRE_GPU()                                          \
  do {                                                                      \
    if (DeviceCount() == 0) GTEST_SKIP() << "no CUDA device here";          \
  } while (0)

// The distinct keys of one step: `draws` Zipf draws over `universe` keys, deduped, shuffled.
std::vector<uint64_t> StepKeys(data::Rng* rng, const data::ZipfSampler& zipf, int draws) {
  std::set<uint64_t> seen;
  std::vector<uint64_t> keys;
  for (int d = 0; d < draws; ++d) {
    uint64_t rank = 0;
    while (!zipf.TrySample(rng->NextUniform(), &rank)) {
    }
    const uint64_t key = data::Mix64(rank) ^ 0x5bd1e995;  // spread, as FeatureKeys are
    if (seen.insert(key).second) keys.push_back(key);
  }
  for (size_t i = keys.size(); i > 1; --i) std::swap(keys[i - 1], keys[rng->NextU64() % i]);
  return keys;
}

struct Case {
  const char* name;
  uint64_t capacity;
  int64_t bound;
  int pinned;
  uint64_t universe;
  int draws;
};

void CompareOverSteps(const Case& c, int steps, int reset_at) {
  SCOPED_TRACE(c.name);
  const int max_keys = c.draws;
  const SetAssocOptions options{c.capacity, c.bound, c.pinned, max_keys};
  auto reference = SetAssocRowCache::Make(options);
  ASSERT_TRUE(reference.ok()) << reference.status().ToString();
  auto device = DeviceRowCache::Make(options);
  ASSERT_TRUE(device.ok()) << device.status().ToString();
  ASSERT_EQ((*device)->slot_count(), (*reference)->slot_count());
  data::Rng rng(c.capacity * 31 + c.bound);
  data::ZipfSampler zipf(c.universe, 1.05);
  DeviceBuffer d_slots = Poisoned(sizeof(int32_t) * max_keys);
  DeviceBuffer d_miss_keys = Poisoned(sizeof(uint64_t) * max_keys);
  DeviceBuffer d_miss_slots = Poisoned(sizeof(int32_t) * max_keys);
  cudaStream_t stream = nullptr;
  ASSERT_EQ(cudaStreamCreate(&stream), cudaSuccess);
  uint64_t overflow_steps = 0, eviction_steps = 0;
  for (int64_t step = 0; step < steps; ++step) {
    SCOPED_TRACE("step " + std::to_string(step));
    if (step == reset_at) {
      (*reference)->Reset();
      ASSERT_TRUE((*device)->Reset(stream).ok());
    }
    const std::vector<uint64_t> keys = StepKeys(&rng, zipf, c.draws);
    const int n = static_cast<int>(keys.size());
    std::vector<int32_t> want_slots(n);
    std::vector<uint64_t> want_miss_keys;
    std::vector<int32_t> want_miss_slots;
    const worker::SetAssocStats before = (*reference)->stats();
    ASSERT_TRUE((*reference)->Plan(step, keys.data(), n, want_slots.data(), &want_miss_keys, &want_miss_slots).ok());
    DeviceBuffer d_keys = Upload(keys);
    Status s = (*device)->Plan(step, d_keys.as<uint64_t>(), n, d_slots.as<int32_t>(), d_miss_keys.as<uint64_t>(),
                               d_miss_slots.as<int32_t>(), stream);
    ASSERT_TRUE(s.ok()) << s.ToString();
    ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
    const int m = (*device)->last_misses();
    ASSERT_EQ(m, static_cast<int>(want_miss_keys.size()));
    ASSERT_EQ(Download<int32_t>(d_slots.data(), n), want_slots);
    ASSERT_EQ(Download<uint64_t>(d_miss_keys.data(), m), want_miss_keys);
    ASSERT_EQ(Download<int32_t>(d_miss_slots.data(), m), want_miss_slots);
    // The misses by group, for keys that came in three groups (as a GPU worker's, by server).
    const std::vector<int32_t> groups = {n / 4, n / 2, n - n / 4 - n / 2};
    DeviceBuffer d_groups = Upload(groups), d_group_misses = Poisoned(sizeof(int32_t) * groups.size());
    ASSERT_TRUE((*device)->CountMissesByGroup(d_groups.as<int32_t>(), 3, d_group_misses.as<int32_t>(), stream).ok());
    std::set<uint64_t> missed(want_miss_keys.begin(), want_miss_keys.end());
    std::vector<int32_t> want_groups(3, 0);
    for (int g = 0, first = 0; g < 3; first += groups[g], ++g) {
      for (int i = first; i < first + groups[g]; ++i) want_groups[g] += missed.count(keys[i]) ? 1 : 0;
    }
    ASSERT_EQ(Download<int32_t>(d_group_misses.data(), 3), want_groups);
    const worker::SetAssocStats got = (*device)->stats(), want = (*reference)->stats();
    ASSERT_EQ(got.cache.lookups, want.cache.lookups);
    ASSERT_EQ(got.cache.hits, want.cache.hits);
    ASSERT_EQ(got.cache.misses_stale, want.cache.misses_stale);
    ASSERT_EQ(got.cache.misses_absent, want.cache.misses_absent);
    ASSERT_EQ(got.cache.evictions, want.cache.evictions);
    ASSERT_EQ(got.overflows, want.overflows);
    overflow_steps += want.overflows > before.overflows;
    eviction_steps += want.cache.evictions > before.cache.evictions;
  }
  cudaStreamDestroy(stream);
  const worker::SetAssocStats s = (*reference)->stats();
  // The case exercised what it is named for.
  if (c.capacity >= worker::set_assoc::kWays && c.bound > 0) {
    EXPECT_GT(s.cache.hits, 0u);
    EXPECT_GT(eviction_steps, 0u);
  }
  if (c.bound == 0) {
    EXPECT_EQ(s.cache.hits, 0u);
  }
  std::printf("%-28s lookups %llu hits %llu stale %llu absent %llu evictions %llu overflows %llu (%llu steps)\n",
              c.name, static_cast<unsigned long long>(s.cache.lookups), static_cast<unsigned long long>(s.cache.hits),
              static_cast<unsigned long long>(s.cache.misses_stale),
              static_cast<unsigned long long>(s.cache.misses_absent),
              static_cast<unsigned long long>(s.cache.evictions), static_cast<unsigned long long>(s.overflows),
              static_cast<unsigned long long>(overflow_steps));
}

TEST(DeviceRowCacheTest, MatchesTheCpuReferenceStepByStep) {
  OSPREY_CACHE_REQUIRE_GPU();
  const Case cases[] = {
      // A cache of a tenth of the keys: hits, evictions, stale re-pulls.
      {"tenth, bound 4", 20000, 4, 5, 200000, 30000},
      // Ways run out: a few sets for many keys, every way pinned by the ring -> scratch.
      {"overflow, bound 2", 2048, 2, 3, 100000, 20000},
      // bound 0: everything re-pulled each step (the uncached run).
      {"bound 0", 65536, 0, 4, 50000, 20000},
      // No sets at all: the no-reuse cache.
      {"no sets", 31, 0, 4, 50000, 20000},
  };
  for (const Case& c : cases) CompareOverSteps(c, 24, 13);
}

TEST(DeviceRowCacheTest, SlotsAreDistinctAndOfTheRightSet) {
  OSPREY_CACHE_REQUIRE_GPU();
  const SetAssocOptions options{4096, 1, 3, 8192};
  auto device = DeviceRowCache::Make(options);
  ASSERT_TRUE(device.ok()) << device.status().ToString();
  data::Rng rng(7);
  std::vector<uint64_t> keys;
  for (int i = 0; i < 8000; ++i) keys.push_back(rng.NextU64());
  std::sort(keys.begin(), keys.end());
  keys.erase(std::unique(keys.begin(), keys.end()), keys.end());
  DeviceBuffer d_keys = Upload(keys), d_slots = Poisoned(4 * keys.size()), d_mk = Poisoned(8 * keys.size()),
               d_ms = Poisoned(4 * keys.size());
  ASSERT_TRUE((*device)->Plan(0, d_keys.as<uint64_t>(), static_cast<int>(keys.size()), d_slots.as<int32_t>(),
                              d_mk.as<uint64_t>(), d_ms.as<int32_t>(), nullptr)
                  .ok());
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  const std::vector<int32_t> slots = Download<int32_t>(d_slots.data(), keys.size());
  std::set<int32_t> distinct(slots.begin(), slots.end());
  EXPECT_EQ(distinct.size(), keys.size());
  const uint32_t sets = (*device)->sets();
  for (size_t i = 0; i < keys.size(); ++i) {
    ASSERT_GE(slots[i], 0);
    ASSERT_LT(static_cast<uint64_t>(slots[i]), (*device)->slot_count());
    if (static_cast<uint32_t>(slots[i]) < sets * worker::set_assoc::kWays) {
      EXPECT_EQ(static_cast<uint32_t>(slots[i]) / worker::set_assoc::kWays, worker::set_assoc::SetOf(keys[i], sets));
    }
  }
  EXPECT_EQ((*device)->last_misses(), static_cast<int32_t>(keys.size()));
}

TEST(DeviceRowCacheTest, RefusesBadArgumentsBeforeEnqueuing) {
  OSPREY_CACHE_REQUIRE_GPU();
  EXPECT_EQ(DeviceRowCache::Make({64, -1, 2, 10}).status().code(), StatusCode::kInvalidArgument);
  auto device = DeviceRowCache::Make({64, 0, 2, 10});
  ASSERT_TRUE(device.ok());
  DeviceBuffer b = Poisoned(1024);
  Status s = (*device)->Plan(0, b.as<uint64_t>(), 11, b.as<int32_t>(), b.as<uint64_t>(), b.as<int32_t>(), nullptr);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("at most 10"), std::string::npos) << s.message();
  EXPECT_EQ((*device)->Plan(0, nullptr, 1, b.as<int32_t>(), b.as<uint64_t>(), b.as<int32_t>(), nullptr).code(),
            StatusCode::kInvalidArgument);
  ASSERT_TRUE((*device)->Plan(5, b.as<uint64_t>(), 0, b.as<int32_t>(), b.as<uint64_t>(), b.as<int32_t>(), nullptr).ok());
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  EXPECT_EQ((*device)->last_misses(), 0);
  EXPECT_EQ((*device)->Plan(4, b.as<uint64_t>(), 0, b.as<int32_t>(), b.as<uint64_t>(), b.as<int32_t>(), nullptr).code(),
            StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace osprey::cuda
