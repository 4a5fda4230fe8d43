// Radix refinement, tie breaking and emission over the candidate pairs (or, after a candidate
// overflow, over the dense vector). Every kernel first reads the device state and returns at once
// when its step is not needed, so the host enqueues a fixed sequence without synchronizing.
#include "worker/cuda/select_device.cuh"

namespace osprey::cuda {
namespace {

using codec::KeyDigitBits;
using codec::KeyDigitShift;
using codec::MagnitudeKey;

__global__ void __launch_bounds__(kThreads) KeyHistogramKernel(int level, const DeviceState* st, SourceArgs src,
                                                               uint32_t* hist) {
  __shared__ uint32_t bins_sh[codec::kMaxDigitBins];
  const DeviceState s = *st;
  if (s.done || s.level != static_cast<uint32_t>(level)) return;
  const int bins = 1 << KeyDigitBits(level);
  const int shift = KeyDigitShift(level);
  for (int i = threadIdx.x; i < bins; i += blockDim.x) bins_sh[i] = 0;
  __syncthreads();
  const bool dense = src.dense(s);
  const uint32_t m = src.size(s);
  // size_t: a u32 cursor could wrap past m for tensors near 2^32 elements. The loop bound is
  // uniform over the block: every lane of a warp reaches WarpAddToBin.
  for (size_t base = blockIdx.x * size_t{blockDim.x}; base < m; base += size_t{gridDim.x} * blockDim.x) {
    const size_t j = base + threadIdx.x;
    uint32_t index = 0;
    float v = 0.0f;
    if (j < m) src.Get(dense, static_cast<uint32_t>(j), &index, &v);
    const uint32_t key = MagnitudeKey(v);
    const bool counted = j < m && key >= s.window_lo && codec::KeyMatchesPrefix(key, s.prefix, level);
    WarpAddToBin(bins_sh, (key >> shift) & (bins - 1), counted);
  }
  __syncthreads();
  for (int i = threadIdx.x; i < bins; i += blockDim.x) {
    if (bins_sh[i]) atomicAdd(&hist[i], bins_sh[i]);
  }
}

constexpr int kDecideThreads = 1024;

// The block of the last key level resolves ties (rare for real gradients: it needs equal
// magnitudes at the k-th key): the lowest indices among the keys equal to sel_key.
__device__ void ResolveTies(DeviceState* st, const SourceArgs& src) {
  __shared__ uint32_t bins_sh[codec::kTieBins];
  __shared__ uint32_t prefix_sh, need_sh, done_sh, tie_index_sh;
  const DeviceState s = *st;
  const bool dense = src.dense(s);
  const uint32_t m = src.size(s);
  if (threadIdx.x == 0) {
    prefix_sh = 0;
    need_sh = s.tie_need;
    done_sh = 0;
    tie_index_sh = UINT32_MAX;
  }
  for (int level = 0; level < codec::kNumTieLevels; ++level) {
    for (int i = threadIdx.x; i < codec::kTieBins; i += blockDim.x) bins_sh[i] = 0;
    __syncthreads();
    const uint32_t prefix = prefix_sh;
    const int shift = codec::TieDigitShift(level);
    for (size_t j = threadIdx.x; j < m; j += blockDim.x) {
      uint32_t index;
      float v;
      src.Get(dense, static_cast<uint32_t>(j), &index, &v);
      if (MagnitudeKey(v) == s.sel_key && codec::IndexMatchesPrefix(index, prefix, level)) {
        atomicAdd(&bins_sh[(index >> shift) & 0xFFu], 1u);
      }
    }
    __syncthreads();
    if (threadIdx.x == 0) {
      uint64_t need = need_sh;
      uint64_t below = 0;
      for (uint32_t b = 0; b < codec::kTieBins; ++b) {
        if (below + bins_sh[b] >= need) {
          uint32_t next = 0;
          uint32_t tie_index = 0;
          done_sh = codec::DecideTieLevel(level, prefix, b, below, bins_sh[b], &need, &next, &tie_index);
          prefix_sh = next;
          tie_index_sh = tie_index;
          need_sh = static_cast<uint32_t>(need);
          break;
        }
        below += bins_sh[b];
      }
    }
    __syncthreads();
    if (done_sh) break;
  }
  if (threadIdx.x == 0) {
    st->sel_tie = tie_index_sh;
    st->ties = 0;
    st->done = 1;
  }
}

// One block: finds the boundary bin of `level` (scanning from the top), applies
// codec::DecideKeyLevel, and zeroes the histogram for its next use. The last level also resolves
// ties, if its decision left some.
__global__ void __launch_bounds__(kDecideThreads) KeyDecideKernel(int level, DeviceState* st, uint32_t* hist,
                                                                  SourceArgs src) {
  using Scan = cub::BlockScan<uint32_t, kDecideThreads>;
  __shared__ typename Scan::TempStorage scan_sh;
  const DeviceState s = *st;
  if (s.done || s.level != static_cast<uint32_t>(level)) return;
  const int bins = 1 << KeyDigitBits(level);
  const int per = (bins + kDecideThreads - 1) / kDecideThreads;  // 4 or 1
  uint32_t h[4] = {0, 0, 0, 0};
  uint32_t local = 0;
  for (int q = 0; q < per; ++q) {
    const int d = threadIdx.x * per + q;  // d-th bin from the top
    if (d < bins) {
      h[q] = hist[bins - 1 - d];
      hist[bins - 1 - d] = 0;
      local += h[q];
    }
  }
  uint32_t above = 0;
  uint32_t total = 0;
  Scan(scan_sh).ExclusiveSum(local, above, total);
  if (level == 0 && s.count_above + total <= s.k) {  // the window holds at most k: take it all
    if (threadIdx.x == 0) {
      st->done = 1;
      st->sel_key = s.window_lo;
      st->sel_tie = UINT32_MAX;
      st->final_count = s.count_above + total;
    }
    return;
  }
  const codec::SelectTargets t{s.k, s.k_lo, s.k_hi};
  const uint32_t need = s.k - s.count_above;
  for (int q = 0; q < per; ++q) {
    const int d = threadIdx.x * per + q;
    if (d < bins && above < need && above + h[q] >= need) {
      const uint32_t b = static_cast<uint32_t>(bins - 1 - d);
      const codec::KeyLevelResult r = codec::DecideKeyLevel(level, s.prefix, b, s.count_above, above, h[q], t);
      const uint32_t bin_lo = ((s.prefix << KeyDigitBits(level)) | b) << KeyDigitShift(level);
      st->window_lo = max(s.window_lo, r.kind == codec::KeyLevelResult::kDone ? r.key : bin_lo);
      if (r.kind == codec::KeyLevelResult::kDone) {
        st->done = 1;
        st->sel_key = r.key;
        st->sel_tie = UINT32_MAX;
        st->final_count = static_cast<uint32_t>(r.count);
      } else if (r.kind == codec::KeyLevelResult::kTies) {
        st->ties = 1;
        st->sel_key = r.key;
        st->tie_need = static_cast<uint32_t>(s.k - r.count);
        st->final_count = s.k;
        st->level = codec::kNumKeyLevels;
      } else {
        st->prefix = r.next_prefix;
        st->count_above = static_cast<uint32_t>(r.count);
        st->level = level + 1;
      }
    }
    above += h[q];
  }
  if (level != codec::kNumKeyLevels - 1) return;
  __syncthreads();  // the deciding thread's writes to *st are visible to the block after this
  if (st->ties) ResolveTies(st, src);
}

__device__ __forceinline__ bool Selected(const DeviceState& s, uint32_t key, uint32_t index) {
  return key >= s.window_lo && (key > s.sel_key || (key == s.sel_key && index <= s.sel_tie));
}

// Four candidates a thread per tile, all loaded before the block's append: ~k candidates fill
// every SM this way, where 16 a thread left most of them idle.
constexpr int kEmitItems = 4;
constexpr int kEmitTile = kThreads * kEmitItems;

__global__ void __launch_bounds__(kThreads) EmitKernel(DeviceState* st, SourceArgs src, float* r, float* u,
                                                       void* payload, codec::ValueType type) {
  __shared__ AppendStorage append_sh;
  const DeviceState s = *st;
  const bool dense = src.dense(s);
  const uint32_t m = src.size(s);
  // The fused pass left p - WireValue(p) in r at every candidate, and nothing read r since.
  const bool remainder_in_r = r && s.r_sent && !s.widened && !dense;
  uint32_t* indices = static_cast<uint32_t*>(payload);
  void* values = static_cast<char*>(payload) + 4ull * s.final_count;
  for (size_t base = blockIdx.x * size_t{kEmitTile}; base < m; base += size_t{gridDim.x} * kEmitTile) {
    uint32_t index[kEmitItems];
    float v[kEmitItems];
    uint32_t mask = 0;
#pragma unroll
    for (int q = 0; q < kEmitItems; ++q) {
      const size_t j = base + q * kThreads + threadIdx.x;
      index[q] = 0;
      v[q] = 0.0f;
      if (j < m) src.Get(dense, static_cast<uint32_t>(j), &index[q], &v[q]);
      if (j < m && Selected(s, MagnitudeKey(v[q]), index[q])) mask |= 1u << q;
    }
    uint32_t pos = BlockAppend(__popc(mask), &st->out_count, append_sh);
#pragma unroll
    for (int q = 0; q < kEmitItems; ++q) {
      const bool selected = mask & (1u << q);
      // Only the threshold API can overfill; the rest stay in r.
      if (selected && pos < s.final_count) {
        indices[pos] = index[q];
        const float decoded = StoreValue(values, type, pos, v[q]);
        if (r && !remainder_in_r) r[index[q]] = __fsub_rn(v[q], decoded);
        if (u) u[index[q]] = 0.0f;
      } else if (remainder_in_r && base + q * kThreads + threadIdx.x < m) {
        r[index[q]] = v[q];  // a candidate not sent keeps all of p
      }
      pos += selected ? 1u : 0u;
    }
  }
}

__global__ void __launch_bounds__(kThreads) RestoreCandidatesKernel(const DeviceState* st, SourceArgs src, float* r) {
  const DeviceState s = *st;
  if (!s.r_sent || !(s.widened || src.dense(s))) return;
  const uint32_t m = min(s.cand_count, src.cand_capacity);
  for (size_t j = blockIdx.x * size_t{blockDim.x} + threadIdx.x; j < m; j += size_t{gridDim.x} * blockDim.x) {
    r[src.cand_idx[j]] = src.cand_val[j];
  }
}

}  // namespace

SourceArgs MakeSource(const SelectWorkspace::Impl& ws, const float* x, size_t n) {
  SourceArgs src;
  src.x = x;
  src.n = static_cast<uint32_t>(n);
  src.cand_idx = ws.cand_idx.as<uint32_t>();
  src.cand_val = ws.cand_val.as<float>();
  src.cand_capacity = static_cast<uint32_t>(ws.cand_capacity);
  return src;
}

Status LaunchKeyDecide(int level, SelectWorkspace::Impl& ws, const SourceArgs& src, cudaStream_t stream) {
  KeyDecideKernel<<<1, kDecideThreads, 0, stream>>>(level, ws.d_state(), ws.hist.as<uint32_t>(), src);
  OSPREY_CUDA_RETURN_IF_LAUNCH_FAILED();
  return Status::OK();
}

Status LaunchKeyLevel(int level, SelectWorkspace::Impl& ws, const SourceArgs& src, cudaStream_t stream) {
  const int grid = GridFor(src.n, kThreads * 4, ws.num_sms, 4);
  KeyHistogramKernel<<<grid, kThreads, 0, stream>>>(level, ws.d_state(), src, ws.hist.as<uint32_t>());
  OSPREY_CUDA_RETURN_IF_LAUNCH_FAILED();
  return LaunchKeyDecide(level, ws, src, stream);
}

Status LaunchRestoreCandidates(const EfTensor& t, SelectWorkspace::Impl& ws, const SourceArgs& src,
                               cudaStream_t stream) {
  if (t.residual == nullptr) return Status::OK();
  const int grid = GridFor(src.cand_capacity, kThreads * 4, ws.num_sms, 2);
  RestoreCandidatesKernel<<<grid, kThreads, 0, stream>>>(ws.d_state(), src, t.residual);
  OSPREY_CUDA_RETURN_IF_LAUNCH_FAILED();
  return Status::OK();
}

Status LaunchEmit(const EfTensor& t, const SparseOutput& out, SelectWorkspace::Impl& ws, const SourceArgs& src,
                  cudaStream_t stream) {
  const int grid = GridFor(src.n, kEmitTile, ws.num_sms, 8);
  EmitKernel<<<grid, kThreads, 0, stream>>>(ws.d_state(), src, t.residual, t.momentum, out.payload, out.value_type);
  OSPREY_CUDA_RETURN_IF_LAUNCH_FAILED();
  return Status::OK();
}

}  // namespace osprey::cuda
