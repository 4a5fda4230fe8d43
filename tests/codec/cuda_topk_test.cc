// CUDA top-k and threshold selection against their CPU references (common/codec), on fresh random
// inputs: same index sets, bit-identical values, residuals and momenta.
#include <gtest/gtest.h>

#include <functional>

#include "common/codec/codec.h"
#include "tests/codec/cuda_test_util.h"

namespace osprey::cuda {
namespace {

using codec::Selection;
using codec::ValueType;
using testing::Ef;

struct GpuResult {
  std::map<uint32_t, uint32_t> pairs;
  std::vector<float> r, u;
  uint32_t count = 0;
};

struct GpuSetup {
  Ef ef = Ef::kResidual;
  ValueType type = ValueType::kFp32;
  size_t offset = 0;          // elements: offset 1 makes the pointers 4-byte aligned only
  size_t cand_capacity = 0;   // 0: RecommendedCandidateCapacity
  size_t out_capacity = 0;    // 0: n
  float momentum = 0.9f;
};

using RunFn = std::function<Status(const EfTensor&, const SparseOutput&, SelectWorkspace*)>;

std::vector<float> Padded(const std::vector<float>& v, size_t offset) {
  std::vector<float> out(offset, 0.0f);
  out.insert(out.end(), v.begin(), v.end());
  return out;
}

GpuResult RunOnGpu(const std::vector<float>& g, const std::vector<float>& r, const std::vector<float>& u,
                   const GpuSetup& s, uint64_t max_samples, const RunFn& run) {
  const size_t n = g.size();
  DeviceBuffer dg = testing::Upload(Padded(g, s.offset));
  DeviceBuffer dr = testing::Upload(Padded(r, s.offset));
  DeviceBuffer du = testing::Upload(Padded(u, s.offset));
  const size_t cap = s.cand_capacity ? s.cand_capacity : RecommendedCandidateCapacity(n, n);
  auto ws = SelectWorkspace::Create(std::max<size_t>(n, 1), cap, max_samples);
  EXPECT_TRUE(ws.ok()) << ws.status().ToString();
  const size_t out_cap = s.out_capacity ? s.out_capacity : std::max<size_t>(n, 1);
  const size_t vb = codec::ValueBytes(s.type);
  auto payload = DeviceBuffer::Allocate(out_cap * (4 + vb));
  EXPECT_TRUE(payload.ok());
  EfTensor t;
  t.grad = dg.as<float>() + s.offset;
  t.residual = s.ef != Ef::kNone ? dr.as<float>() + s.offset : nullptr;
  t.momentum = s.ef == Ef::kMomentum ? du.as<float>() + s.offset : nullptr;
  t.momentum_factor = s.momentum;
  t.n = n;
  const SparseOutput out{payload->data(), out_cap, s.type};
  const Status st = run(t, out, ws->get());
  EXPECT_TRUE(st.ok()) << st.ToString();
  EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  GpuResult res;
  res.count = testing::DownloadCount((*ws)->device_count());
  const auto bytes = testing::Download<uint8_t>(payload->data(), res.count * (4 + vb));
  codec::EncodedMeta meta{codec::CodecId::kTopK, s.type, n, res.count, 0};
  res.pairs = codec::testing::SparsePairs(meta, bytes.data());
  res.r = s.ef != Ef::kNone ? testing::Download<float>(t.residual, n) : r;
  res.u = s.ef == Ef::kMomentum ? testing::Download<float>(t.momentum, n) : u;
  return res;
}

// Runs the GPU step and the CPU reference (FormP + `select` + ApplySelection) and compares them.
void Compare(const std::vector<float>& g, const GpuSetup& s, uint64_t max_samples,
             const std::function<Selection(const std::vector<float>& p)>& select, const RunFn& run,
             uint64_t seed = 1) {
  const auto r = codec::testing::RandomGradient(g.size(), seed + 100);
  const auto u = codec::testing::RandomGradient(g.size(), seed + 200);
  testing::CpuStep cpu;
  cpu.u = u;
  cpu.p = testing::FormP(s.ef, g, s.ef == Ef::kNone ? std::vector<float>(g.size()) : r, &cpu.u, s.momentum);
  const Selection sel = select(cpu.p);
  testing::ApplySelection(sel, s.type, s.ef, &cpu);
  const GpuResult gpu = RunOnGpu(g, r, u, s, max_samples, run);
  EXPECT_EQ(gpu.count, sel.count);
  EXPECT_EQ(gpu.pairs.size(), gpu.count) << "duplicate indices in the GPU frame";
  EXPECT_TRUE(gpu.pairs == cpu.pairs) << "selected (index, value) pairs differ: gpu " << gpu.pairs.size() << " cpu "
                                      << cpu.pairs.size();
  if (s.ef != Ef::kNone) testing::ExpectSameBits(gpu.r, cpu.r, "residual");
  if (s.ef == Ef::kMomentum) testing::ExpectSameBits(gpu.u, cpu.u, "momentum");
}

const std::vector<size_t> kSizes = {1, 1000, (1u << 20) + 3};

TEST(CudaTopKTest, ThresholdSelectMatchesCpu) {
  OSPREY_REQUIRE_GPU();
  for (size_t n : kSizes) {
    for (Ef ef : {Ef::kNone, Ef::kResidual, Ef::kMomentum}) {
      for (ValueType type : {ValueType::kFp32, ValueType::kFp16, ValueType::kBf16}) {
        for (size_t offset : {0, 1}) {
          SCOPED_TRACE(::testing::Message() << "n=" << n << " ef=" << int(ef) << " type=" << int(type)
                                            << " offset=" << offset);
          const auto g = codec::testing::RandomGradient(n, n + offset);
          const float threshold = 2.0e-3f;
          DeviceBuffer d_thr = testing::Upload(std::vector<float>{threshold});
          GpuSetup s{ef, type, offset};
          const uint32_t key = codec::MagnitudeKey(threshold);
          Compare(g, s, 0, [&](const std::vector<float>& p) {
            Selection sel{key, key, UINT32_MAX, 0};
            for (float v : p) sel.count += codec::MagnitudeKey(v) >= key;
            return sel;
          }, [&](const EfTensor& t, const SparseOutput& out, SelectWorkspace* ws) {
            return SelectByThreshold(t, d_thr.as<float>(), out, ws, nullptr);
          });
        }
      }
    }
  }
}

TEST(CudaTopKTest, ThresholdOverflowingCandidatesFallsBackToDense) {
  OSPREY_REQUIRE_GPU();
  const auto g = codec::testing::RandomGradient(100000, 7);
  DeviceBuffer d_thr = testing::Upload(std::vector<float>{1.0e-3f});
  GpuSetup s;
  s.cand_capacity = 64;
  const uint32_t key = codec::MagnitudeKey(1.0e-3f);
  Compare(g, s, 0, [&](const std::vector<float>& p) {
    Selection sel{key, key, UINT32_MAX, 0};
    for (float v : p) sel.count += codec::MagnitudeKey(v) >= key;
    return sel;
  }, [&](const EfTensor& t, const SparseOutput& out, SelectWorkspace* ws) {
    return SelectByThreshold(t, d_thr.as<float>(), out, ws, nullptr);
  });
}

TEST(CudaTopKTest, ThresholdOutputCapacityKeepsTheRestInTheResidual) {
  OSPREY_REQUIRE_GPU();
  const size_t n = 50000;
  const auto g = codec::testing::RandomGradient(n, 8);
  const std::vector<float> r(n, 0.0f), u(n, 0.0f);
  DeviceBuffer d_thr = testing::Upload(std::vector<float>{1.0e-4f});  // most elements pass
  GpuSetup s;
  s.out_capacity = 100;
  const GpuResult gpu = RunOnGpu(g, r, u, s, 0, [&](const EfTensor& t, const SparseOutput& out, SelectWorkspace* ws) {
    return SelectByThreshold(t, d_thr.as<float>(), out, ws, nullptr);
  });
  ASSERT_EQ(gpu.count, 100u);
  ASSERT_EQ(gpu.pairs.size(), 100u);
  for (size_t i = 0; i < n; ++i) {
    const auto it = gpu.pairs.find(static_cast<uint32_t>(i));
    if (it != gpu.pairs.end()) {
      EXPECT_EQ(it->second, codec::FloatBits(g[i]));
      EXPECT_EQ(gpu.r[i], 0.0f);
    } else {
      EXPECT_EQ(gpu.r[i], g[i]);  // not sent: error feedback keeps all of it
    }
  }
}

// Top-k through TopK() for one method: the CPU selection comes from the matching reference.
void CompareTopK(codec::TopKMethod method, const std::vector<float>& g, double density, const GpuSetup& s,
                 const codec::SamplePlan* plan_override = nullptr) {
  const size_t n = g.size();
  TopKParams params = MakeTopKParams(method, n, density, 0.05, 0.005, /*seed=*/1234);
  if (plan_override) params.plan = *plan_override;
  Compare(g, s, params.plan.samples, [&](const std::vector<float>& p) {
    std::vector<uint32_t> keys(p.size());
    for (size_t i = 0; i < p.size(); ++i) keys[i] = codec::MagnitudeKey(p[i]);
    codec::SampleScratch scratch;
    switch (method) {
      case codec::TopKMethod::kExact: return codec::SelectExact(p.data(), n, params.targets.k, &keys);
      case codec::TopKMethod::kHistogram: return codec::RadixSelect(keys.data(), nullptr, n, 0, params.targets);
      case codec::TopKMethod::kSample: break;
    }
    return codec::SelectSampled(p.data(), n, params.targets, params.plan, params.seed, &scratch);
  }, [&](const EfTensor& t, const SparseOutput& out, SelectWorkspace* ws) {
    return TopK(t, params, out, ws, nullptr);
  });
}

TEST(CudaTopKTest, EveryMethodMatchesItsCpuReference) {
  OSPREY_REQUIRE_GPU();
  for (auto method : {codec::TopKMethod::kExact, codec::TopKMethod::kHistogram, codec::TopKMethod::kSample}) {
    for (size_t n : kSizes) {
      for (double density : {0.01, 0.001, 1.0}) {
        for (Ef ef : {Ef::kNone, Ef::kResidual, Ef::kMomentum}) {
          SCOPED_TRACE(::testing::Message() << "method=" << int(method) << " n=" << n << " density=" << density
                                            << " ef=" << int(ef));
          GpuSetup s;
          s.ef = ef;
          s.offset = n == 1000 ? 1 : 0;  // misaligned (scalar path) and aligned with a ragged tail
          s.type = density == 0.01 ? ValueType::kFp16 : ValueType::kFp32;
          CompareTopK(method, codec::testing::RandomGradient(n, n + int(ef)), density, s);
        }
      }
    }
  }
}

TEST(CudaTopKTest, TiesAreBrokenByLowestIndexOnTheDevice) {
  OSPREY_REQUIRE_GPU();
  for (auto method : {codec::TopKMethod::kExact, codec::TopKMethod::kHistogram, codec::TopKMethod::kSample}) {
    SCOPED_TRACE(int(method));
    CompareTopK(method, codec::testing::TiedGradient(300001, 3), 0.01, GpuSetup{Ef::kNone});
  }
}

TEST(CudaTopKTest, CandidateOverflowFallsBackToDensePasses) {
  OSPREY_REQUIRE_GPU();
  for (auto method : {codec::TopKMethod::kExact, codec::TopKMethod::kHistogram, codec::TopKMethod::kSample}) {
    SCOPED_TRACE(int(method));
    GpuSetup s;
    s.cand_capacity = 100;  // far below k = 2000
    CompareTopK(method, codec::testing::RandomGradient(200000, 4), 0.01, s);
    CompareTopK(method, codec::testing::TiedGradient(200000, 5), 0.01, s);
  }
}

TEST(CudaTopKTest, SampledRecoversFromATooHighFirstThreshold) {
  OSPREY_REQUIRE_GPU();
  const codec::SamplePlan plan{100, 1};  // the first pass finds ~1% of k
  for (auto method : {codec::TopKMethod::kExact, codec::TopKMethod::kSample}) {
    CompareTopK(method, codec::testing::RandomGradient(400000, 6), 0.01, GpuSetup{}, &plan);
  }
}

// Several steps of EF (+ momentum) top-k: the GPU state stays bit-identical to the CPU codec stack.
TEST(CudaTopKTest, MultiStepMatchesTheCpuCodecStack) {
  OSPREY_REQUIRE_GPU();
  const size_t n = 300007;
  for (const char* method : {"exact", "sample", "histogram"}) {
    for (float momentum : {0.0f, 0.9f}) {
      SCOPED_TRACE(::testing::Message() << method << " momentum " << momentum);
      codec::CodecConfig c;
      c.type = "topk";
      c.topk_method = method;
      c.density = 0.01;
      c.error_feedback = true;
      c.dgc_momentum = momentum;
      c.schedule.type = "warmup";  // k changes every step: the GPU must follow the same schedule
      c.schedule.steps = 3;
      auto cpu = codec::MakeCodec(c);
      ASSERT_TRUE(cpu.ok());
      codec::CodecState state;
      state.tensor_seed = 77;
      std::vector<float> zeros(n, 0.0f);
      DeviceBuffer dg = testing::Upload(zeros), dr = testing::Upload(zeros), du = testing::Upload(zeros);
      const auto params0 = MakeTopKParams(codec::TopKMethod::kExact, n, c.density, 0.05, 0.005, 0);
      auto ws = SelectWorkspace::Create(n, RecommendedCandidateCapacity(n, params0.targets.k_hi * 2), n);
      auto payload = DeviceBuffer::Allocate(n * 8);
      ASSERT_TRUE(ws.ok() && payload.ok());
      const codec::TopKMethod m = std::string(method) == "exact"    ? codec::TopKMethod::kExact
                                  : std::string(method) == "sample" ? codec::TopKMethod::kSample
                                                                    : codec::TopKMethod::kHistogram;
      for (uint64_t step = 0; step < 4; ++step) {
        const auto g = codec::testing::RandomGradient(n, 1000 + step);
        codec::Encoded e;
        ASSERT_TRUE((*cpu)->Encode(g.data(), n, &state, &e).ok());
        ASSERT_EQ(cudaMemcpy(dg.data(), g.data(), 4 * n, cudaMemcpyHostToDevice), cudaSuccess);
        EfTensor t{dg.as<float>(), dr.as<float>(), momentum > 0 ? du.as<float>() : nullptr, momentum, n};
        const auto params = TopKParamsFor(c, n, step, state.tensor_seed);
        ASSERT_EQ(params.method, m);
        ASSERT_TRUE(TopK(t, params, SparseOutput{payload->data(), n, ValueType::kFp32}, ws->get(), nullptr).ok());
        ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
        const uint32_t count = testing::DownloadCount((*ws)->device_count());
        ASSERT_EQ(count, e.meta.count) << "step " << step;
        const auto bytes = testing::Download<uint8_t>(payload->data(), count * 8);
        EXPECT_TRUE(codec::testing::SparsePairs(e.meta, bytes.data()) ==
                    codec::testing::SparsePairs(e.meta, e.payload.data())) << "step " << step;
        testing::ExpectSameBits(testing::Download<float>(dr.data(), n), state.residual, "residual");
        if (momentum > 0) testing::ExpectSameBits(testing::Download<float>(du.data(), n), state.momentum, "momentum");
      }
    }
  }
}

TEST(CudaTopKTest, CountReaderDeliversTheCountAsynchronously) {
  OSPREY_REQUIRE_GPU();
  const size_t n = 100000;
  const auto g = codec::testing::RandomGradient(n, 9);
  DeviceBuffer dg = testing::Upload(g);
  auto ws = SelectWorkspace::Create(n, RecommendedCandidateCapacity(n, 1000), n);
  auto payload = DeviceBuffer::Allocate(n * 8);
  auto reader = CountReader::Create();
  ASSERT_TRUE(ws.ok() && payload.ok() && reader.ok());
  EXPECT_EQ((*reader)->Wait().status().code(), StatusCode::kFailedPrecondition);
  cudaStream_t stream;
  ASSERT_EQ(cudaStreamCreate(&stream), cudaSuccess);
  const auto params = MakeTopKParams(codec::TopKMethod::kExact, n, 0.01, 0.05, 0.005, 3);
  EfTensor t{dg.as<float>(), nullptr, nullptr, 0.0f, n};
  ASSERT_TRUE(TopK(t, params, SparseOutput{payload->data(), n, ValueType::kFp32}, ws->get(), stream).ok());
  ASSERT_TRUE((*reader)->Start((*ws)->device_count(), stream).ok());
  auto count = (*reader)->Wait();
  ASSERT_TRUE(count.ok()) << count.status().ToString();
  EXPECT_EQ(*count, 1000u);
  EXPECT_EQ(cudaStreamDestroy(stream), cudaSuccess);
}

TEST(CudaTopKTest, RejectsBadArguments) {
  OSPREY_REQUIRE_GPU();
  auto ws = SelectWorkspace::Create(1000, 100, 1000);
  auto payload = DeviceBuffer::Allocate(8000);
  DeviceBuffer dg = testing::Upload(std::vector<float>(2000, 1.0f));
  ASSERT_TRUE(ws.ok() && payload.ok());
  const auto params = MakeTopKParams(codec::TopKMethod::kExact, 1000, 0.5, 0.05, 0.005, 3);
  EfTensor too_big{dg.as<float>(), nullptr, nullptr, 0.0f, 2000};
  EXPECT_EQ(TopK(too_big, params, SparseOutput{payload->data(), 1000}, ws->get(), nullptr).code(),
            StatusCode::kInvalidArgument);
  EfTensor t{dg.as<float>(), nullptr, nullptr, 0.0f, 1000};
  EXPECT_EQ(TopK(t, params, SparseOutput{payload->data(), 10}, ws->get(), nullptr).code(),
            StatusCode::kInvalidArgument);  // payload holds fewer than k pairs
  EfTensor momentum_only{dg.as<float>(), nullptr, dg.as<float>(), 0.9f, 1000};
  EXPECT_EQ(TopK(momentum_only, params, SparseOutput{payload->data(), 1000}, ws->get(), nullptr).code(),
            StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace osprey::cuda
