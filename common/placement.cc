// The placement functions are inline in common/placement.h (shared with device code); this file
// holds the host-only batched ServersForKeys.
#include "common/placement.h"

#include <cstring>

namespace osprey {
namespace placement_internal {
namespace {

constexpr int kLanes = 8;
constexpr uint64_t kJumpMul = 2862933555777941757ULL;
constexpr double kJumpScale = static_cast<double>(1LL << 31);

uint64_t TableMix(uint32_t table) { return uint64_t{table} * 0x632be59bd9b4e019ULL; }

}  // namespace

void ServersForKeysLanes(uint32_t table, const uint64_t* keys, size_t n, int32_t num_servers,
                         int32_t* owners) {
  const uint64_t mix = TableMix(table);
  size_t i = 0;
  for (; i + kLanes <= n; i += kLanes) {
    uint64_t key[kLanes];
    int64_t b[kLanes], j[kLanes];
    for (int w = 0; w < kLanes; ++w) {
      key[w] = Mix64(keys[i + w] ^ mix);
      b[w] = -1;
      j[w] = 0;
    }
    // JumpConsistentHash on every lane at once; a lane whose j reached num_buckets keeps its b.
    for (;;) {
      bool any = false;
      for (int w = 0; w < kLanes; ++w) any |= j[w] < num_servers;
      if (!any) break;
      for (int w = 0; w < kLanes; ++w) {
        const bool active = j[w] < num_servers;
        const uint64_t next_key = key[w] * kJumpMul + 1;
        const int64_t next_j = static_cast<int64_t>(
            (j[w] + 1) * (kJumpScale / static_cast<double>((next_key >> 33) + 1)));
        b[w] = active ? j[w] : b[w];
        key[w] = active ? next_key : key[w];
        j[w] = active ? next_j : j[w];
      }
    }
    for (int w = 0; w < kLanes; ++w) owners[i + w] = static_cast<int32_t>(b[w]);
  }
  for (; i < n; ++i) owners[i] = ServerForKey(table, keys[i], num_servers);
}

#if defined(__x86_64__) && defined(__GNUC__)

bool HaveAvx512() {
  static const bool have = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512dq") &&
                           __builtin_cpu_supports("avx512vl");
  return have;
}

namespace {
typedef uint64_t U64x8 __attribute__((vector_size(64)));
typedef int64_t I64x8 __attribute__((vector_size(64)));
typedef double F64x8 __attribute__((vector_size(64)));
}  // namespace

// The lanes of ServersForKeysLanes as GCC vectors: compiled for x86-64-v4, where every operation
// below is one AVX-512 instruction (vpmullq, vcvtqq2pd, vdivpd, vcvttpd2qq, masked blends).
__attribute__((target("arch=x86-64-v4"))) void ServersForKeysAvx512(uint32_t table, const uint64_t* keys,
                                                                     size_t n, int32_t num_servers,
                                                                     int32_t* owners) {
  const uint64_t mix = TableMix(table);
  const I64x8 servers = {num_servers, num_servers, num_servers, num_servers,
                         num_servers, num_servers, num_servers, num_servers};
  size_t i = 0;
  for (; i + kLanes <= n; i += kLanes) {
    U64x8 key;
    std::memcpy(&key, keys + i, sizeof(key));
    key ^= mix;  // Mix64, lane by lane
    key += 0x9e3779b97f4a7c15ULL;
    key = (key ^ (key >> 30)) * 0xbf58476d1ce4e5b9ULL;
    key = (key ^ (key >> 27)) * 0x94d049bb133111ebULL;
    key = key ^ (key >> 31);
    I64x8 b = {-1, -1, -1, -1, -1, -1, -1, -1};
    I64x8 j = {0, 0, 0, 0, 0, 0, 0, 0};
    for (;;) {
      const I64x8 active = j < servers;  // all ones where the lane is still jumping
      bool any = false;
      for (int w = 0; w < kLanes; ++w) any |= active[w] != 0;
      if (!any) break;
      const U64x8 next_key = key * kJumpMul + 1;
      const F64x8 den = __builtin_convertvector(reinterpret_cast<I64x8>((next_key >> 33) + 1), F64x8);
      const F64x8 num = __builtin_convertvector(j + 1, F64x8);
      const I64x8 next_j = __builtin_convertvector(num * (kJumpScale / den), I64x8);
      b = active ? j : b;
      key = reinterpret_cast<U64x8>(active) ? next_key : key;
      j = active ? next_j : j;
    }
    for (int w = 0; w < kLanes; ++w) owners[i + w] = static_cast<int32_t>(b[w]);
  }
  for (; i < n; ++i) owners[i] = ServerForKey(table, keys[i], num_servers);
}

#else

bool HaveAvx512() { return false; }

void ServersForKeysAvx512(uint32_t table, const uint64_t* keys, size_t n, int32_t num_servers,
                          int32_t* owners) {
  ServersForKeysLanes(table, keys, n, num_servers, owners);
}

#endif

}  // namespace placement_internal

void ServersForKeys(uint32_t table, const uint64_t* keys, size_t n, int32_t num_servers, int32_t* owners) {
  if (placement_internal::HaveAvx512()) {
    placement_internal::ServersForKeysAvx512(table, keys, n, num_servers, owners);
  } else {
    placement_internal::ServersForKeysLanes(table, keys, n, num_servers, owners);
  }
}

}  // namespace osprey
