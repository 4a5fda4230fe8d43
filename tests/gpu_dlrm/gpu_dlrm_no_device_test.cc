// GpuDlrm's factory where no CUDA device is visible (CI; ctest also hides the devices of a GPU
// machine from this test through CUDA_VISIBLE_DEVICES): a clear FailedPrecondition, and config
// and option errors reported before any device is touched; MlpPrecision's names.
#include <gtest/gtest.h>

#include <string>

#include "worker/cuda/codec_kernels.h"
#include "worker/cuda/dlrm/gpu_dlrm.h"

namespace osprey::cuda {
namespace {

TEST(GpuDlrmNoDeviceTest, FactoryFailsWithFailedPrecondition) {
  if (DeviceCount() > 0) GTEST_SKIP() << "a CUDA device is visible; run through ctest to hide it";
  auto made = GpuDlrm::Make(models::DlrmConfig(), 0, 256, GpuDlrmOptions());
  ASSERT_FALSE(made.ok());
  EXPECT_EQ(made.status().code(), StatusCode::kFailedPrecondition) << made.status().ToString();
  EXPECT_NE(made.status().message().find("no CUDA device"), std::string::npos) << made.status().ToString();
}

TEST(GpuDlrmNoDeviceTest, ConfigErrorsComeFirst) {
  models::DlrmConfig config;
  config.bottom_mlp = {64, 8};  // last width must equal embedding_dim 16
  auto made = GpuDlrm::Make(config, 0, 256, GpuDlrmOptions());
  ASSERT_FALSE(made.ok());
  EXPECT_EQ(made.status().code(), StatusCode::kInvalidArgument) << made.status().ToString();
  EXPECT_NE(made.status().message().find("embedding_dim"), std::string::npos) << made.status().ToString();

  auto no_batch = GpuDlrm::Make(models::DlrmConfig(), 0, 0, GpuDlrmOptions());
  ASSERT_FALSE(no_batch.ok());
  EXPECT_EQ(no_batch.status().code(), StatusCode::kInvalidArgument) << no_batch.status().ToString();
  EXPECT_NE(no_batch.status().message().find("max_batch"), std::string::npos) << no_batch.status().ToString();
}

TEST(GpuDlrmNoDeviceTest, MlpPrecisionNamesRoundTrip) {
  for (MlpPrecision p : {MlpPrecision::kFp32, MlpPrecision::kTf32, MlpPrecision::kBf16}) {
    auto parsed = ParseMlpPrecision(MlpPrecisionName(p));
    ASSERT_TRUE(parsed.ok()) << parsed.status().ToString();
    EXPECT_EQ(*parsed, p);
  }
  EXPECT_STREQ(MlpPrecisionName(MlpPrecision::kBf16), "bf16");
  EXPECT_EQ(GpuDlrmOptions().precision, MlpPrecision::kTf32);
  for (const char* bad : {"fp16", "BF16", ""}) {
    auto parsed = ParseMlpPrecision(bad);
    ASSERT_FALSE(parsed.ok()) << bad;
    EXPECT_EQ(parsed.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(parsed.status().message().find(std::string("\"") + bad + "\""), std::string::npos)
        << parsed.status().ToString();
    EXPECT_NE(parsed.status().message().find("fp32, tf32, bf16"), std::string::npos) << parsed.status().ToString();
  }
}

// Checked with the config, before any device is looked for.
TEST(GpuDlrmNoDeviceTest, UnknownPrecisionIsInvalidArgument) {
  GpuDlrmOptions options;
  options.precision = static_cast<MlpPrecision>(7);
  auto made = GpuDlrm::Make(models::DlrmConfig(), 0, 256, options);
  ASSERT_FALSE(made.ok());
  EXPECT_EQ(made.status().code(), StatusCode::kInvalidArgument) << made.status().ToString();
  EXPECT_NE(made.status().message().find("MlpPrecision"), std::string::npos) << made.status().ToString();
}

}  // namespace
}  // namespace osprey::cuda
