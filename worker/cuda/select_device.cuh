// Private to worker/cuda: device-side selection state, the workspace layout, and helpers shared
// by the top-k kernels (select_kernels.cu) and pipelines (topk.cu).
#pragma once

#include <cuda_runtime.h>

#include <cub/block/block_scan.cuh>

#include "common/codec/select_rule.h"
#include "worker/cuda/codec_kernels.h"
#include "worker/cuda/cuda_check.cuh"

namespace osprey::cuda {

inline constexpr int kThreads = 256;  // threads of every tiled kernel
inline constexpr int kItems = 16;     // elements per thread per tile: four float4
inline constexpr int kTile = kThreads * kItems;

// Selection progress, written only by single-thread or single-block "decide" kernels and read by
// the wide kernels launched after them on the same stream. Mirrors the loop of
// codec::RadixSelect / codec::SelectSampled.
struct DeviceState {
  uint32_t k, k_lo, k_hi;  // targets
  uint32_t level;          // key level the next histogram resolves
  uint32_t prefix;         // resolved key digits above `level`
  uint32_t count_above;    // selected keys above the prefix range
  uint32_t done;           // sel_key / sel_tie are final
  uint32_t ties;           // tie levels pending (key resolved, too many ties)
  uint32_t tie_need;       // ties to take
  uint32_t window_lo;      // only keys >= window_lo are candidates
  uint32_t band_hi;        // a collect pass takes window_lo <= key < band_hi
  uint32_t collect_active; // the next collect pass runs
  uint32_t sel_key, sel_tie;
  uint32_t final_count;    // pairs in the payload
  uint32_t cand_count;     // candidates appended; > capacity means the dense fallback
  uint32_t out_count;      // emission cursor
  uint32_t rank;           // sampled method: rank in the sample (largest first) of window_lo
  uint32_t sample_prefix;  // sampled method: resolved digits of the sample's rank-th key
  uint32_t sample_need;    // sampled method: its rank among the keys matching sample_prefix
  uint32_t r_sent;         // the fused pass left r = p - wire(p) at every buffered candidate
  uint32_t widened;        // an extra collect pass ran (r was restored to p before it)
};

struct SelectWorkspace::Impl {
  DeviceBuffer state;        // DeviceState
  DeviceBuffer hist;         // u32[kMaxDigitBins]; all zero between kernels that use it
  DeviceBuffer cand_idx;     // u32[cand_capacity]
  DeviceBuffer cand_val;     // f32[cand_capacity]: p of each candidate
  DeviceBuffer sample_keys;  // u32[max_samples], in draw order
  size_t max_n = 0;
  size_t cand_capacity = 0;
  size_t max_samples = 0;
  int num_sms = 1;

  DeviceState* d_state() const { return state.as<DeviceState>(); }
};

// What the post-pass kernels read: the candidates, or, when they overflowed, the dense vector x
// (p after the fused pass: the residual with error feedback, else the gradient).
struct SourceArgs {
  const float* x = nullptr;
  uint32_t n = 0;
  const uint32_t* cand_idx = nullptr;
  const float* cand_val = nullptr;
  uint32_t cand_capacity = 0;

