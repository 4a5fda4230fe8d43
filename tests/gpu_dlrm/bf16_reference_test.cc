// The CPU reference of GpuDlrm's bf16 mode (bf16_reference.h), on the CPU: its rounding, its
// structure against models::Dlrm with rounding off, and that rounding on changes results by
// about what bf16 should. The GPU tests lean on this reference, so it is checked on its own.
#include "tests/gpu_dlrm/bf16_reference.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "tests/gpu_dlrm/gpu_dlrm_test_util.h"

namespace osprey::cuda::testing {
namespace {

TEST(Bf16ReferenceTest, RoundsToNearestEven) {
  const float ulp = std::ldexp(1.0f, -7);  // bf16 spacing in [1, 2)
  EXPECT_EQ(RoundToBf16(1.0f), 1.0f);
  EXPECT_EQ(RoundToBf16(1.0f + ulp), 1.0f + ulp);                                  // representable
  EXPECT_EQ(RoundToBf16(1.0f + 0.5f * ulp), 1.0f);                                 // tie, even below
  EXPECT_EQ(RoundToBf16(1.0f + 1.5f * ulp), 1.0f + 2 * ulp);                       // tie, even above
  EXPECT_EQ(RoundToBf16(1.0f + 0.5f * ulp + std::ldexp(1.0f, -20)), 1.0f + ulp);   // past the tie
  EXPECT_EQ(RoundToBf16(1.0f + 0.5f * ulp - std::ldexp(1.0f, -20)), 1.0f);         // short of it
  EXPECT_EQ(RoundToBf16(-(1.0f + 1.5f * ulp)), -(1.0f + 2 * ulp));                 // symmetric
  EXPECT_EQ(RoundToBf16(3.14159265f), 3.140625f);
  EXPECT_EQ(RoundToBf16(0.0f), 0.0f);
  EXPECT_EQ(RoundToBf16(std::numeric_limits<float>::infinity()), std::numeric_limits<float>::infinity());
  EXPECT_EQ(RoundToBf16(std::numeric_limits<float>::max()), std::numeric_limits<float>::infinity());
  EXPECT_TRUE(std::isnan(RoundToBf16(std::numeric_limits<float>::quiet_NaN())));
  // Subnormals round on the same bit pattern: 2^-130 + 2^-140 keeps 2^-130 (8 bits below 2^-126).
  EXPECT_EQ(RoundToBf16(std::ldexp(1.0f, -130) + std::ldexp(1.0f, -140)), std::ldexp(1.0f, -130));
}

ProblemOptions Options(uint64_t seed, double kink_margin, bool bf16_margins) {
  ProblemOptions o;
  o.seed = seed;
  o.kink_margin = kink_margin;
  o.bf16_margins = bf16_margins;
  o.max_rounds = 400;
  return o;
}

// Without rounding the reference is models::Dlrm in double accumulation: the same tight bound as
// the fp32 GPU tests (gpu_dlrm_test.cc) holds, which checks its layout, masks and interaction.
TEST(Bf16ReferenceTest, WithoutRoundingMatchesCpuModel) {
  const models::DlrmConfig odd = [] {
    models::DlrmConfig c;
    c.num_dense = 5;
    c.num_sparse = 3;
    c.embedding_dim = 5;
    c.bottom_mlp = {7, 5};
    c.top_mlp = {9, 4, 1};
    return c;
  }();
  for (const models::DlrmConfig& config : {models::DlrmConfig(), odd}) {
    const Problem p = MakeProblemOrFail(config, 64, Options(3, 1e-4, false));
    ExpectMatchesCpu(p, RunBf16Reference(p, /*bf16_operands=*/false), RunCpu(p), kFp32Tolerance);
  }
}

// With rounding, results move by about bf16's precision: clearly (a reference that forgot to
// round would agree to ~1e-6), but within a few 1e-3 (one that rounded wrongly would not).
TEST(Bf16ReferenceTest, RoundingMovesResultsByBf16Precision) {
  const models::DlrmConfig config;
  const Problem p = MakeProblemOrFail(config, 256, Options(4, 2e-2, false));
  const Outputs cpu = RunCpu(p);
  const ReferenceOutputs ref = Bf16Reference(p);
  double diff = 0, norm = 0;
  for (size_t i = 0; i < cpu.dense_grad.size(); ++i) {
    diff += std::pow(static_cast<double>(ref.dense_grad[i]) - cpu.dense_grad[i], 2);
    norm += std::pow(static_cast<double>(cpu.dense_grad[i]), 2);
  }
  const double rel = std::sqrt(diff / norm);
  EXPECT_GT(rel, 1e-4) << "dense_grad did not move: is anything rounded?";
  EXPECT_LT(rel, 2e-2) << "dense_grad moved further than bf16 rounding explains";
  EXPECT_NEAR(ref.loss, cpu.loss, 1e-2 * cpu.loss);
  EXPECT_NE(ref.loss, cpu.loss);
}

TEST(Bf16ReferenceTest, Bf16MarginsKeepSamplesOffTheKinks) {
  const Problem p = MakeProblemOrFail(models::DlrmConfig(), 128, Options(5, 2e-3, true));
  for (double m : Bf16KinkMargins(p)) EXPECT_GE(m, 2e-3);
}

}  // namespace
}  // namespace osprey::cuda::testing
