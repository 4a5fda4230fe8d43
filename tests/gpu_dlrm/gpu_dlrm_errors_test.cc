// GpuDlrm's error paths and edge cases on a machine with a device: bad device index, batch limits,
// null pointers, bad host inputs, the empty batch, out-of-range row indices, the caller's device.
#include <gtest/gtest.h>

#include <string>

#include "tests/gpu_dlrm/gpu_dlrm_test_util.h"

namespace osprey::cuda {
namespace {

using testing::Problem;

std::unique_ptr<GpuDlrm> MakeOrFail(int max_batch) {
  auto made = GpuDlrm::Make(models::DlrmConfig(), 0, max_batch, GpuDlrmOptions());
  EXPECT_TRUE(made.ok()) << made.status().ToString();
  return made.ok() ? std::move(made).value() : nullptr;
}

Problem SmallProblem(int batch) {
  testing::ProblemOptions options;
  options.kink_margin = 0;
  return testing::MakeProblemOrFail(models::DlrmConfig(), batch, options);
}

TEST(GpuDlrmErrorsTest, DeviceIndexOutOfRangeNamesTheDeviceCount) {
  OSPREY_DLRM_REQUIRE_GPU();
  const int count = DeviceCount();
  for (int device : {count, count + 7, -1}) {
    auto made = GpuDlrm::Make(models::DlrmConfig(), device, 16, GpuDlrmOptions());
    ASSERT_FALSE(made.ok()) << "device " << device;
    EXPECT_EQ(made.status().code(), StatusCode::kInvalidArgument) << made.status().ToString();
    EXPECT_NE(made.status().message().find(std::to_string(count) + " device(s) visible"), std::string::npos)
        << made.status().ToString();
  }
}

TEST(GpuDlrmErrorsTest, MaxBatchMustBePositive) {
  OSPREY_DLRM_REQUIRE_GPU();
  for (int max_batch : {0, -5}) {
    auto made = GpuDlrm::Make(models::DlrmConfig(), 0, max_batch, GpuDlrmOptions());
    ASSERT_FALSE(made.ok());
    EXPECT_EQ(made.status().code(), StatusCode::kInvalidArgument) << made.status().ToString();
  }
}

TEST(GpuDlrmErrorsTest, BatchAboveMaxBatchIsInvalidArgument) {
  OSPREY_DLRM_REQUIRE_GPU();
  auto gpu = MakeOrFail(8);
  ASSERT_NE(gpu, nullptr);
  // The batch is checked before any pointer is used, so dummies do.
  float dummy = 0;
  int32_t index = 0;
  for (int batch : {9, 1000, -1}) {
    const Status st = gpu->ForwardBackward(&dummy, &dummy, 1, &index, &dummy, &dummy, batch, &dummy, &dummy, &dummy,
                                           &dummy, nullptr);
    EXPECT_EQ(st.code(), StatusCode::kInvalidArgument) << st.ToString();
    const Status pst = gpu->Predict(&dummy, &dummy, 1, &index, &dummy, batch, &dummy, nullptr);
    EXPECT_EQ(pst.code(), StatusCode::kInvalidArgument) << pst.ToString();
  }
  const Problem p = SmallProblem(9);
  std::vector<float> dense_grad(p.params.size()), row_grad(p.rows.size()), probs(9);
  float loss = 0;
  const Status hst = gpu->ForwardBackwardHost(p.params.data(), p.rows.data(), p.num_rows(), p.row_index.data(), p.batch,
                                              dense_grad.data(), row_grad.data(), probs.data(), &loss);
  EXPECT_EQ(hst.code(), StatusCode::kInvalidArgument) << hst.ToString();
  EXPECT_NE(hst.message().find("max_batch 8"), std::string::npos) << hst.ToString();
}

TEST(GpuDlrmErrorsTest, NullRequiredPointerIsInvalidArgument) {
  OSPREY_DLRM_REQUIRE_GPU();
  auto gpu = MakeOrFail(8);
  ASSERT_NE(gpu, nullptr);
  auto buf = DeviceBuffer::Allocate(sizeof(float) * 4096);
  ASSERT_TRUE(buf.ok());
  float* d = buf->as<float>();
  const int32_t* index = buf->as<int32_t>();
  const Status st = gpu->ForwardBackward(d, d, 1, index, d, /*d_labels=*/nullptr, 4, d, d, d, d, nullptr);
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument) << st.ToString();
  EXPECT_NE(st.message().find("d_labels"), std::string::npos) << st.ToString();
}

TEST(GpuDlrmErrorsTest, HostInputsAreChecked) {
  OSPREY_DLRM_REQUIRE_GPU();
  auto gpu = MakeOrFail(64);
  ASSERT_NE(gpu, nullptr);
  Problem p = SmallProblem(8);
  std::vector<float> dense_grad(p.params.size()), row_grad(p.rows.size()), probs(8);
  float loss = 0;
  auto run = [&](const Problem& q) {
    return gpu->ForwardBackwardHost(q.params.data(), q.rows.data(), q.num_rows(), q.row_index.data(), q.batch,
                                    dense_grad.data(), row_grad.data(), probs.data(), &loss);
  };
  const Status good = run(p);
  ASSERT_TRUE(good.ok()) << good.ToString();
  Problem bad_index = p;
  bad_index.row_index[5] = static_cast<int32_t>(p.num_rows());
  EXPECT_EQ(run(bad_index).code(), StatusCode::kInvalidArgument);
  Problem bad_shape = p;
  bad_shape.batch.dense.pop_back();
  EXPECT_EQ(run(bad_shape).code(), StatusCode::kInvalidArgument);
  Problem bad_features = p;
  bad_features.batch.num_dense = 12;
  bad_features.batch.dense.resize(8 * 12);
  const Status st = run(bad_features);
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("13 dense"), std::string::npos) << st.ToString();
}

