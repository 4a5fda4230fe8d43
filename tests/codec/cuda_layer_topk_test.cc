// The CUDA layer-wise top-k (worker/cuda/layer_kernels.h, segmented over chunks) against its
// CPU reference: per layer, the codec stack of MakeCodec (exact top-k + error feedback, DGC
// momentum) with the layer floor in CodecState::min_k, as DenseCompressor's granularity "layer"
// runs it. Same frame bytes (indices shifted by the layer offset, values), bit-identical
// residuals and momenta, over several steps.
#include <gtest/gtest.h>

#include <cmath>
#include <algorithm>
#include <cstring>
#include <functional>
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
  uint32_t chunk = 0;  // LayerTopKWorkspace::Create's; 0 picks it
  int steps = 3;
};

using GradientFn = std::function<std::vector<float>(std::mt19937*, const std::vector<uint32_t>& begin)>;

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

std::vector<uint32_t> Offsets(const std::vector<uint32_t>& sizes) {
  std::vector<uint32_t> begin = {0};
  for (uint32_t s : sizes) begin.push_back(begin.back() + s);
  return begin;
}

// Equal bits, or both NaN: the GPU's arithmetic returns the canonical NaN where x86 keeps the
// operand's payload.
bool SameFloatBits(uint32_t a, uint32_t b) {
  const auto nan = [](uint32_t x) { return (x & 0x7FFFFFFFu) > 0x7F800000u; };
  return a == b || (nan(a) && nan(b));
}

size_t CountDifferentFloats(const std::vector<float>& got, const std::vector<float>& want, const char* what) {
  size_t bad = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    if (!SameFloatBits(codec::FloatBits(got[i]), codec::FloatBits(want[i])) && bad++ < 5) {
      ADD_FAILURE() << what << "[" << i << "]: gpu " << got[i] << " cpu " << want[i];
    }
  }
  return bad;
}

