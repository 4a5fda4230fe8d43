// LayerTopK, segmented: every kernel's grid has one block per (layer, chunk) of the workspace's
// table, so a large layer is spread over many blocks (a single block streaming a layer of 10^5+
// floats was the bottleneck of the one-block-per-layer kernel). Per-layer decisions run one block
// per layer between the wide passes. See layer_kernels.h for the sequence.
#include <cub/block/block_reduce.cuh>

#include "common/codec/radix_select.h"
#include "common/codec/sparse_codecs.h"
#include "worker/cuda/layer_device.cuh"
#include "worker/cuda/select_device.cuh"

namespace osprey::cuda {
namespace {

using codec::MagnitudeKey;

constexpr int kWarps = kThreads / 32;
constexpr int kWarpSpan = 32 * kItems;  // contiguous elements of one warp per tile
constexpr int kDecideThreads = 1024;
static_assert(kTile == kWarps * kWarpSpan, "a tile is the warps' spans side by side");

// The floats [start, end) of this block's chunk, and its layer.
struct Chunk {
  uint32_t layer, chunk;
  size_t start, end;
};

__device__ __forceinline__ Chunk ChunkOf(const LayerDeviceArgs& a) {
  const LayerSpan sp = a.spans[blockIdx.x];
  const size_t b0 = a.begin[sp.layer], b1 = a.begin[sp.layer + 1];
  const size_t start = b0 + size_t{sp.chunk} * a.chunk;
  return Chunk{sp.layer, sp.chunk, start, min(b1, start + a.chunk)};
}

// Element q of this thread in the tile at `base`: warp w owns [base + w * kWarpSpan, + kWarpSpan),
// item q is its q-th row of 32, so each load of a warp is 128 contiguous bytes and the order
// (warp, q, lane) is the index order (the compaction relies on it).
__device__ __forceinline__ size_t Element(size_t base, int q) {
  return base + (threadIdx.x / 32) * size_t{kWarpSpan} + q * 32 + (threadIdx.x % 32);
}

__device__ __forceinline__ void FlushHistogram(const uint32_t* sh, int bins, uint32_t* global) {
  for (int b = threadIdx.x; b < bins; b += kThreads) {
    if (sh[b]) atomicAdd(&global[b], sh[b]);
  }
}

// 1. p = g (+ r, momentum) kept in r, and the level-0 key histogram of each layer.
template <int kMode>
__global__ void __launch_bounds__(kThreads) LayerEfKernel(LayerDeviceArgs a, const float* __restrict__ g, float* r,
                                                          float* u, float m, uint32_t* hists) {
  __shared__ uint32_t hist_sh[codec::kMaxDigitBins];
  for (int b = threadIdx.x; b < codec::kMaxDigitBins; b += kThreads) hist_sh[b] = 0;
  __syncthreads();
  const Chunk c = ChunkOf(a);
  for (size_t base = c.start; base < c.end; base += kTile) {
    float gv[kItems], rv[kItems], uv[kItems];
#pragma unroll
    for (int q = 0; q < kItems; ++q) {  // every load before any store, so the tile's loads overlap
      const size_t i = Element(base, q);
      const bool in = i < c.end;
      gv[q] = in ? g[i] : 0.0f;
      rv[q] = in && kMode != kPlain ? r[i] : 0.0f;
      uv[q] = in && kMode == kMomentum ? u[i] : 0.0f;
    }
#pragma unroll
    for (int q = 0; q < kItems; ++q) {
      const size_t i = Element(base, q);
      if (i >= c.end) continue;
      const float p = ComputeP<kMode>(gv[q], rv[q], &uv[q], m);
      if (kMode != kPlain) r[i] = p;
      if (kMode == kMomentum) u[i] = uv[q];
      atomicAdd(&hist_sh[MagnitudeKey(p) >> codec::KeyDigitShift(0)], 1u);
    }
  }
  __syncthreads();
  FlushHistogram(hist_sh, codec::kMaxDigitBins, hists + size_t{c.layer} * codec::kMaxDigitBins);
}

// 3, 5. Key level 1 or 2 over the chunks of the layers still undecided.
__global__ void __launch_bounds__(kThreads) LayerHistKernel(LayerDeviceArgs a, int level, const float* __restrict__ x,
                                                            const LayerState* states, uint32_t* hists) {
  __shared__ uint32_t hist_sh[codec::kMaxDigitBins];
  const Chunk c = ChunkOf(a);
  const LayerState s = states[c.layer];
  if (s.done) return;  // uniform over the block
  const int bins = 1 << codec::KeyDigitBits(level), shift = codec::KeyDigitShift(level);
  for (int b = threadIdx.x; b < bins; b += kThreads) hist_sh[b] = 0;
  __syncthreads();
  for (size_t base = c.start; base < c.end; base += kTile) {
    float v[kItems];
#pragma unroll
    for (int q = 0; q < kItems; ++q) {
      const size_t i = Element(base, q);
      v[q] = i < c.end ? x[i] : 0.0f;
    }
#pragma unroll
    for (int q = 0; q < kItems; ++q) {
      const uint32_t key = MagnitudeKey(v[q]);
      if (Element(base, q) < c.end && codec::KeyMatchesPrefix(key, s.prefix, level)) {
        atomicAdd(&hist_sh[(key >> shift) & (bins - 1)], 1u);
      }
    }
  }
  __syncthreads();
  FlushHistogram(hist_sh, bins, hists + size_t{c.layer} * codec::kMaxDigitBins);
}

// 2, 4, 6. One block per layer: reads and zeroes the layer's histogram of `level`, finds the bin
// holding the k-th largest key (a scan from the top) and applies codec::DecideKeyLevel. Level 0
// starts the layer's state afresh (a layer with k >= n takes everything).
__global__ void __launch_bounds__(kDecideThreads) LayerDecideKernel(LayerDeviceArgs a, int level, const uint32_t* ks,
                                                                    LayerState* states, uint32_t* hists) {
  using Scan = cub::BlockScan<uint32_t, kDecideThreads>;
  __shared__ typename Scan::TempStorage scan_sh;
  const uint32_t layer = blockIdx.x;
  const uint32_t k = ks[layer];
  LayerState s;
  if (level == 0) {
    s = LayerState{};
    s.tie_key = kNoTieKey;
    s.done = k >= a.begin[layer + 1] - a.begin[layer] ? 1u : 0u;  // lo = 0: every key
    if (k == 0) s.done = 1, s.lo = codec::kKeyEnd;                 // no key
    // Written whole before any decision, so no field survives from the previous call.
    if (threadIdx.x == 0) states[layer] = s;
    __syncthreads();
  } else {
    s = states[layer];
    if (s.done) return;  // its histogram was not built
  }
  uint32_t* hist = hists + size_t{layer} * codec::kMaxDigitBins;
  const int bins = 1 << codec::KeyDigitBits(level);
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
  uint32_t above = 0, total = 0;
  Scan(scan_sh).ExclusiveSum(local, above, total);
  if (s.done) return;  // level 0 only: the histogram is zeroed, the state written

  const codec::SelectTargets t{k, k, k};
  const uint32_t need = k - s.count_above;
  for (int q = 0; q < per; ++q) {
    const int d = threadIdx.x * per + q;
    if (d < bins && above < need && above + h[q] >= need) {  // exactly one bin of the block
      const uint32_t b = static_cast<uint32_t>(bins - 1 - d);
      const codec::KeyLevelResult r = codec::DecideKeyLevel(level, s.prefix, b, s.count_above, above, h[q], t);
      LayerState next = s;
      if (r.kind == codec::KeyLevelResult::kDone) {
        next.done = 1, next.lo = r.key;
      } else if (r.kind == codec::KeyLevelResult::kTies) {
        next.done = 1, next.lo = r.key + 1, next.tie_key = r.key, next.need = static_cast<uint32_t>(k - r.count);
      } else {
        next.prefix = r.next_prefix, next.count_above = static_cast<uint32_t>(r.count);
      }
      states[layer] = next;
    }
    above += h[q];
  }
}

// Loads this thread's elements of the tile at `base` into v and flags (0/1) which are sent whole
// (key >= lo) and which tie at the k-th key (key == tie_key).
__device__ __forceinline__ void Classify(const float* x, size_t base, size_t end, const LayerState& s,
                                         float v[kItems], uint32_t above[kItems], uint32_t tie[kItems]) {
#pragma unroll
  for (int q = 0; q < kItems; ++q) {
    const size_t i = Element(base, q);
    v[q] = i < end ? x[i] : 0.0f;
  }
#pragma unroll
  for (int q = 0; q < kItems; ++q) {
    const bool in = Element(base, q) < end;
    const uint32_t key = MagnitudeKey(v[q]);
    above[q] = in && key >= s.lo ? 1u : 0u;
    tie[q] = in && key == s.tie_key ? 1u : 0u;
  }
}

using BlockReduceU32 = cub::BlockReduce<uint32_t, kThreads>;

// 7. Per chunk: how many keys are sent whole and how many tie at the k-th key.
__global__ void __launch_bounds__(kThreads) LayerCountKernel(LayerDeviceArgs a, const float* __restrict__ x,
                                                             const LayerState* states, uint2* counts) {
  __shared__ typename BlockReduceU32::TempStorage reduce_sh;
  const Chunk c = ChunkOf(a);
  const LayerState s = states[c.layer];
  uint32_t n_above = 0, n_tie = 0;
  for (size_t base = c.start; base < c.end; base += kTile) {
    float v[kItems];
    uint32_t above[kItems], tie[kItems];
    Classify(x, base, c.end, s, v, above, tie);
#pragma unroll
    for (int q = 0; q < kItems; ++q) n_above += above[q], n_tie += tie[q];
  }
  n_above = BlockReduceU32(reduce_sh).Sum(n_above);
  __syncthreads();
  n_tie = BlockReduceU32(reduce_sh).Sum(n_tie);
  if (threadIdx.x == 0) counts[blockIdx.x] = make_uint2(n_above, n_tie);
}

// The counts of the chunks of this block's layer before this one (they are the blocks just
// before it in the table), in every thread.
__device__ __forceinline__ uint2 CountsBefore(const Chunk& c, const uint2* counts) {
  __shared__ typename BlockReduceU32::TempStorage reduce_sh;
  __shared__ uint2 before_sh;
  uint32_t n_above = 0, n_tie = 0;
  for (uint32_t j = blockIdx.x - c.chunk + threadIdx.x; j < blockIdx.x; j += kThreads) {
    n_above += counts[j].x, n_tie += counts[j].y;
  }
  n_above = BlockReduceU32(reduce_sh).Sum(n_above);
  __syncthreads();
  n_tie = BlockReduceU32(reduce_sh).Sum(n_tie);
  if (threadIdx.x == 0) before_sh = make_uint2(n_above, n_tie);
  __syncthreads();
  return before_sh;
}

// 8. Ordered compaction. An element with A keys sent whole and T ties before it in its layer is
// sent when it is sent whole, or a tie with T < need; its slot is out[layer] + A + min(T, need).
// x is r with error feedback, so it is not __restrict__ (each element is read, then written, by
// one thread).
template <int kMode>
__global__ void __launch_bounds__(kThreads) LayerEmitKernel(LayerDeviceArgs a, const float* x, float* r,
                                                            float* u, const uint32_t* outs, uint32_t total,
                                                            const LayerState* states, const uint2* counts,
                                                            void* payload, codec::ValueType type) {
  __shared__ uint32_t warp_sh[2][kWarps];
  const Chunk c = ChunkOf(a);
  const LayerState s = states[c.layer];
  const uint2 mine = counts[blockIdx.x];
  uint2 run = CountsBefore(c, counts);  // uniform over the block
  if (mine.x == 0 && (mine.y == 0 || run.y >= s.need)) return;
  const uint32_t out0 = outs[c.layer];
  uint32_t* indices = static_cast<uint32_t*>(payload);
  uint8_t* values = static_cast<uint8_t*>(payload) + 4ull * total;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const uint32_t lanes_below = (1u << lane) - 1u;
  for (size_t base = c.start; base < c.end; base += kTile) {
    float v[kItems];
    uint32_t above[kItems], tie[kItems];
    Classify(x, base, c.end, s, v, above, tie);
    uint32_t warp_above = 0, warp_tie = 0;
#pragma unroll
    for (int q = 0; q < kItems; ++q) {
      above[q] = __ballot_sync(0xFFFFFFFFu, above[q]);
      tie[q] = __ballot_sync(0xFFFFFFFFu, tie[q]);
      warp_above += __popc(above[q]), warp_tie += __popc(tie[q]);
    }
    if (lane == 0) warp_sh[0][warp] = warp_above, warp_sh[1][warp] = warp_tie;
    __syncthreads();
    uint32_t A = run.x, T = run.y;  // before this warp's span
    for (int w = 0; w < kWarps; ++w) {
      if (w < warp) A += warp_sh[0][w], T += warp_sh[1][w];
      run.x += warp_sh[0][w], run.y += warp_sh[1][w];
    }
    __syncthreads();  // warp_sh is rewritten by the next tile
#pragma unroll
    for (int q = 0; q < kItems; ++q) {
      const uint32_t a_here = A + __popc(above[q] & lanes_below), t_here = T + __popc(tie[q] & lanes_below);
      const bool is_tie = (tie[q] >> lane) & 1u;
      if (((above[q] >> lane) & 1u) || (is_tie && t_here < s.need)) {
        const uint32_t pos = out0 + a_here + min(t_here, s.need);
        const size_t i = Element(base, q);
        indices[pos] = static_cast<uint32_t>(i);
        const float sent = StoreValue(values, type, pos, v[q]);
        if (kMode != kPlain) r[i] = __fsub_rn(v[q], sent);
        if (kMode == kMomentum) u[i] = 0.0f;
      }
      A += __popc(above[q]), T += __popc(tie[q]);
    }
  }
}

template <int kMode>
Status LaunchMode(const EfTensor& t, const LayerTopKArgs& layers, const SparseOutput& out, LayerTopKWorkspace::Impl& w,
                  cudaStream_t s) {
  const LayerDeviceArgs a = w.args(layers.d_begin);
  const float* x = kMode == kPlain ? t.grad : t.residual;  // p after pass 1
  LayerState* states = w.states.as<LayerState>();
  uint32_t* hists = w.hists.as<uint32_t>();
  uint2* counts = w.counts.as<uint2>();
  const dim3 grid(w.num_blocks), per_layer(layers.num_layers);
  LayerEfKernel<kMode><<<grid, kThreads, 0, s>>>(a, t.grad, t.residual, t.momentum, t.momentum_factor, hists);
  LayerDecideKernel<<<per_layer, kDecideThreads, 0, s>>>(a, 0, layers.d_k, states, hists);
  for (int level = 1; level < codec::kNumKeyLevels; ++level) {
    LayerHistKernel<<<grid, kThreads, 0, s>>>(a, level, x, states, hists);
    LayerDecideKernel<<<per_layer, kDecideThreads, 0, s>>>(a, level, layers.d_k, states, hists);
  }
  LayerCountKernel<<<grid, kThreads, 0, s>>>(a, x, states, counts);
  LayerEmitKernel<kMode><<<grid, kThreads, 0, s>>>(a, x, t.residual, t.momentum, layers.d_out,
                                                   static_cast<uint32_t>(layers.total_k), states, counts, out.payload,
                                                   out.value_type);
  OSPREY_CUDA_RETURN_IF_LAUNCH_FAILED();
  return Status::OK();
}

}  // namespace

std::vector<uint32_t> LayerKs(const std::vector<uint32_t>& sizes, double density, uint64_t min_k) {
  std::vector<uint32_t> ks(sizes.size());
  for (size_t l = 0; l < sizes.size(); ++l) {
    ks[l] = sizes[l] == 0 ? 0u
                          : static_cast<uint32_t>(
                                codec::MakeTargets(sizes[l], codec::FlooredDensity(density, sizes[l], min_k), 0.0).k);
  }
  return ks;
}

Status LayerTopK(const EfTensor& t, const LayerTopKArgs& layers, const SparseOutput& out, LayerTopKWorkspace* ws,
                 void* stream) {
  if (t.n >= (size_t{1} << 32)) return InvalidArgument("LayerTopK: n = " + std::to_string(t.n) + " >= 2^32");
  if (t.grad == nullptr || out.payload == nullptr || layers.d_begin == nullptr || layers.d_k == nullptr ||
      layers.d_out == nullptr || ws == nullptr) {
    return InvalidArgument("LayerTopK: null device pointer or workspace");
  }
  if (t.momentum != nullptr && t.residual == nullptr) return InvalidArgument("LayerTopK: momentum needs a residual");
  if (out.capacity < layers.total_k) {
    return InvalidArgument("LayerTopK: capacity " + std::to_string(out.capacity) + " < " +
                           std::to_string(layers.total_k) + " pairs");
  }
  LayerTopKWorkspace::Impl& w = ws->impl();
  if (w.n != t.n || w.num_layers != layers.num_layers) {
    return InvalidArgument("LayerTopK: workspace for " + std::to_string(w.num_layers) + " layers of " +
                           std::to_string(w.n) + " floats, called with " + std::to_string(layers.num_layers) +
                           " layers of " + std::to_string(t.n));
  }
  if (layers.num_layers == 0) return Status::OK();
  if (w.num_blocks == 0) return Status::OK();  // every layer is empty: nothing to send
  auto s = static_cast<cudaStream_t>(stream);
  if (t.momentum != nullptr) return LaunchMode<kMomentum>(t, layers, out, w, s);
  if (t.residual != nullptr) return LaunchMode<kResidual>(t, layers, out, w, s);
  return LaunchMode<kPlain>(t, layers, out, w, s);
}

}  // namespace osprey::cuda