TEST(GpuDlrmErrorsTest, EmptyBatchZeroesEveryOutput) {
  OSPREY_DLRM_REQUIRE_GPU();
  auto gpu = MakeOrFail(8);
  ASSERT_NE(gpu, nullptr);
  const size_t num_params = gpu->num_dense_params(), row_floats = 10 * 16;
  DeviceBuffer dense_grad = testing::PoisonedFloats(num_params);
  DeviceBuffer row_grad = testing::PoisonedFloats(row_floats);
  DeviceBuffer loss = testing::PoisonedFloats(1);
  DeviceBuffer rows = testing::PoisonedFloats(row_floats);
  ASSERT_TRUE(gpu->ForwardBackward(dense_grad.as<float>(), rows.as<float>(), 10, nullptr, nullptr, nullptr, 0,
                                   dense_grad.as<float>(), row_grad.as<float>(), nullptr, loss.as<float>(), nullptr)
                  .ok());
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  EXPECT_EQ(testing::Download<float>(dense_grad.data(), num_params), std::vector<float>(num_params, 0.0f));
  EXPECT_EQ(testing::Download<float>(row_grad.data(), row_floats), std::vector<float>(row_floats, 0.0f));
  EXPECT_EQ(testing::Download<float>(loss.data(), 1)[0], 0.0f);
}

// Outside the documented precondition: the call must neither fault nor touch memory it does not
// own. The bad entry reads as a zero row and its gradient is dropped.
TEST(GpuDlrmErrorsTest, OutOfRangeRowIndexDoesNotFault) {
  OSPREY_DLRM_REQUIRE_GPU();
  auto gpu = MakeOrFail(64);
  ASSERT_NE(gpu, nullptr);
  Problem p = SmallProblem(64);
  p.row_index[3] = 1 << 30;
  p.row_index[70] = -2;
  cudaStream_t stream = nullptr;
  ASSERT_EQ(cudaStreamCreate(&stream), cudaSuccess);
  const testing::Outputs out = testing::RunGpu(gpu.get(), p, stream);
  EXPECT_EQ(cudaStreamDestroy(stream), cudaSuccess);
  for (float v : out.row_grad) ASSERT_TRUE(std::isfinite(v));
  for (float v : out.dense_grad) ASSERT_TRUE(std::isfinite(v));
  EXPECT_TRUE(std::isfinite(out.loss));
}

TEST(GpuDlrmErrorsTest, LeavesTheCallersDeviceCurrent) {
  OSPREY_DLRM_REQUIRE_GPU();
  const int last = DeviceCount() - 1;
  ASSERT_EQ(cudaSetDevice(0), cudaSuccess);
  auto made = GpuDlrm::Make(models::DlrmConfig(), last, 32, GpuDlrmOptions());
  ASSERT_TRUE(made.ok()) << made.status().ToString();
  EXPECT_EQ((*made)->device(), last);
  const Problem p = SmallProblem(32);
  std::vector<float> dense_grad(p.params.size()), row_grad(p.rows.size()), probs(32);
  float loss = 0;
  ASSERT_TRUE((*made)->ForwardBackwardHost(p.params.data(), p.rows.data(), p.num_rows(), p.row_index.data(), p.batch,
                                           dense_grad.data(), row_grad.data(), probs.data(), &loss)
                  .ok());
  int current = -1;
  ASSERT_EQ(cudaGetDevice(&current), cudaSuccess);
  EXPECT_EQ(current, 0);
  EXPECT_GT(loss, 0.0f);
}

}  // namespace
}  // namespace osprey::cuda
