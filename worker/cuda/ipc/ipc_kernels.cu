// IpcAllreduce's kernels (ipc_allreduce.h describes the protocol): the flag barrier, and the
// one-shot and two-shot shapes.
#include "worker/cuda/ipc/ipc_args.h"

namespace osprey::cuda::ipc_internal {
namespace {

__device__ __forceinline__ size_t FlagIndex(int block, int phase, int src) {
  return (size_t{static_cast<unsigned>(block)} * 2 + phase) * kIpcMaxRanks + src;
}

__device__ __forceinline__ void StoreRelease(uint32_t* p, uint32_t v) {
  asm volatile("st.release.sys.global.u32 [%0], %1;" ::"l"(p), "r"(v) : "memory");
}

__device__ __forceinline__ uint32_t LoadAcquire(const uint32_t* p) {
  uint32_t v;
  asm volatile("ld.acquire.sys.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
  return v;
}

__device__ __forceinline__ uint64_t NowNs() {
  uint64_t t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

__device__ __forceinline__ bool Failed(const Args& a) { return *reinterpret_cast<volatile uint32_t*>(a.error) != 0; }

// Whether the block has nothing to do in this call: the same answer in all its threads and, for
// the units test, on every rank (so the blocks that meet at the barriers are the same everywhere).
// A call after a failed one does nothing: its peers time out in turn.
__device__ bool BlockSkips(const Args& a, size_t units) {
  __shared__ int skip_sh;
  if (threadIdx.x == 0) skip_sh = blockIdx.x >= units || Failed(a);
  __syncthreads();
  return skip_sh != 0;
}

// Block `blockIdx.x` of every rank meets here: thread p signals rank p (the rank's block has
// written what the peers will read: the caller synchronized the block first), then waits for
// rank p's signal. Returns false, the same in every thread, when some wait gave up.
__device__ bool Barrier(const Args& a, int phase) {
  __shared__ int ok_sh;
  if (threadIdx.x == 0) ok_sh = 1;
  __syncthreads();
  const int p = threadIdx.x;
  if (p < a.size && p != a.rank) {
    __threadfence_system();
    StoreRelease(a.peer_flags[p] + FlagIndex(blockIdx.x, phase, a.rank), a.epoch);
    const uint32_t* mine = a.my_flags + FlagIndex(blockIdx.x, phase, p);
    const uint64_t start = NowNs();
    // Epochs only grow; a peer may already be one call ahead, hence >= (wrap-safe).
    while (static_cast<int32_t>(LoadAcquire(mine) - a.epoch) < 0) {
      if (Failed(a)) {
        ok_sh = 0;
        break;
      }
      if (NowNs() - start > a.timeout_ns) {
        const uint32_t code = static_cast<uint32_t>(p + 1) | static_cast<uint32_t>(phase) << 8;
        if (atomicCAS(a.error, 0u, code) == 0u) {
          a.error[1] = a.epoch;
          a.host_error[0] = code;
          a.host_error[1] = a.epoch;
          __threadfence_system();
        }
        ok_sh = 0;
        break;
      }
    }
  }
  __syncthreads();
  return ok_sh != 0;
}

// The 4 floats of this thread in unit u: [first, first + count).
__device__ __forceinline__ size_t First(size_t u) { return u * kUnit + threadIdx.x * 4; }

template <bool kVec>
__device__ __forceinline__ void Load4(const float* p, size_t e, size_t n, float v[4]) {
  if (kVec && e + 3 < n) {
    const float4 q = *reinterpret_cast<const float4*>(p + e);
    v[0] = q.x, v[1] = q.y, v[2] = q.z, v[3] = q.w;
    return;
  }
  for (int c = 0; c < 4; ++c) v[c] = e + c < n ? p[e + c] : 0.0f;
}

template <bool kVec>
__device__ __forceinline__ void Store4(float* p, size_t e, size_t n, const float v[4]) {
  if (kVec && e + 3 < n) {
    *reinterpret_cast<float4*>(p + e) = make_float4(v[0], v[1], v[2], v[3]);
    return;
  }
  for (int c = 0; c < 4; ++c) {
    if (e + c < n) p[e + c] = v[c];
  }
}

// A peer's floats: cached in L2 only (the peer wrote them during this kernel).
__device__ __forceinline__ void LoadPeer4(const float* p, size_t e, size_t n, float v[4]) {
  if (e + 3 < n) {
    const float4 q = __ldcg(reinterpret_cast<const float4*>(p + e));
    v[0] = q.x, v[1] = q.y, v[2] = q.z, v[3] = q.w;
    return;
  }
  for (int c = 0; c < 4; ++c) v[c] = e + c < n ? __ldcg(p + e + c) : 0.0f;
}

// own[unit u] = data[unit u]. The halves are 16-byte aligned; data may not be (kVec false).
template <bool kVec>
__device__ __forceinline__ void CopyIn(const Args& a, size_t u) {
  const size_t e = First(u);
  if (e >= a.n) return;
  float v[4];
  Load4<kVec>(a.data, e, a.n, v);
  Store4<true>(a.own, e, a.n, v);
}

// The sum over the ranks of unit u, in rank order (the same bits on every rank).
__device__ __forceinline__ void SumUnit(const Args& a, size_t u, float s[4]) {
  const size_t e = First(u);
  for (int r = 0; r < a.size; ++r) {
    float v[4];
    LoadPeer4(a.peer[r], e, a.n, v);
    for (int c = 0; c < 4; ++c) {
      const float x = a.average ? v[c] * a.scale : v[c];
      s[c] = r == 0 ? x : s[c] + x;
    }
  }
}

// The start of both shapes: the block copies its units in and meets the peers' same block.
// False when the block has nothing to do or a barrier gave up.
template <bool kVec>
__device__ bool CopyInAndMeet(const Args& a, size_t units) {
  if (BlockSkips(a, units)) return false;
  for (size_t u = blockIdx.x; u < units; u += gridDim.x) CopyIn<kVec>(a, u);
  return Barrier(a, 0);
}

template <bool kVec>
__global__ void __launch_bounds__(kThreads) OneShotKernel(Args a) {
  const size_t units = (a.n + kUnit - 1) / kUnit;
  if (!CopyInAndMeet<kVec>(a, units)) return;
  for (size_t u = blockIdx.x; u < units; u += gridDim.x) {
    const size_t e = First(u);
    if (e >= a.n) continue;
    float s[4];
    SumUnit(a, u, s);
    Store4<kVec>(a.data, e, a.n, s);
  }
}

// The rank whose slice unit u is in: slice s holds units [s * units / size, (s + 1) * units / size).
__device__ __forceinline__ int SliceOf(size_t u, size_t units, int size) {
  int s = static_cast<int>(u * size / units);
  while (s + 1 < size && (s + 1) * units / size <= u) ++s;
  while (s > 0 && s * units / size > u) --s;
  return s;
}

template <bool kVec>
__global__ void __launch_bounds__(kThreads) TwoShotKernel(Args a) {
  const size_t units = (a.n + kUnit - 1) / kUnit;
  if (!CopyInAndMeet<kVec>(a, units)) return;
  // Reduce-scatter: this rank's slice, summed into its own half (the peers gather it from there).
  for (size_t u = blockIdx.x; u < units; u += gridDim.x) {
    const size_t e = First(u);
    if (e >= a.n || SliceOf(u, units, a.size) != a.rank) continue;
    float s[4];
    SumUnit(a, u, s);
    Store4<true>(a.own, e, a.n, s);
    Store4<kVec>(a.data, e, a.n, s);
  }
  if (!Barrier(a, 1)) return;
  // All-gather: the other slices from their ranks.
  for (size_t u = blockIdx.x; u < units; u += gridDim.x) {
    const size_t e = First(u);
    const int s = SliceOf(u, units, a.size);
    if (e >= a.n || s == a.rank) continue;
    float v[4];
    LoadPeer4(a.peer[s], e, a.n, v);
    Store4<kVec>(a.data, e, a.n, v);
  }
}

}  // namespace

void LaunchAllreduce(const Args& a, bool one_shot, int grid, cudaStream_t s) {
  const bool vec = reinterpret_cast<uintptr_t>(a.data) % 16 == 0;
  if (one_shot) {
    if (vec) OneShotKernel<true><<<grid, kThreads, 0, s>>>(a);
    else OneShotKernel<false><<<grid, kThreads, 0, s>>>(a);
  } else {
    if (vec) TwoShotKernel<true><<<grid, kThreads, 0, s>>>(a);
    else TwoShotKernel<false><<<grid, kThreads, 0, s>>>(a);
  }
}

}  // namespace osprey::cuda::ipc_internal
