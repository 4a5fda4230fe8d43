// LayerTopK: one thread block per layer runs the select rule of select_rule.h over its layer
// (EF pass, key levels, ties, ordered emission), so every layer's k is met in one launch.
#include <cub/block/block_scan.cuh>

#include "common/codec/radix_select.h"
#include "common/codec/sparse_codecs.h"
#include "worker/cuda/layer_kernels.h"
#include "worker/cuda/select_device.cuh"

namespace osprey::cuda {
namespace {

using codec::MagnitudeKey;

constexpr int kLayerThreads = 512;

struct LayerShared {
  uint32_t hist[codec::kMaxDigitBins];
  typename cub::BlockScan<uint32_t, kLayerThreads>::TempStorage scan;
  uint32_t prefix, count_above, done, sel_key, sel_tie, ties, tie_key, running;
  uint64_t need;
};

template <int kMode>
__global__ void __launch_bounds__(kLayerThreads)
    LayerTopKKernel(const float* __restrict__ g, float* r, float* u, float m, const uint32_t* begin,
                    const uint32_t* ks, const uint32_t* outs, uint32_t total, void* payload,
                    codec::ValueType type) {
  __shared__ LayerShared sh;
  const uint32_t layer = blockIdx.x;
  const uint32_t b0 = begin[layer], n = begin[layer + 1] - b0;
  const uint32_t k = ks[layer], out0 = outs[layer];
  const float* x = kMode == kPlain ? g + b0 : r + b0;  // p after the EF pass

  // 1. p = g (+ r, momentum): kept in r for the passes below.
  if (kMode != kPlain) {
    for (uint32_t i = threadIdx.x; i < n; i += kLayerThreads) {
      float uu = kMode == kMomentum ? u[b0 + i] : 0.0f;
      const float p = ComputeP<kMode>(g[b0 + i], r[b0 + i], &uu, m);
      r[b0 + i] = p;
      if (kMode == kMomentum) u[b0 + i] = uu;
    }
  }
  if (threadIdx.x == 0) {
    sh.prefix = 0, sh.count_above = 0, sh.done = k >= n ? 1u : 0u, sh.ties = 0;
    sh.sel_key = 0, sh.sel_tie = UINT32_MAX;  // k >= n: every key >= 0
    sh.running = 0;
  }
  __syncthreads();

  // 2. Key levels: histogram of the keys in the prefix range, then thread 0 decides.
  const codec::SelectTargets t{k, k, k};
  for (int level = 0; level < codec::kNumKeyLevels && !sh.done; ++level) {
    const int bins = 1 << codec::KeyDigitBits(level), shift = codec::KeyDigitShift(level);
    for (int b = threadIdx.x; b < bins; b += kLayerThreads) sh.hist[b] = 0;
    __syncthreads();
    const uint32_t prefix = sh.prefix;
    for (uint32_t i = threadIdx.x; i < n; i += kLayerThreads) {
      const uint32_t key = MagnitudeKey(x[i]);
      if (codec::KeyMatchesPrefix(key, prefix, level)) atomicAdd(&sh.hist[(key >> shift) & (bins - 1)], 1u);
    }
    __syncthreads();
    if (threadIdx.x == 0) {
      uint64_t above = 0;
      int b = bins - 1;
      for (; b > 0 && sh.count_above + above + sh.hist[b] < k; --b) above += sh.hist[b];
      const codec::KeyLevelResult res = codec::DecideKeyLevel(level, prefix, b, sh.count_above, above, sh.hist[b], t);
      if (res.kind == codec::KeyLevelResult::kDone) {
        sh.done = 1, sh.sel_key = res.key, sh.sel_tie = UINT32_MAX;
      } else if (res.kind == codec::KeyLevelResult::kTies) {
        sh.done = 1, sh.ties = 1, sh.tie_key = res.key, sh.sel_key = res.key, sh.need = k - res.count;
      } else {
        sh.prefix = res.next_prefix, sh.count_above = static_cast<uint32_t>(res.count);
      }
    }
    __syncthreads();
  }

  // 3. Ties at the k-th key: the lowest indices, digit by digit (8 bits, most significant first).
  if (sh.ties) {
    uint32_t tprefix = 0;
    for (int level = 0; level < codec::kNumTieLevels; ++level) {
      for (int b = threadIdx.x; b < codec::kTieBins; b += kLayerThreads) sh.hist[b] = 0;
      __syncthreads();
      const int shift = codec::TieDigitShift(level);
      for (uint32_t i = threadIdx.x; i < n; i += kLayerThreads) {
        if (MagnitudeKey(x[i]) == sh.tie_key && codec::IndexMatchesPrefix(i, tprefix, level)) {
          atomicAdd(&sh.hist[(i >> shift) & 255u], 1u);
        }
      }
      __syncthreads();
      if (threadIdx.x == 0) {
        uint64_t below = 0;
        uint32_t b = 0;
        for (; b < 255 && below + sh.hist[b] < sh.need; ++b) below += sh.hist[b];
        uint64_t need = sh.need;
        uint32_t next = 0, tie = 0;
        if (codec::DecideTieLevel(level, tprefix, b, below, sh.hist[b], &need, &next, &tie)) {
          sh.ties = 0, sh.sel_tie = tie;
        } else {
          sh.need = need, sh.prefix = next;
        }
      }
      __syncthreads();
      if (!sh.ties) break;
      tprefix = sh.prefix;
    }
  }

  // 4. Ordered emission: a block scan per tile of kLayerThreads elements.
  const uint32_t sel_key = sh.sel_key, sel_tie = sh.sel_tie;
  uint32_t* indices = static_cast<uint32_t*>(payload);
  uint8_t* values = static_cast<uint8_t*>(payload) + 4ull * total;
  for (uint32_t base = 0; base < n; base += kLayerThreads) {
    const uint32_t i = base + threadIdx.x;
    float p = 0.0f;
    uint32_t take = 0;
    if (i < n) {
      p = x[i];
      const uint32_t key = MagnitudeKey(p);
      take = key > sel_key || (key == sel_key && i <= sel_tie) ? 1u : 0u;
    }
    uint32_t before = 0, tile_total = 0;
    cub::BlockScan<uint32_t, kLayerThreads>(sh.scan).ExclusiveSum(take, before, tile_total);
    if (take) {
      const uint32_t pos = out0 + sh.running + before;
      indices[pos] = b0 + i;
      const float sent = StoreValue(values, type, pos, p);
      if (kMode != kPlain) r[b0 + i] = __fsub_rn(p, sent);
      if (kMode == kMomentum) u[b0 + i] = 0.0f;
    }
    __syncthreads();
    if (threadIdx.x == 0) sh.running += tile_total;
    __syncthreads();
  }
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

Status LayerTopK(const EfTensor& t, const LayerTopKArgs& layers, const SparseOutput& out, void* stream) {
  if (t.n >= (size_t{1} << 32)) return InvalidArgument("LayerTopK: n = " + std::to_string(t.n) + " >= 2^32");
  if (t.grad == nullptr || out.payload == nullptr || layers.d_begin == nullptr || layers.d_k == nullptr ||
      layers.d_out == nullptr) {
    return InvalidArgument("LayerTopK: null device pointer");
  }
  if (t.momentum != nullptr && t.residual == nullptr) return InvalidArgument("LayerTopK: momentum needs a residual");
  if (out.capacity < layers.total_k) {
    return InvalidArgument("LayerTopK: capacity " + std::to_string(out.capacity) + " < " +
                           std::to_string(layers.total_k) + " pairs");
  }
  if (layers.num_layers == 0) return Status::OK();
  auto s = static_cast<cudaStream_t>(stream);
  const uint32_t total = static_cast<uint32_t>(layers.total_k);
  const dim3 grid(layers.num_layers), block(kLayerThreads);
  if (t.momentum != nullptr) {
    LayerTopKKernel<kMomentum><<<grid, block, 0, s>>>(t.grad, t.residual, t.momentum, t.momentum_factor,
                                                      layers.d_begin, layers.d_k, layers.d_out, total, out.payload,
                                                      out.value_type);
  } else if (t.residual != nullptr) {
    LayerTopKKernel<kResidual><<<grid, block, 0, s>>>(t.grad, t.residual, nullptr, 0.0f, layers.d_begin, layers.d_k,
                                                      layers.d_out, total, out.payload, out.value_type);
  } else {
    LayerTopKKernel<kPlain><<<grid, block, 0, s>>>(t.grad, nullptr, nullptr, 0.0f, layers.d_begin, layers.d_k,
                                                   layers.d_out, total, out.payload, out.value_type);
  }
  OSPREY_CUDA_RETURN_IF_LAUNCH_FAILED();
  return Status::OK();
}

}  // namespace osprey::cuda
