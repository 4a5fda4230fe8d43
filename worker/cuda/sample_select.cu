// The sampled method's threshold: the rank-th largest magnitude key of the sample, found by the
// same three key digits the candidates are resolved with (12, 12, 7 bits), not by sorting the
// sample. The gather builds the first digit's histogram as it goes, so the main path is one
// gather and three small decide/histogram pairs over 2 MB of keys that sit in L2. Equal to
// codec::SelectSampled's sorted_sample[rank - 1] by construction (an order statistic is unique).
//
// The rare extra passes (fewer than k_lo candidates above the first window) pick a deeper rank;
// one block does that selection itself, so when no extra pass is needed the step costs a launch.
#include "worker/cuda/select_device.cuh"

namespace osprey::cuda {
namespace {

using codec::KeyDigitBits;
using codec::KeyDigitShift;
using codec::KeyMatchesPrefix;
using codec::MagnitudeKey;

constexpr int kSelectThreads = 1024;
constexpr int kBinsPerThread = codec::kMaxDigitBins / kSelectThreads;  // 4
using SelectScan = cub::BlockScan<uint32_t, kSelectThreads>;

struct BoundaryStorage {
  typename SelectScan::TempStorage scan;
  uint32_t bin;    // boundary bin of the level
  uint32_t above;  // keys in the bins above it
};

// One block of kSelectThreads: the bin holding the need-th largest key counted from the top of
// `bins` bins (1 <= need <= total), and how many keys lie above it. Zeroes the bins with `clear`.
// Every thread of the block must call it; the result is in `out` after the call.
__device__ void FindBoundary(uint32_t* hist, int bins, uint32_t need, bool clear, BoundaryStorage& out) {
  uint32_t h[kBinsPerThread];
  uint32_t local = 0;
#pragma unroll
  for (int q = 0; q < kBinsPerThread; ++q) {
    const int d = threadIdx.x * kBinsPerThread + q;  // d-th bin from the top
    h[q] = d < bins ? hist[bins - 1 - d] : 0u;
    if (clear && d < bins) hist[bins - 1 - d] = 0;
    local += h[q];
  }
  uint32_t above = 0;
  uint32_t total = 0;
  SelectScan(out.scan).ExclusiveSum(local, above, total);
#pragma unroll
  for (int q = 0; q < kBinsPerThread; ++q) {
    const int d = threadIdx.x * kBinsPerThread + q;
    if (d < bins && above < need && above + h[q] >= need) {
      out.bin = static_cast<uint32_t>(bins - 1 - d);
      out.above = above;
    }
    above += h[q];
  }
  __syncthreads();
}

__device__ __forceinline__ uint32_t DigitOf(uint32_t key, int level) {
  return (key >> KeyDigitShift(level)) & ((1u << KeyDigitBits(level)) - 1);
}

constexpr int kGatherItems = 4;

// Gathers the sample's keys (p formed as the fused pass will form it, from copies: the pass
// updates u, not this) and accumulates the histogram of their first digit.
template <int kMode>
__global__ void __launch_bounds__(kThreads) GatherSampleKernel(EfArgs a, uint64_t seed, uint32_t samples,
                                                               uint32_t* keys, uint32_t* hist) {
  __shared__ uint32_t bins_sh[codec::kMaxDigitBins];
  for (int i = threadIdx.x; i < codec::kMaxDigitBins; i += kThreads) bins_sh[i] = 0;
  __syncthreads();
  const size_t stride = size_t{gridDim.x} * kThreads * kGatherItems;
  for (size_t base = blockIdx.x * size_t{kThreads} * kGatherItems; base < samples; base += stride) {
    float g[kGatherItems], r[kGatherItems], u[kGatherItems];
#pragma unroll
    for (int q = 0; q < kGatherItems; ++q) {  // every load first: the reads are random
      const size_t j = base + q * kThreads + threadIdx.x;
      g[q] = r[q] = u[q] = 0.0f;
      if (j >= samples) continue;
      const uint64_t pos = codec::StratifiedPosition(seed, j, samples, a.n);
      g[q] = a.g[pos];
      if (kMode != kPlain) r[q] = a.r[pos];
      if (kMode == kMomentum) u[q] = a.u[pos];
    }
#pragma unroll
    for (int q = 0; q < kGatherItems; ++q) {
      const size_t j = base + q * kThreads + threadIdx.x;
      const uint32_t key = MagnitudeKey(ComputeP<kMode>(g[q], r[q], &u[q], a.m));
      if (j < samples) keys[j] = key;
      WarpAddToBin(bins_sh, key >> KeyDigitShift(0), j < samples);
    }
  }
  __syncthreads();
  for (int i = threadIdx.x; i < codec::kMaxDigitBins; i += kThreads) {
    if (bins_sh[i]) atomicAdd(&hist[i], bins_sh[i]);
  }
}

// Histogram of digit `level` over the sample keys that match the resolved prefix.
__global__ void __launch_bounds__(kThreads) SampleHistogramKernel(int level, const DeviceState* st, const uint32_t* keys,
                                                                  uint32_t samples, uint32_t* hist) {
  __shared__ uint32_t bins_sh[codec::kMaxDigitBins];
  const int bins = 1 << KeyDigitBits(level);
  for (int i = threadIdx.x; i < bins; i += kThreads) bins_sh[i] = 0;
  __syncthreads();
  const uint32_t prefix = st->sample_prefix;
  for (size_t base = blockIdx.x * size_t{kThreads}; base < samples; base += size_t{gridDim.x} * kThreads) {
    const size_t j = base + threadIdx.x;
    const uint32_t key = j < samples ? keys[j] : 0u;
    WarpAddToBin(bins_sh, DigitOf(key, level), j < samples && KeyMatchesPrefix(key, prefix, level));
  }
  __syncthreads();
  for (int i = threadIdx.x; i < bins; i += kThreads) {
    if (bins_sh[i]) atomicAdd(&hist[i], bins_sh[i]);
  }
}

// Resolves digit `level` of the sample's rank-th key from the accumulated histogram (and zeroes
// it). After the last digit the key is the first window's lower bound.
__global__ void __launch_bounds__(kSelectThreads) SampleDecideKernel(int level, DeviceState* st, uint32_t* hist) {
  __shared__ BoundaryStorage out;
  const uint32_t need = level == 0 ? st->rank : st->sample_need;
  FindBoundary(hist, 1 << KeyDigitBits(level), need, /*clear=*/true, out);
  if (threadIdx.x != 0) return;
  const uint32_t prefix = ((level == 0 ? 0u : st->sample_prefix) << KeyDigitBits(level)) | out.bin;
  st->sample_prefix = prefix;
  st->sample_need = need - out.above;
  if (level == codec::kNumKeyLevels - 1) st->window_lo = prefix;
}

// The rank-th largest of `samples` keys, by one block (rank in [1, samples]).
__device__ uint32_t BlockRankSelect(const uint32_t* keys, uint32_t samples, uint32_t rank, uint32_t* bins_sh,
                                    BoundaryStorage& out) {
  uint32_t prefix = 0;
  uint32_t need = rank;
  for (int level = 0; level < codec::kNumKeyLevels; ++level) {
    for (int i = threadIdx.x; i < codec::kMaxDigitBins; i += kSelectThreads) bins_sh[i] = 0;
    __syncthreads();
    for (size_t base = 0; base < samples; base += kSelectThreads) {
      const size_t j = base + threadIdx.x;
      const uint32_t key = j < samples ? keys[j] : 0u;
      const bool match = j < samples && (level == 0 || KeyMatchesPrefix(key, prefix, level));
      WarpAddToBin(bins_sh, DigitOf(key, level), match);
    }
    __syncthreads();
    FindBoundary(bins_sh, 1 << KeyDigitBits(level), need, /*clear=*/false, out);
    prefix = (prefix << KeyDigitBits(level)) | out.bin;
    need -= out.above;
    __syncthreads();  // out and bins_sh are reused by the next level
  }
  return prefix;
}

// One iteration of codec::SelectSampled's extra-pass loop: when the window held fewer than k_lo
// keys, widen it to a deeper sample rank (or to everything on the last pass).
__global__ void __launch_bounds__(kSelectThreads) AdaptKernel(DeviceState* st, const uint32_t* keys, uint32_t pass,
                                                              uint32_t samples) {
  __shared__ uint32_t bins_sh[codec::kMaxDigitBins];
  __shared__ BoundaryStorage out;
  __shared__ uint32_t rank_sh, widen_sh;
  if (threadIdx.x == 0) {
    const DeviceState s = *st;
    widen_sh = 0;
    if (s.cand_count >= s.k_lo || s.window_lo == 0) {
      st->collect_active = 0;
    } else {
      const bool last = pass + 1 == codec::kMaxExtraPasses || s.rank >= samples;
      const uint64_t rank = codec::NextSampleRank(s.rank, s.cand_count, s.k_hi, samples);
      st->band_hi = s.window_lo;
      st->rank = static_cast<uint32_t>(rank);
      st->collect_active = 1;
      st->widened = 1;
      if (last) st->window_lo = 0;
      widen_sh = last ? 0u : 1u;
      rank_sh = static_cast<uint32_t>(rank);
    }
  }
  __syncthreads();
  if (!widen_sh) return;
  const uint32_t key = BlockRankSelect(keys, samples, rank_sh, bins_sh, out);
  if (threadIdx.x == 0) st->window_lo = key;
}

template <int kMode>
void LaunchGather(const EfArgs& a, uint64_t seed, uint32_t samples, SelectWorkspace::Impl& w, cudaStream_t s) {
  const int grid = GridFor(samples, kThreads * kGatherItems, w.num_sms, 8);
  GatherSampleKernel<kMode><<<grid, kThreads, 0, s>>>(a, seed, samples, w.sample_keys.as<uint32_t>(),
                                                      w.hist.as<uint32_t>());
}

}  // namespace

Status LaunchSampleThreshold(const EfArgs& a, int mode, uint64_t seed, uint32_t samples, SelectWorkspace::Impl& w,
                             cudaStream_t s) {
  if (mode == kMomentum) LaunchGather<kMomentum>(a, seed, samples, w, s);
  if (mode == kResidual) LaunchGather<kResidual>(a, seed, samples, w, s);
  if (mode == kPlain) LaunchGather<kPlain>(a, seed, samples, w, s);
  OSPREY_CUDA_RETURN_IF_LAUNCH_FAILED();
  const int grid = GridFor(samples, kThreads * 4, w.num_sms, 4);
  for (int level = 0; level < codec::kNumKeyLevels; ++level) {
    if (level > 0) {
      SampleHistogramKernel<<<grid, kThreads, 0, s>>>(level, w.d_state(), w.sample_keys.as<uint32_t>(), samples,
                                                      w.hist.as<uint32_t>());
    }
    SampleDecideKernel<<<1, kSelectThreads, 0, s>>>(level, w.d_state(), w.hist.as<uint32_t>());
    OSPREY_CUDA_RETURN_IF_LAUNCH_FAILED();
  }
  return Status::OK();
}

Status LaunchAdapt(uint32_t pass, uint32_t samples, SelectWorkspace::Impl& w, cudaStream_t s) {
  AdaptKernel<<<1, kSelectThreads, 0, s>>>(w.d_state(), w.sample_keys.as<uint32_t>(), pass, samples);
  OSPREY_CUDA_RETURN_IF_LAUNCH_FAILED();
  return Status::OK();
}

}  // namespace osprey::cuda