// The GPU's frames, residuals and momenta against the CPU codec's, layer by layer, over c.steps
// steps. Frame bytes are compared exactly, except that fp32 values compare NaN equal to NaN.
void RunCase(const std::vector<uint32_t>& sizes, const GradientFn& gradient, const Case& c) {
  SCOPED_TRACE(::testing::Message() << sizes.size() << " layers, density " << c.density << ", min_k " << c.min_k
                                    << ", chunk " << c.chunk << ", ef " << static_cast<int>(c.ef) << ", type "
                                    << codec::ValueTypeName(c.type));
  const std::vector<uint32_t> begin = Offsets(sizes);
  const size_t n = begin.back();
  const std::vector<uint32_t> ks = LayerKs(sizes, c.density, c.min_k);
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
  std::vector<codec::CodecState> states(sizes.size());
  for (auto& s : states) s.min_k = c.min_k;

  // GPU.
  std::vector<float> zeros(n, 0.0f);
  DeviceBuffer dr = testing::Upload(zeros), du = testing::Upload(zeros);
  DeviceBuffer dbegin = testing::Upload(begin), dk = testing::Upload(ks), dout = testing::Upload(outs);
  const size_t vb = codec::ValueBytes(c.type);
  auto payload = DeviceBuffer::Allocate(total * (4 + vb) + 1);
  ASSERT_TRUE(payload.ok());
  auto ws = LayerTopKWorkspace::Create(begin, c.chunk);
  ASSERT_TRUE(ws.ok()) << ws.status().ToString();
  if (c.chunk > 0) {
    ASSERT_EQ((*ws)->chunk(), c.chunk);
  }
  const LayerTopKArgs layers{dbegin.as<uint32_t>(), dk.as<uint32_t>(), dout.as<uint32_t>(),
                             static_cast<uint32_t>(sizes.size()), total};

  std::mt19937 rng(11);
  for (int step = 0; step < c.steps; ++step) {
    const std::vector<float> g = gradient(&rng, begin);
    // CPU frame, merged as DenseCompressor merges units.
    std::vector<uint8_t> want(total * (4 + vb));
    size_t pos = 0;
    for (size_t l = 0; l < sizes.size(); ++l) {
      codec::Encoded e;
      ASSERT_TRUE((*codec)->Encode(g.data() + begin[l], sizes[l], &states[l], &e).ok());
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
    ASSERT_TRUE(LayerTopK(t, layers, SparseOutput{payload->data(), total, c.type}, ws->get(), nullptr).ok());
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    const std::vector<uint8_t> got = testing::Download<uint8_t>(payload->data(), want.size());
    size_t bad = 0;
    for (size_t i = 0; i < want.size(); ++i) {
      if (got[i] == want[i]) continue;
      const size_t value = i >= 4 * total && vb == 4 ? (i - 4 * total) / 4 : SIZE_MAX;
      uint32_t a = 0, b = 0;
      if (value != SIZE_MAX) {
        std::memcpy(&a, got.data() + 4 * total + 4 * value, 4);
        std::memcpy(&b, want.data() + 4 * total + 4 * value, 4);
      }
      if (value == SIZE_MAX || !SameFloatBits(a, b)) {
        if (bad++ < 5) ADD_FAILURE() << "frame byte " << i << " of " << want.size() << " (index part " << 4 * total << ")";
      }
    }
    EXPECT_EQ(bad, 0u) << "frame bytes differ at step " << step;
    if (c.ef == Ef::kNone) continue;
    std::vector<float> cpu_r(n), cpu_u(n);
    for (size_t l = 0; l < sizes.size(); ++l) {
      std::copy(states[l].residual.begin(), states[l].residual.end(), cpu_r.begin() + begin[l]);
      if (c.ef == Ef::kMomentum) std::copy(states[l].momentum.begin(), states[l].momentum.end(), cpu_u.begin() + begin[l]);
    }
    EXPECT_EQ(CountDifferentFloats(testing::Download<float>(dr.data(), n), cpu_r, "residual"), 0u) << "step " << step;
    if (c.ef == Ef::kMomentum) {
      EXPECT_EQ(CountDifferentFloats(testing::Download<float>(du.data(), n), cpu_u, "momentum"), 0u) << "step " << step;
    }
  }
}

TEST(CudaLayerTopKTest, MatchesTheCpuLayerwiseCodec) {
  OSPREY_REQUIRE_GPU();
  RunCase(kSizes, Gradient, {Ef::kResidual, codec::ValueType::kFp32, 0.01, 1});
  RunCase(kSizes, Gradient, {Ef::kNone, codec::ValueType::kFp32, 0.01, 1});
  RunCase(kSizes, Gradient, {Ef::kMomentum, codec::ValueType::kFp32, 0.01, 1});
  RunCase(kSizes, Gradient, {Ef::kResidual, codec::ValueType::kFp16, 0.001, 8});
  RunCase(kSizes, Gradient, {Ef::kResidual, codec::ValueType::kBf16, 0.2, 1});
  // Small chunks: every layer above 1000 floats is cut, the layer of ties (l = 7) into 40 chunks.
  RunCase(kSizes, Gradient, {Ef::kResidual, codec::ValueType::kFp32, 0.01, 1, 1000});
  RunCase(kSizes, Gradient, {Ef::kMomentum, codec::ValueType::kBf16, 0.05, 1, 4097});
}

// The case the segmented design is for: one layer of 3M floats (hundreds of blocks) next to tiny
// ones, in every EF mode.
TEST(CudaLayerTopKTest, SegmentsABigLayerNextToTinyOnes) {
  OSPREY_REQUIRE_GPU();
  const std::vector<uint32_t> sizes = {3, 3000000, 1, 17, 2, 300};
  const GradientFn gradient = [](std::mt19937* rng, const std::vector<uint32_t>& begin) {
    std::normal_distribution<float> normal(0.0f, 1.0f);
    std::vector<float> g(begin.back());
    for (float& x : g) x = normal(*rng);
    for (uint32_t i = begin[5]; i < begin[6]; ++i) g[i] *= 1e-3f;  // a quiet small layer
    return g;
  };
  RunCase(sizes, gradient, {Ef::kResidual, codec::ValueType::kFp32, 0.01, 1});
  RunCase(sizes, gradient, {Ef::kMomentum, codec::ValueType::kFp32, 0.001, 4});
  RunCase(sizes, gradient, {Ef::kNone, codec::ValueType::kBf16, 0.01, 1, 0, 1});
}

// Ties at the k-th magnitude spread over many chunks: every 37th float of layer 1 is +-0.5 and the
// rest are smaller, so the k lowest-index ties reach across several chunks; layer 3 is all ties
// but for a few larger floats.
TEST(CudaLayerTopKTest, TiesAtTheThresholdSpanChunkBoundaries) {
  OSPREY_REQUIRE_GPU();
  const std::vector<uint32_t> sizes = {5, 100000, 3, 60000};
  const GradientFn gradient = [](std::mt19937* rng, const std::vector<uint32_t>& begin) {
    std::normal_distribution<float> normal(0.0f, 0.05f);
    std::vector<float> g(begin.back());
    for (float& x : g) x = std::max(-0.4f, std::min(0.4f, normal(*rng)));
    for (uint32_t i = begin[1]; i < begin[2]; i += 37) g[i] = (i / 37) % 2 ? 0.5f : -0.5f;
    for (uint32_t i = begin[3]; i < begin[4]; ++i) g[i] = i % 9001 == 0 ? 2.0f : -0.25f;
    return g;
  };
  for (uint32_t chunk : {0u, 1000u, 4097u, 10000u}) {
    RunCase(sizes, gradient, {Ef::kNone, codec::ValueType::kFp32, 0.01, 1, chunk, 1});
    RunCase(sizes, gradient, {Ef::kResidual, codec::ValueType::kFp32, 0.01, 1, chunk});
  }
}

// k >= n sends every float (and skips the key levels); k = 1 sends only the largest.
TEST(CudaLayerTopKTest, SendsEverythingOrOneFloatPerLayer) {
  OSPREY_REQUIRE_GPU();
  for (uint32_t chunk : {0u, 1000u}) {
    RunCase(kSizes, Gradient, {Ef::kResidual, codec::ValueType::kFp32, 1.0, 1, chunk, 2});
    RunCase(kSizes, Gradient, {Ef::kMomentum, codec::ValueType::kFp16, 1e-9, 1, chunk, 2});
    RunCase(kSizes, Gradient, {Ef::kNone, codec::ValueType::kFp32, 1e-9, 1, chunk, 1});
  }
  EXPECT_EQ(LayerKs({70000, 5}, 1e-9, 1), (std::vector<uint32_t>{1, 1}));
}

// NaN has the largest magnitude key: NaNs (more of them than k in layer 1) are sent first, the
// lowest-index ones when they tie, and then infinities.
TEST(CudaLayerTopKTest, NanCountsAsTheLargestMagnitude) {
  OSPREY_REQUIRE_GPU();
  const std::vector<uint32_t> sizes = {50, 20000, 9, 30000};
  const GradientFn gradient = [](std::mt19937* rng, const std::vector<uint32_t>& begin) {
    std::normal_distribution<float> normal(0.0f, 1.0f);
    std::vector<float> g(begin.back());
    for (float& x : g) x = normal(*rng);
    for (uint32_t i = begin[1]; i < begin[2]; i += 80) g[i] = std::nanf("");  // 250 NaNs, k = 200
    for (uint32_t i = begin[3]; i < begin[4]; i += 1000) g[i] = i % 2000 ? INFINITY : -INFINITY;
    g[begin[3] + 17] = std::nanf("");
    return g;
  };
  RunCase(sizes, gradient, {Ef::kNone, codec::ValueType::kFp32, 0.01, 1, 0, 1});
  RunCase(sizes, gradient, {Ef::kNone, codec::ValueType::kFp32, 0.01, 1, 3000, 1});
  RunCase(sizes, gradient, {Ef::kResidual, codec::ValueType::kFp32, 0.01, 1, 3000, 2});
}

// The bench's 1e8-float list: 200 layers of 500k floats.
TEST(CudaLayerTopKTest, TwoHundredLayersOfHalfAMillion) {
  OSPREY_REQUIRE_GPU();
  const GradientFn gradient = [](std::mt19937* rng, const std::vector<uint32_t>& begin) {
    std::uniform_real_distribution<float> uniform(-1.0f, 1.0f);
    std::vector<float> g(begin.back());
    for (float& x : g) x = uniform(*rng) * uniform(*rng);
    return g;
  };
  RunCase(std::vector<uint32_t>(200, 500000), gradient, {Ef::kResidual, codec::ValueType::kFp32, 0.01, 1, 0, 1});
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
  auto ws = LayerTopKWorkspace::Create(begin);
  ASSERT_TRUE(ws.ok()) << ws.status().ToString();
  ASSERT_TRUE(
      LayerTopK(t, layers, SparseOutput{payload->data(), total, codec::ValueType::kFp32}, ws->get(), nullptr).ok());
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

TEST(CudaLayerTopKTest, RefusesTooSmallAnOutputAndAForeignWorkspace) {
  OSPREY_REQUIRE_GPU();
  DeviceBuffer d = testing::Upload(std::vector<uint32_t>{0, 4});
  auto ws = LayerTopKWorkspace::Create({0, 4});
  auto other = LayerTopKWorkspace::Create({0, 3, 4});
  ASSERT_TRUE(ws.ok() && other.ok());
  EXPECT_EQ((*ws)->num_blocks(), 1u);
  EXPECT_EQ((*other)->num_layers(), 2u);
  EfTensor t;
  t.grad = reinterpret_cast<const float*>(d.data());
  t.n = 4;
  const LayerTopKArgs layers{d.as<uint32_t>(), d.as<uint32_t>(), d.as<uint32_t>(), 1, 10};
  Status s = LayerTopK(t, layers, SparseOutput{d.data(), 5, codec::ValueType::kFp32}, ws->get(), nullptr);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  s = LayerTopK(t, layers, SparseOutput{d.data(), 10, codec::ValueType::kFp32}, other->get(), nullptr);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("workspace"), std::string::npos) << s.ToString();
  s = LayerTopK(t, layers, SparseOutput{d.data(), 10, codec::ValueType::kFp32}, nullptr, nullptr);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
}

// Checked before any CUDA call, so this runs without a GPU too.
TEST(CudaLayerTopKTest, WorkspaceRefusesBadOffsets) {
  auto s = LayerTopKWorkspace::Create({0, 5, 3});
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.status().message().find("begin[2]"), std::string::npos) << s.status().ToString();
  EXPECT_EQ(LayerTopKWorkspace::Create({1, 5}).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(LayerTopKWorkspace::Create({}).status().code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace osprey::cuda
