// Placement: which server owns a sparse key or a dense chunk.
//
// Jump consistent hash (Lamping & Veach 2014) of a 64-bit mix of (table, key) or (table, chunk)
// over the servers of the current shard-map epoch: uniform, needs no table, and growing from n to
// n+1 servers moves only ~1/(n+1) of the keys. Pure functions; thread-safe.
#pragma once

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

}  // namespace osprey
