// The CUDA layer-wise top-k (worker/cuda/layer_kernels.h, all layers in one launch) against its
// CPU reference: per layer, the codec stack of MakeCodec (exact top-k + error feedback, DGC
// momentum) with the layer floor in CodecState::min_k, as DenseCompressor's granularity "layer"
// runs it. Same frame bytes (indices shifted by the layer offset, values), bit-identical
// residuals and momenta, over several steps.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>

#include "common/codec/codec.h"
#include "tests/codec/cuda_test_util.h"
#include "worker/cuda/layer_kernels.h"

namespace osprey::cuda {
namespace {

using testing::Ef;

struct Case {
  Ef ef = Ef::kResidual;
  codec::ValueType type = codec::ValueType::kFp32;
  double density = 0.01;
  uint64_t min_k = 1;
};

// Layer sizes with a 100x smaller layer, single-element layers and a layer of ties.
const std::vector<uint32_t> kSizes = {1, 7, 100, 5000, 70000, 3000, 1, 40000};

std::vector<float> Gradient(std::mt19937* rng, const std::vector<uint32_t>& begin) {
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> g(begin.back());
  for (size_t l = 0; l + 1 < begin.size(); ++l) {
    for (uint32_t i = begin[l]; i < begin[l + 1]; ++i) {
      float x = normal(*rng);
      if (l == 5) x *= 0.01f;                       // the small layer
      if (l == 7) x = (i % 3 == 0) ? 0.5f : x * 0.1f;  // ties at the k-th magnitude
      g[i] = x;
    }
  }
  return g;
}

void RunCase(const Case& c) {
  std::vector<uint32_t> begin = {0};
  for (uint32_t s : kSizes) begin.push_back(begin.back() + s);
  const size_t n = begin.back();
  const std::vector<uint32_t> ks = LayerKs(kSizes, c.density, c.min_k);
  std::vector<uint32_t> outs = {0};
  for (uint32_t k : ks) outs.push_back(outs.back() + k);
  const uint64_t total = outs.back();

  // CPU: one codec stack and one state per layer.
  codec::CodecConfig cfg;
  cfg.type = "topk";
  cfg.density = c.density;
  cfg.error_feedback = c.ef != Ef::kNone;
  cfg.dgc_momentum = c.ef == Ef::kMomentum ? 0.9f : 0.0f;
  cfg.value_type = codec::ValueTypeName(c.type);
  auto codec = codec::MakeCodec(cfg);
  ASSERT_TRUE(codec.ok()) << codec.status().ToString();
  std::vector<codec::CodecState> states(kSizes.size());
  for (auto& s : states) s.min_k = c.min_k;

  // GPU.
  std::vector<float> zeros(n, 0.0f);
  DeviceBuffer dr = testing::Upload(zeros), du = testing::Upload(zeros);
  DeviceBuffer dbegin = testing::Upload(begin), dk = testing::Upload(ks), dout = testing::Upload(outs);
  const size_t vb = codec::ValueBytes(c.type);
  auto payload = DeviceBuffer::Allocate(total * (4 + vb));
  ASSERT_TRUE(payload.ok());
  const LayerTopKArgs layers{dbegin.as<uint32_t>(), dk.as<uint32_t>(), dout.as<uint32_t>(),
                             static_cast<uint32_t>(kSizes.size()), total};

  std::mt19937 rng(11);
  for (int step = 0; step < 3; ++step) {
    const std::vector<float> g = Gradient(&rng, begin);
    // CPU frame, merged as DenseCompressor merges units.
    std::vector<uint8_t> want(total * (4 + vb));
    size_t pos = 0;
    for (size_t l = 0; l < kSizes.size(); ++l) {
      codec::Encoded e;
      ASSERT_TRUE((*codec)->Encode(g.data() + begin[l], kSizes[l], &states[l], &e).ok());
      ASSERT_EQ(e.meta.count, ks[l]) << "layer " << l;
      for (size_t j = 0; j < e.meta.count; ++j, ++pos) {
        uint32_t idx;
        std::memcpy(&idx, e.payload.data() + 4 * j, 4);
        idx += begin[l];
        std::memcpy(want.data() + 4 * pos, &idx, 4);
        std::memcpy(want.data() + 4 * total + vb * pos, e.payload.data() + 4 * e.meta.count + vb * j, vb);
      }
    }
    DeviceBuffer dg = testing::Upload(g);
    EfTensor t;
    t.grad = dg.as<float>();
    t.residual = c.ef != Ef::kNone ? dr.as<float>() : nullptr;
    t.momentum = c.ef == Ef::kMomentum ? du.as<float>() : nullptr;
    t.momentum_factor = 0.9f;
    t.n = n;
    ASSERT_TRUE(LayerTopK(t, layers, SparseOutput{payload->data(), total, c.type}, nullptr).ok());
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    const std::vector<uint8_t> got = testing::Download<uint8_t>(payload->data(), want.size());
    size_t bad = 0;
    for (size_t i = 0; i < want.size(); ++i) bad += got[i] != want[i];
    EXPECT_EQ(bad, 0u) << "frame bytes differ at step " << step;
    if (c.ef == Ef::kNone) continue;
    std::vector<float> cpu_r(n), cpu_u(n);
    for (size_t l = 0; l < kSizes.size(); ++l) {
      std::copy(states[l].residual.begin(), states[l].residual.end(), cpu_r.begin() + begin[l]);
      if (c.ef == Ef::kMomentum) std::copy(states[l].momentum.begin(), states[l].momentum.end(), cpu_u.begin() + begin[l]);
    }
    testing::ExpectSameBits(testing::Download<float>(dr.data(), n), cpu_r, "residual");
    if (c.ef == Ef::kMomentum) testing::ExpectSameBits(testing::Download<float>(du.data(), n), cpu_u, "momentum");
  }
}

TEST(CudaLayerTopKTest, MatchesTheCpuLayerwiseCodec) {
  OSPREY_REQUIRE_GPU();
  RunCase({Ef::kResidual, codec::ValueType::kFp32, 0.01, 1});
  RunCase({Ef::kNone, codec::ValueType::kFp32, 0.01, 1});
  RunCase({Ef::kMomentum, codec::ValueType::kFp32, 0.01, 1});
  RunCase({Ef::kResidual, codec::ValueType::kFp16, 0.001, 8});
  RunCase({Ef::kResidual, codec::ValueType::kBf16, 0.2, 1});
}

// The diagnostics' per-layer statistics on the device against codec::ComputeLayerStepStats, on the
// frame LayerTopK just produced (sampled layers included: max_samples 4096 < 70000).
TEST(CudaLayerTopKTest, LayerStepStatsMatchTheCpuReference) {
  OSPREY_REQUIRE_GPU();
  std::vector<uint32_t> begin = {0};
  for (uint32_t s : kSizes) begin.push_back(begin.back() + s);
  const size_t n = begin.back();
  const std::vector<uint32_t> ks = LayerKs(kSizes, 0.01, 1);
  std::vector<uint32_t> outs = {0};
  for (uint32_t k : ks) outs.push_back(outs.back() + k);
  const uint64_t total = outs.back();
  std::mt19937 rng(5);
  const std::vector<float> g = Gradient(&rng, begin);
  DeviceBuffer dg = testing::Upload(g), dbegin = testing::Upload(begin), dk = testing::Upload(ks),
               dout = testing::Upload(outs);
  auto payload = DeviceBuffer::Allocate(total * 8);
  auto stats = DeviceBuffer::Allocate(kSizes.size() * sizeof(codec::LayerStepStats));
  ASSERT_TRUE(payload.ok() && stats.ok());
  EfTensor t;
  t.grad = dg.as<float>();
  t.n = n;
  const LayerTopKArgs layers{dbegin.as<uint32_t>(), dk.as<uint32_t>(), dout.as<uint32_t>(),
                             static_cast<uint32_t>(kSizes.size()), total};
  ASSERT_TRUE(LayerTopK(t, layers, SparseOutput{payload->data(), total, codec::ValueType::kFp32}, nullptr).ok());
  const uint32_t* d_idx = payload->as<uint32_t>();
  ASSERT_TRUE(LayerStepStats(dg.as<float>(), dbegin.as<uint32_t>(), static_cast<uint32_t>(kSizes.size()), d_idx,
                             d_idx + total, codec::ValueType::kFp32, total, 4096,
                             stats->as<codec::LayerStepStats>(), nullptr)
                  .ok());
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  const std::vector<uint32_t> idx = testing::Download<uint32_t>(d_idx, total);
  const std::vector<float> val = testing::Download<float>(d_idx + total, total);
  const std::vector<codec::LayerStepStats> want =
      codec::ComputeLayerStepStats(g.data(), begin, idx.data(), val.data(), total, 4096);
  const std::vector<codec::LayerStepStats> got =
      testing::Download<codec::LayerStepStats>(stats->data(), kSizes.size());
  for (size_t l = 0; l < kSizes.size(); ++l) {
    EXPECT_NEAR(got[l].raw_sq, want[l].raw_sq, 1e-9 * want[l].raw_sq) << l;
    EXPECT_NEAR(got[l].sent_sq, want[l].sent_sq, 1e-9 * want[l].sent_sq) << l;
    EXPECT_NEAR(got[l].dot, want[l].dot, 1e-9 * std::abs(want[l].dot)) << l;
    EXPECT_EQ(got[l].sent, want[l].sent) << l;
    EXPECT_NEAR(codec::StepCosine(got[l]), codec::StepCosine(want[l]), 1e-9) << l;
  }
  EXPECT_GT(codec::StepCosine(want[5]), 0.05) << "the small layer gets its own top 1%";
}

TEST(CudaLayerTopKTest, LayerKsMatchTheCpuFloor) {
  EXPECT_EQ(LayerKs({1, 100, 20000}, 0.001, 1), (std::vector<uint32_t>{1, 1, 20}));
  EXPECT_EQ(LayerKs({1, 100, 20000}, 0.001, 50), (std::vector<uint32_t>{1, 50, 50}));
}

TEST(CudaLayerTopKTest, RefusesTooSmallAnOutput) {
  OSPREY_REQUIRE_GPU();
  DeviceBuffer d = testing::Upload(std::vector<uint32_t>{0, 4});
  EfTensor t;
  t.grad = reinterpret_cast<const float*>(d.data());
  t.n = 4;
  const LayerTopKArgs layers{d.as<uint32_t>(), d.as<uint32_t>(), d.as<uint32_t>(), 1, 10};
  Status s = LayerTopK(t, layers, SparseOutput{d.data(), 5, codec::ValueType::kFp32}, nullptr);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace osprey::cuda