  __device__ bool dense(const DeviceState& s) const { return s.cand_count > cand_capacity; }
  __device__ uint32_t size(const DeviceState& s) const { return dense(s) ? n : s.cand_count; }
  __device__ void Get(bool is_dense, uint32_t j, uint32_t* index, float* value) const {
    *index = is_dense ? j : cand_idx[j];
    *value = is_dense ? x[j] : cand_val[j];
  }
};

// How p is formed; see EfTensor.
enum EfMode : int { kPlain = 0, kResidual = 1, kMomentum = 2 };

// The fused pass's operands: p from g (and r, u) with momentum factor m, over n elements.
struct EfArgs {
  const float* g;
  float* r;
  float* u;
  float m;
  uint32_t n;
};

template <int kMode>
__device__ __forceinline__ float ComputeP(float g, float r, float* u, float m) {
  if (kMode == kMomentum) {
    *u = __fmaf_rn(m, *u, g);
    return __fadd_rn(r, *u);
  }
  if (kMode == kResidual) return __fadd_rn(g, r);
  return g;
}

// What the receiver decodes for v sent as `type`.
__device__ __forceinline__ float WireValue(codec::ValueType type, float v) {
  if (type == codec::ValueType::kFp16) return codec::HalfBitsToFloat(codec::FloatToHalfBits(v));
  if (type == codec::ValueType::kBf16) return codec::Bf16BitsToFloat(codec::FloatToBf16Bits(v));
  return v;
}

// Rounds v to the wire type, stores it as value i of `values`, returns what the receiver decodes
// (WireValue(type, v)).
__device__ __forceinline__ float StoreValue(void* values, codec::ValueType type, uint32_t i, float v) {
  if (type == codec::ValueType::kFp16) {
    const uint16_t h = codec::FloatToHalfBits(v);
    static_cast<uint16_t*>(values)[i] = h;
    return codec::HalfBitsToFloat(h);
  }
  if (type == codec::ValueType::kBf16) {
    const uint16_t b = codec::FloatToBf16Bits(v);
    static_cast<uint16_t*>(values)[i] = b;
    return codec::Bf16BitsToFloat(b);
  }
  static_cast<float*>(values)[i] = v;
  return v;
}

// Reserves `count` slots per thread in a global array whose fill level is *counter: one atomic
// per block (a warp-level atomic per tile would serialize ~10^5 atomics on one address for 10^8
// elements). Returns this thread's first slot. All threads of the block must call it.
using BlockScanU32 = cub::BlockScan<uint32_t, kThreads>;
struct AppendStorage {
  typename BlockScanU32::TempStorage scan;
  uint32_t base;
};
__device__ __forceinline__ uint32_t BlockAppend(uint32_t count, uint32_t* counter, AppendStorage& st) {
  uint32_t before = 0;
  uint32_t total = 0;
  BlockScanU32(st.scan).ExclusiveSum(count, before, total);
  if (threadIdx.x == 0) st.base = total ? atomicAdd(counter, total) : 0u;
  __syncthreads();
  const uint32_t base = st.base;
  __syncthreads();  // st is reused by the next call
  return base + before;
}

// Adds one to bins[bin] for every active lane, one shared atomic per distinct bin in the warp:
// sampled and candidate keys crowd into a few log-scale bins. Called by all lanes of the warp.
__device__ __forceinline__ void WarpAddToBin(uint32_t* bins, uint32_t bin, bool active) {
  const unsigned live = __ballot_sync(0xffffffffu, active);
  if (!active) return;
  const unsigned peers = __match_any_sync(live, bin);
  if (__ffs(peers) - 1 == static_cast<int>(threadIdx.x % 32)) atomicAdd(&bins[bin], __popc(peers));
}

inline int GridFor(size_t work_items, int per_block, int num_sms, int blocks_per_sm = 8) {
  const size_t need = (work_items + per_block - 1) / per_block;
  const size_t cap = static_cast<size_t>(num_sms) * blocks_per_sm;
  return static_cast<int>(need < 1 ? 1 : (need < cap ? need : cap));
}

SourceArgs MakeSource(const SelectWorkspace::Impl& ws, const float* x, size_t n);

// select_kernels.cu: each launch is gated on the device state, so pipelines enqueue every step
// and the steps that turn out unnecessary cost only a launch.
// The decision of key level `level` from the histogram already accumulated in ws.hist; the last
// level also breaks ties at the selected key by lowest index (over src).
Status LaunchKeyDecide(int level, SelectWorkspace::Impl& ws, const SourceArgs& src, cudaStream_t stream);
// Histogram of key level `level` over the source, then the decision of that level.
Status LaunchKeyLevel(int level, SelectWorkspace::Impl& ws, const SourceArgs& src, cudaStream_t stream);
// sample_select.cu. The sample's keys and the first window (rank-th largest sample key, rank set
// in the state by the reset) for the sampled method.
Status LaunchSampleThreshold(const EfArgs& a, int mode, uint64_t seed, uint32_t samples, SelectWorkspace::Impl& ws,
                             cudaStream_t stream);
// Extra pass `pass` of the sampled method: widens the window when it held fewer than k_lo keys.
Status LaunchAdapt(uint32_t pass, uint32_t samples, SelectWorkspace::Impl& ws, cudaStream_t stream);
// After the sampled pipeline's first extra-pass decision: puts p back into r at the buffered
// candidates when the fused pass had left the remainder there but the later steps read r densely
// (an extra pass, or a candidate overflow). Costs a launch otherwise.
Status LaunchRestoreCandidates(const EfTensor& t, SelectWorkspace::Impl& ws, const SourceArgs& src,
                               cudaStream_t stream);
// Writes the selected pairs (final_count of them) into the payload and fixes r and u.
Status LaunchEmit(const EfTensor& t, const SparseOutput& out, SelectWorkspace::Impl& ws, const SourceArgs& src,
                  cudaStream_t stream);

}  // namespace osprey::cuda
