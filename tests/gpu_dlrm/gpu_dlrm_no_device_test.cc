// GpuDlrm's factory where no CUDA device is visible (CI; ctest also hides the devices of a GPU
// machine from this test through CUDA_VISIBLE_DEVICES): a clear FailedPrecondition, and config
// errors reported before any device is touched.
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

}  // namespace
}  // namespace osprey::cuda
