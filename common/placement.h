// Placement: which server owns a sparse key or a dense chunk.
//
// Jump consistent hash (Lamping & Veach 2014) of a 64-bit mix of (table, key) or (table, chunk)
// over the servers of the current shard-map epoch: uniform, needs no table, and growing from n to
// n+1 servers moves only ~1/(n+1) of the keys. Pure functions; thread-safe.
#pragma once

#include <cstddef>
#include <cstdint>

// Host and device (nvcc) code share these functions, so a GPU worker can place keys exactly as
// the client and the servers do (worker/cuda/sparse GroupKeysByServer).
#if defined(__CUDACC__)
#define OSPREY_HOST_DEVICE __host__ __device__
#else
#define OSPREY_HOST_DEVICE
#endif

namespace osprey {

// Bucket in [0, num_buckets) for `key`. Precondition: num_buckets > 0. Exact on the device too:
// integer steps plus one IEEE double division and multiplication (no fused multiply-add to
// contract).
inline OSPREY_HOST_DEVICE int32_t JumpConsistentHash(uint64_t key, int32_t num_buckets) {
  int64_t b = -1;
  int64_t j = 0;
  while (j < num_buckets) {
    b = j;
    key = key * 2862933555777941757ULL + 1;
    j = static_cast<int64_t>((b + 1) * (static_cast<double>(1LL << 31) /
                                        static_cast<double>((key >> 33) + 1)));
  }
  return static_cast<int32_t>(b);
}

// A strong 64-bit mix (splitmix64 finalizer); also used for deterministic initializers.
inline OSPREY_HOST_DEVICE uint64_t Mix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

inline OSPREY_HOST_DEVICE int32_t ServerForKey(uint32_t table, uint64_t key, int32_t num_servers) {
  return JumpConsistentHash(Mix64(key ^ (uint64_t{table} * 0x632be59bd9b4e019ULL)), num_servers);
}

inline OSPREY_HOST_DEVICE int32_t ServerForChunk(uint32_t table, uint64_t chunk, int32_t num_servers) {
  return JumpConsistentHash(Mix64((uint64_t{table} << 40) ^ chunk ^ 0xd1b54a32d192ed03ULL),
                            num_servers);
}

// Host only: owners[i] = ServerForKey(table, keys[i], num_servers) for i in [0, n), the same
// values, computed 8 keys at a time. One key's jump hash is a chain of dependent steps ending in a
// data-dependent branch (about 33 ns a key at 16 servers on the 2-core VM); 8 independent chains
// side by side, with the finished lanes masked instead of branched, keep the divider busy. Where
// the CPU has AVX-512 (F, DQ, VL: x86-64-v4; checked once, at the first call) the 8 lanes are one
// vector register each step (13 ns a key at 16 servers); elsewhere the same lanes run as plain
// scalar code. Both use exactly the scalar function's IEEE operations, so every owner is
// bit-for-bit ServerForKey's (tests/placement/placement_test.cc compares them). Precondition:
// num_servers > 0. Thread-safe.
void ServersForKeys(uint32_t table, const uint64_t* keys, size_t n, int32_t num_servers, int32_t* owners);

// The two implementations behind ServersForKeys, for tests and benchmarks.
namespace placement_internal {
void ServersForKeysLanes(uint32_t table, const uint64_t* keys, size_t n, int32_t num_servers, int32_t* owners);
// False where the build or the CPU lacks AVX-512; ServersForKeysAvx512 must not be called then.
bool HaveAvx512();
void ServersForKeysAvx512(uint32_t table, const uint64_t* keys, size_t n, int32_t num_servers, int32_t* owners);
}  // namespace placement_internal

}  // namespace osprey
