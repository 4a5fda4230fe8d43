// GpuDlrm's bf16 mode (MlpPrecision::kBf16) on fresh random problems: against the bf16 CPU
// reference (bf16_reference.h: the CPU model with every product operand rounded to bf16), tightly,
// and against the plain fp32 CPU model, loosely.
//
// Tolerances against the reference. Both sides multiply the same bf16 operands exactly (a product
// of two 8-bit significands fits fp32) and differ in two ways only: (1) the GPU sums in fp32 in
// cuBLAS's order, the reference in double: ~1e-7 relative; (2) an intermediate value (a layer's
// output, the interaction's output, a pre-activation gradient) that the two compute a few fp32
// ulps apart can round to neighbouring bf16 values, one bf16 ulp (2^-8 relative) apart. That
// happens to about one operand in 10^4 (fp32 difference / bf16 spacing), and each such flip moves
// a sum over K terms by ~2^-8 / sqrt(K) of its size: ~1e-4 relative per tensor. We require
// ||gpu - ref||_2 <= 1e-3 ||ref||_2 per tensor (each layer's W and b, the rows, probs) and the
// loss within 1e-3 relative. On an H200 the largest error over every tensor of these tests was
// 1.7e-4 (row_grad, default config, batch 256; most tensors 1e-7 to 1e-5). Getting the rounding
// wrong costs far more: the same reference with truncating casts is 1e-2 to 1e-1 away from the
// rounding one (default and Kaggle configs), and a product left in fp32 ~3e-3 (the distance to
// the fp32 model).
// ReLU kinks: MakeProblem redraws samples whose bf16-pass pre-activations come within 2e-3 rms of
// zero (ProblemOptions::bf16_margins): ~10x the largest shift one flip can make.
//
// Against the fp32 CPU model, bf16 operands (rounding error up to 2^-9 each) move the results:
// measured on the default config, loss 1e-3, probs 2e-3, gradients 2e-3 to 4.2e-3 relative
// (normwise). We require loss within 5e-3, probs within 1e-2 and every gradient within 2e-2
// normwise: loose enough for any sane bf16 arithmetic, tight enough that a cast or product off
// by more than rounding (wrong tensor, wrong stride, truncation compounding through the layers)
// fails even where the reference shares the mistake. Kinks here are those of the exact model,
// kept 2e-2 rms away.
#include <gtest/gtest.h>

#include "tests/gpu_dlrm/gpu_dlrm_test_util.h"

