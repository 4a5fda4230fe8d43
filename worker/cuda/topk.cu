// Top-k pipelines: the fused error-feedback pass, sampled threshold estimation, and the host
// functions that enqueue each pipeline. Cost model (10^8 fp32 on an H200, ~0.1 ms per dense read):
// the fused pass reads g and r and writes r (3 passes); everything else touches either the sample
// (0.5%) or the candidates (~k), so the sampled/exact pipelines stay near 3 passes and the
// histogram pipeline near 4.
#include "common/codec/schedule.h"
#include "worker/cuda/select_device.cuh"

namespace osprey::cuda {
namespace {

using codec::MagnitudeKey;

// Element q of a thread's tile: four float4 groups spaced a block apart, so each warp load is
// 512 contiguous bytes.
__device__ __forceinline__ size_t TileElement(size_t base, int q) {
  return base + ((q / 4) * kThreads + threadIdx.x) * 4 + q % 4;
}

// Loads the whole tile before anything is stored: r may alias g as far as the compiler knows, so
// interleaving stores would serialize the loads and starve the memory pipeline. Elements past n
// read as 0 and must be masked by the caller.
template <int kMode, bool kVec>
__device__ __forceinline__ void LoadTile(const EfArgs& a, size_t base, float g[kItems], float r[kItems],
                                         float u[kItems]) {
#pragma unroll
  for (int v = 0; v < kItems / 4; ++v) {
    const size_t e = TileElement(base, 4 * v);
    if (kVec && e + 3 < a.n) {
      const float4 g4 = *reinterpret_cast<const float4*>(a.g + e);
      g[4 * v] = g4.x, g[4 * v + 1] = g4.y, g[4 * v + 2] = g4.z, g[4 * v + 3] = g4.w;
      if (kMode != kPlain) {
        const float4 r4 = *reinterpret_cast<const float4*>(a.r + e);
        r[4 * v] = r4.x, r[4 * v + 1] = r4.y, r[4 * v + 2] = r4.z, r[4 * v + 3] = r4.w;
      }
      if (kMode == kMomentum) {
        const float4 u4 = *reinterpret_cast<const float4*>(a.u + e);
        u[4 * v] = u4.x, u[4 * v + 1] = u4.y, u[4 * v + 2] = u4.z, u[4 * v + 3] = u4.w;
      }
      continue;
    }
#pragma unroll
    for (int c = 0; c < 4; ++c) {
      const bool in = e + c < a.n;
      g[4 * v + c] = in ? a.g[e + c] : 0.0f;
      r[4 * v + c] = in && kMode != kPlain ? a.r[e + c] : 0.0f;
      u[4 * v + c] = in && kMode == kMomentum ? a.u[e + c] : 0.0f;
    }
  }
}

// Stores r = p (and u) for the tile.
template <int kMode, bool kVec>
__device__ __forceinline__ void StoreTile(const EfArgs& a, size_t base, const float p[kItems], const float u[kItems]) {
#pragma unroll
  for (int v = 0; v < (kMode == kPlain ? 0 : kItems / 4); ++v) {  // plain mode writes nothing
    const size_t e = TileElement(base, 4 * v);
    if (kVec && e + 3 < a.n) {
      *reinterpret_cast<float4*>(a.r + e) = make_float4(p[4 * v], p[4 * v + 1], p[4 * v + 2], p[4 * v + 3]);
      if (kMode == kMomentum) {
        *reinterpret_cast<float4*>(a.u + e) = make_float4(u[4 * v], u[4 * v + 1], u[4 * v + 2], u[4 * v + 3]);
      }
      continue;
    }
#pragma unroll
    for (int c = 0; c < 4; ++c) {
      if (e + c >= a.n) continue;
      a.r[e + c] = p[4 * v + c];
      if (kMode == kMomentum) a.u[e + c] = u[4 * v + c];
    }
  }
}

// The one dense pass: forms p, writes r = p, and either collects candidates with window_lo <= key
// < band_hi (kCollect) or builds the level-0 key histogram (kHist); with both, the histogram
// counts the collected keys only (the sampled pipeline's level 0, so no histogram pass over the
// candidates). With `send`, a buffered candidate's r is written as p - WireValue(type, p), what
// error feedback keeps if it is sent: most candidates are, so the emit then restores only the few
// that are not instead of scattering a write per sent pair. With `gated`, runs only when the
// state asks for a collect pass (then it is the read-only "extra pass" over x, kMode == kPlain).
template <int kMode, bool kCollect, bool kHist, bool kVec>
__global__ void __launch_bounds__(kThreads) EfPassKernel(EfArgs a, DeviceState* st, uint32_t* cand_idx, float* cand_val,
                                                         uint32_t cand_capacity, uint32_t* hist, bool gated, bool send,
                                                         codec::ValueType type) {
  __shared__ AppendStorage append_sh;
  __shared__ uint32_t hist_sh[kHist ? codec::kMaxDigitBins : 1];
  if (gated && !st->collect_active) return;
  const uint32_t lo = kCollect ? st->window_lo : 0u;
  const uint32_t hi = kCollect ? st->band_hi : codec::kKeyEnd;
  if (kHist) {
    for (int i = threadIdx.x; i < codec::kMaxDigitBins; i += kThreads) hist_sh[i] = 0;
    __syncthreads();
  }
  for (size_t base = blockIdx.x * size_t{kTile}; base < a.n; base += gridDim.x * size_t{kTile}) {
    float g[kItems], r[kItems], u[kItems], p[kItems];
    LoadTile<kMode, kVec>(a, base, g, r, u);
#pragma unroll
    for (int q = 0; q < kItems; ++q) p[q] = ComputeP<kMode>(g[q], r[q], &u[q], a.m);
    uint32_t mask = 0;
#pragma unroll
    for (int q = 0; q < kItems; ++q) {
      if (TileElement(base, q) >= a.n) continue;
      const uint32_t key = MagnitudeKey(p[q]);
      if (kHist && !kCollect) atomicAdd(&hist_sh[key >> codec::KeyDigitShift(0)], 1u);
      if (kCollect && key >= lo && key < hi) {
        mask |= 1u << q;
        if (kHist) atomicAdd(&hist_sh[key >> codec::KeyDigitShift(0)], 1u);
      }
    }
    if (kCollect) {
      uint32_t pos = BlockAppend(__popc(mask), &st->cand_count, append_sh);
      // Static q: a runtime index into p[] would move the tile from registers to local memory.
#pragma unroll
      for (int q = 0; q < kItems; ++q) {
        if (!(mask & (1u << q))) continue;
        if (pos < cand_capacity) {  // else overflow: the later steps read the dense vector instead
          cand_idx[pos] = static_cast<uint32_t>(TileElement(base, q));
          cand_val[pos] = p[q];
          if (send) p[q] = __fsub_rn(p[q], WireValue(type, p[q]));
        }
        ++pos;
      }
    }
    StoreTile<kMode, kVec>(a, base, p, u);
  }
  if (kHist) {
    __syncthreads();
    for (int i = threadIdx.x; i < codec::kMaxDigitBins; i += kThreads) {
      if (hist_sh[i]) atomicAdd(&hist[i], hist_sh[i]);
    }
  }
}

__global__ void ResetStateKernel(DeviceState* st, codec::SelectTargets t, uint32_t collect_active, uint32_t rank,
                                 uint32_t r_sent) {
  DeviceState s = {};
  s.k = static_cast<uint32_t>(t.k);
  s.k_lo = static_cast<uint32_t>(t.k_lo);
  s.k_hi = static_cast<uint32_t>(t.k_hi);
  s.band_hi = codec::kKeyEnd;
  s.collect_active = collect_active;
  s.sel_tie = UINT32_MAX;
  s.rank = rank;
  s.r_sent = r_sent;
  *st = s;
}

__global__ void SetThresholdKernel(DeviceState* st, const float* threshold) {
  const uint32_t key = MagnitudeKey(*threshold);
  st->window_lo = key;
  st->sel_key = key;
  st->done = 1;
}

__global__ void FinishThresholdKernel(DeviceState* st, uint32_t out_capacity) {
  st->final_count = min(st->cand_count, out_capacity);
}

int ModeOf(const EfTensor& t) { return t.momentum ? kMomentum : (t.residual ? kResidual : kPlain); }

bool Aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

// How a pass runs (see EfPassKernel): gated on the state, and whether it leaves the wire
// remainder of `type` in r at buffered candidates.
struct PassOptions {
  bool gated = false;
  bool send = false;
  codec::ValueType type = codec::ValueType::kFp32;
};

template <bool kCollect, bool kHist, int kMode>
void LaunchEfPassMode(const EfArgs& a, bool vec, int grid, SelectWorkspace::Impl& w, const PassOptions& o,
                      cudaStream_t s) {
  auto* kernel = vec ? EfPassKernel<kMode, kCollect, kHist, true> : EfPassKernel<kMode, kCollect, kHist, false>;
  kernel<<<grid, kThreads, 0, s>>>(a, w.d_state(), w.cand_idx.as<uint32_t>(), w.cand_val.as<float>(),
                                   static_cast<uint32_t>(w.cand_capacity), w.hist.as<uint32_t>(), o.gated, o.send,
                                   o.type);
}

template <bool kCollect, bool kHist>
Status LaunchEfPass(const EfArgs& a, int mode, SelectWorkspace::Impl& w, const PassOptions& o, cudaStream_t s) {
  const bool vec = Aligned16(a.g) && Aligned16(a.r) && Aligned16(a.u);
  // A gated pass is rarely needed and otherwise costs only its launch: fewer, longer blocks.
  const int grid = GridFor(a.n, kTile, w.num_sms, o.gated ? 2 : 8);
  if (mode == kMomentum) LaunchEfPassMode<kCollect, kHist, kMomentum>(a, vec, grid, w, o, s);
  if (mode == kResidual) LaunchEfPassMode<kCollect, kHist, kResidual>(a, vec, grid, w, o, s);
  if (mode == kPlain) LaunchEfPassMode<kCollect, kHist, kPlain>(a, vec, grid, w, o, s);
  OSPREY_CUDA_RETURN_IF_LAUNCH_FAILED();
  return Status::OK();
}

// The read-only extra collect pass over x (p after the fused pass), gated on collect_active;
// kCount adds the collected keys to the level-0 histogram.
template <bool kCount>
Status LaunchCollectBand(const float* x, uint32_t n, SelectWorkspace::Impl& w, cudaStream_t s) {
  PassOptions o;
  o.gated = true;
  return LaunchEfPass<true, kCount>(EfArgs{x, nullptr, nullptr, 0.0f, n}, kPlain, w, o, s);
}

Status CheckInputs(const EfTensor& t, const SparseOutput& out, SelectWorkspace* ws) {
  if (ws == nullptr) return InvalidArgument("null SelectWorkspace");
  if (t.n > ws->impl().max_n) {
    return InvalidArgument("tensor of " + std::to_string(t.n) + " elements exceeds the workspace's max_n " +
                           std::to_string(ws->impl().max_n));
  }
  if (t.n > 0 && t.grad == nullptr) return InvalidArgument("null gradient");
  if (t.momentum && !t.residual) return InvalidArgument("DGC momentum needs a residual (error feedback)");
  if (out.payload == nullptr || codec::ValueBytes(out.value_type) == 0) {
    return InvalidArgument("sparse output needs a payload and a known value type");
  }
  return Status::OK();
}

// With error feedback, the fused pass leaves each buffered candidate's wire remainder in r (the
// state's r_sent, set by the reset); see EfPassKernel.
Status SampledPipeline(const EfTensor& t, const TopKParams& p, codec::ValueType type, SelectWorkspace::Impl& w,
                       cudaStream_t s) {
  const codec::SamplePlan& plan = p.plan;
  if (plan.samples == 0 || plan.samples > w.max_samples || plan.rank == 0 || plan.rank > plan.samples) {
    return InvalidArgument("sample plan of " + std::to_string(plan.samples) + " draws, rank " +
                           std::to_string(plan.rank) + ", workspace holds " + std::to_string(w.max_samples));
  }
  const EfArgs a{t.grad, t.residual, t.momentum, t.momentum_factor, static_cast<uint32_t>(t.n)};
  const int mode = ModeOf(t);
  const uint32_t samples = static_cast<uint32_t>(plan.samples);
  OSPREY_RETURN_IF_ERROR(LaunchSampleThreshold(a, mode, p.seed, samples, w, s));
  PassOptions o;
  o.send = t.residual != nullptr;
  o.type = type;
  OSPREY_RETURN_IF_ERROR((LaunchEfPass<true, true>(a, mode, w, o, s)));
  const float* x = t.residual ? t.residual : t.grad;
  const SourceArgs src = MakeSource(w, x, t.n);
  for (uint32_t pass = 0; pass < codec::kMaxExtraPasses; ++pass) {
    OSPREY_RETURN_IF_ERROR(LaunchAdapt(pass, samples, w, s));
    // An extra pass reads r as p (a widening at pass 1 implies one at pass 0).
    if (pass == 0) OSPREY_RETURN_IF_ERROR(LaunchRestoreCandidates(t, w, src, s));
    OSPREY_RETURN_IF_ERROR(LaunchCollectBand<true>(x, a.n, w, s));
  }
  // Every collect pass counted what it took: level 0's histogram is complete.
  OSPREY_RETURN_IF_ERROR(LaunchKeyDecide(0, w, src, s));
  for (int level = 1; level < codec::kNumKeyLevels; ++level) OSPREY_RETURN_IF_ERROR(LaunchKeyLevel(level, w, src, s));
  return Status::OK();
}

Status HistogramPipeline(const EfTensor& t, SelectWorkspace::Impl& w, cudaStream_t s) {
  const EfArgs a{t.grad, t.residual, t.momentum, t.momentum_factor, static_cast<uint32_t>(t.n)};
  OSPREY_RETURN_IF_ERROR((LaunchEfPass<false, true>(a, ModeOf(t), w, PassOptions{}, s)));
  const float* x = t.residual ? t.residual : t.grad;
  const SourceArgs src = MakeSource(w, x, t.n);
  OSPREY_RETURN_IF_ERROR(LaunchKeyDecide(0, w, src, s));
  OSPREY_RETURN_IF_ERROR(LaunchCollectBand<false>(x, a.n, w, s));  // collect_active was set by the reset
  for (int level = 1; level < codec::kNumKeyLevels; ++level) OSPREY_RETURN_IF_ERROR(LaunchKeyLevel(level, w, src, s));
  return Status::OK();
}

}  // namespace

TopKParams MakeTopKParams(codec::TopKMethod method, size_t n, double density, double count_tolerance,
                          double sample_rate, uint64_t seed) {
  TopKParams p;
  p.method = method;
  const double tolerance = method == codec::TopKMethod::kExact ? 0.0 : count_tolerance;
  p.targets = codec::MakeTargets(n, density, tolerance);
  p.plan = codec::MakeSamplePlan(n, p.targets, sample_rate, tolerance);
  p.seed = seed;
  return p;
}

TopKParams TopKParamsFor(const codec::CodecConfig& config, size_t n, uint64_t step, uint64_t tensor_seed) {
  const double density = codec::DensitySchedule(config.schedule, config.density).DensityAt(step);
  return MakeTopKParams(codec::TopKMethodFromName(config.topk_method), n, density, config.count_tolerance,
                        config.sample_rate, codec::StepSeed(config.seed ^ tensor_seed, step));
}

Status SelectByThreshold(const EfTensor& t, const float* d_threshold, const SparseOutput& out, SelectWorkspace* ws,
                         void* stream) {
  OSPREY_RETURN_IF_ERROR(CheckInputs(t, out, ws));
  if (d_threshold == nullptr) return InvalidArgument("null threshold");
  auto s = static_cast<cudaStream_t>(stream);
  SelectWorkspace::Impl& w = ws->impl();
  ResetStateKernel<<<1, 1, 0, s>>>(w.d_state(), codec::SelectTargets{}, 0, 0, 0);
  SetThresholdKernel<<<1, 1, 0, s>>>(w.d_state(), d_threshold);
  OSPREY_CUDA_RETURN_IF_LAUNCH_FAILED();
  if (t.n == 0) return Status::OK();
  const EfArgs a{t.grad, t.residual, t.momentum, t.momentum_factor, static_cast<uint32_t>(t.n)};
  OSPREY_RETURN_IF_ERROR((LaunchEfPass<true, false>(a, ModeOf(t), w, PassOptions{}, s)));
  FinishThresholdKernel<<<1, 1, 0, s>>>(w.d_state(), static_cast<uint32_t>(std::min<size_t>(out.capacity, UINT32_MAX)));
  OSPREY_CUDA_RETURN_IF_LAUNCH_FAILED();
  return LaunchEmit(t, out, w, MakeSource(w, t.residual ? t.residual : t.grad, t.n), s);
}

Status TopK(const EfTensor& t, const TopKParams& params, const SparseOutput& out, SelectWorkspace* ws, void* stream) {
  OSPREY_RETURN_IF_ERROR(CheckInputs(t, out, ws));
  auto s = static_cast<cudaStream_t>(stream);
  SelectWorkspace::Impl& w = ws->impl();
  const bool histogram = params.method == codec::TopKMethod::kHistogram;
  const uint32_t r_sent = !histogram && t.residual != nullptr ? 1u : 0u;  // SampledPipeline's fused pass
  ResetStateKernel<<<1, 1, 0, s>>>(w.d_state(), params.targets, histogram ? 1u : 0u,
                                   static_cast<uint32_t>(params.plan.rank), r_sent);
  OSPREY_CUDA_RETURN_IF_LAUNCH_FAILED();
  if (t.n == 0) return Status::OK();  // final_count stays 0
  const codec::SelectTargets& k = params.targets;
  if (k.k == 0 || k.k_lo > k.k || k.k > k.k_hi || k.k_hi > t.n) {
    return InvalidArgument("top-k targets k=" + std::to_string(k.k) + " [" + std::to_string(k.k_lo) + ", " +
                           std::to_string(k.k_hi) + "] for n=" + std::to_string(t.n));
  }
  if (out.capacity < k.k_hi) {
    return InvalidArgument("sparse output holds " + std::to_string(out.capacity) + " pairs, k_hi is " +
                           std::to_string(k.k_hi));
  }
  OSPREY_RETURN_IF_ERROR(histogram ? HistogramPipeline(t, w, s)
                                   : SampledPipeline(t, params, out.value_type, w, s));
  const SourceArgs src = MakeSource(w, t.residual ? t.residual : t.grad, t.n);
  return LaunchEmit(t, out, w, src, s);
}

}  // namespace osprey::cuda