namespace osprey::cuda {
namespace {

using testing::KaggleConfig;
using testing::MakeDlrmConfig;

using testing::Problem;
using testing::ProblemOptions;
using testing::Tolerance;

constexpr Tolerance kBf16RefTolerance{/*normwise=*/true, /*rtol=*/1e-3, /*atol=*/0.0};
constexpr double kBf16KinkMargin = 2e-3;
constexpr Tolerance kBf16Fp32Tolerance{/*normwise=*/true, /*rtol=*/2e-2, /*atol=*/0.0};
constexpr double kFp32ModelKinkMargin = 2e-2;



ProblemOptions Bf16Options(uint64_t seed, uint64_t id_range = 1000) {
  ProblemOptions o = testing::MakeOptions(seed, kBf16KinkMargin, id_range);
  o.bf16_margins = true;
  o.max_rounds = 400;
  return o;
}

void CompareWithReference(GpuDlrm* gpu, const models::DlrmConfig& config, int batch, const ProblemOptions& options) {
  SCOPED_TRACE(::testing::Message() << "batch " << batch << " seed " << options.seed << " num_sparse "
                                    << config.num_sparse << " d " << config.embedding_dim);
  ASSERT_NE(gpu, nullptr);
  const Problem p = testing::MakeProblemOrFail(config, batch, options);
  ASSERT_EQ(p.batch.size, batch);
  testing::Stream stream;
  const testing::Outputs out = testing::RunGpu(gpu, p, stream.get());
  testing::ExpectMatchesCpu(p, out, testing::RunBf16Reference(p), kBf16RefTolerance);
}

TEST(GpuDlrmBf16Test, MatchesBf16ReferenceOnDefaultConfig) {
  OSPREY_DLRM_REQUIRE_GPU();
  const models::DlrmConfig config;
  auto gpu = testing::MakeGpuOrFail(config, 2048, MlpPrecision::kBf16);
  ASSERT_NE(gpu, nullptr);
  for (int batch : {1, 7, 256, 2048}) CompareWithReference(gpu.get(), config, batch, Bf16Options(200 + batch));
}

TEST(GpuDlrmBf16Test, MatchesBf16ReferenceOnOddShapes) {
  OSPREY_DLRM_REQUIRE_GPU();
  struct Case {
    models::DlrmConfig config;
    int batch;
  };
  const Case cases[] = {
      {MakeDlrmConfig(5, 3, 5, {7, 5}, {9, 4, 1}), 33},    // odd widths: unaligned bf16 rows and weights
      {MakeDlrmConfig(13, 26, 8, {8}, {1}), 100},          // one-layer MLPs: no bf16 activation copies at all
      {MakeDlrmConfig(2, 40, 32, {33, 32}, {17, 1}), 50},  // 820 pairs: top input 852, padded to 856 in bf16
      {MakeDlrmConfig(6, 0, 4, {5, 4}, {3, 1}), 64},       // no sparse features
      {MakeDlrmConfig(0, 5, 4, {6, 4}, {8, 1}), 64},       // no dense features: no dense cast, bias-only layer
  };
  for (const Case& c : cases) {
    auto gpu = testing::MakeGpuOrFail(c.config, c.batch, MlpPrecision::kBf16);
    CompareWithReference(gpu.get(), c.config, c.batch, Bf16Options(9));
  }
}

TEST(GpuDlrmBf16Test, MatchesBf16ReferenceOnCriteoKaggleShape) {
  OSPREY_DLRM_REQUIRE_GPU();
  // 1616 ReLU units per sample: a small batch, so that redrawing near-kink samples converges.
  auto gpu = testing::MakeGpuOrFail(KaggleConfig(), 256, MlpPrecision::kBf16);
  CompareWithReference(gpu.get(), KaggleConfig(), 64, Bf16Options(13));
}

TEST(GpuDlrmBf16Test, DuplicateRowsSumTheirGradients) {
  OSPREY_DLRM_REQUIRE_GPU();
  const models::DlrmConfig config;
  auto gpu = testing::MakeGpuOrFail(config, 1024, MlpPrecision::kBf16);
  CompareWithReference(gpu.get(), config, 1024, Bf16Options(17, /*id_range=*/2));
}

// A cast or product that is off by more than bf16 rounding cannot hide behind the reference
// sharing the mistake: the fp32 CPU model knows nothing of bf16.
TEST(GpuDlrmBf16Test, AgreesLooselyWithFp32Model) {
  OSPREY_DLRM_REQUIRE_GPU();
  const models::DlrmConfig config;
  ProblemOptions options = testing::MakeOptions(19, kFp32ModelKinkMargin);
  options.max_rounds = 400;
  const Problem p = testing::MakeProblemOrFail(config, 512, options);
  auto gpu = testing::MakeGpuOrFail(config, 512, MlpPrecision::kBf16);
  ASSERT_NE(gpu, nullptr);
  testing::Stream stream;
  const testing::Outputs out = testing::RunGpu(gpu.get(), p, stream.get());
  const testing::Outputs cpu = testing::RunCpu(p);
  EXPECT_NEAR(out.loss, cpu.loss, 5e-3 * cpu.loss);
  testing::ExpectNormClose(out.probs.data(), cpu.probs.data(), cpu.probs.size(), 1e-2, "probs");
  testing::ExpectMatchesCpu(p, out, cpu, kBf16Fp32Tolerance);
}

TEST(GpuDlrmBf16Test, DenseResultsAreReproducible) {
  OSPREY_DLRM_REQUIRE_GPU();
  testing::ExpectDenseResultsReproducible(MlpPrecision::kBf16, 23);
}

}  // namespace
}  // namespace osprey::cuda
