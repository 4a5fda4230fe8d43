// osprey::cuda_sparse where no CUDA device is visible (CI; ctest also hides the devices of a GPU
// machine from this test through CUDA_VISIBLE_DEVICES): every call returns FailedPrecondition
// "no CUDA device" instead of crashing, argument errors still come first, and the workspace size
// is 0 (unknown).
#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>

#include "worker/cuda/codec_kernels.h"
#include "worker/cuda/sparse/sparse_kernels.h"

namespace osprey::cuda {
namespace {

#define OSPREY_SPARSE_REQUIRE_NO_DEVICE()                                                            \
  do {                                                                                               \
    if (DeviceCount() > 0) GTEST_SKIP() << "a CUDA device is visible; run through ctest to hide it"; \
  } while (0)

void ExpectNoDevice(const Status& st) {
  EXPECT_EQ(st.code(), StatusCode::kFailedPrecondition) << st.ToString();
  EXPECT_NE(st.message().find("no CUDA device"), std::string::npos) << st.ToString();
}

// Host memory stands in for device pointers: nothing may dereference them without a device.
struct FakeDeviceMemory {
  std::vector<uint64_t> ids = std::vector<uint64_t>(4 * 26, 1), unique = std::vector<uint64_t>(4 * 26);
  std::vector<int32_t> rows = std::vector<int32_t>(4 * 26), count = std::vector<int32_t>(1, -1);
  std::vector<int32_t> slots = std::vector<int32_t>{0, 1, 2, 3};
  std::vector<float> table = std::vector<float>(64), out = std::vector<float>(64);
  std::vector<char> workspace = std::vector<char>(1 << 20);
};

TEST(GpuSparseNoDeviceTest, WorkspaceSizeIsUnknown) {
  OSPREY_SPARSE_REQUIRE_NO_DEVICE();
  EXPECT_EQ(DedupeWorkspaceBytes(16384 * 26), 0u);
}

TEST(GpuSparseNoDeviceTest, DedupeFailsWithFailedPrecondition) {
  OSPREY_SPARSE_REQUIRE_NO_DEVICE();
  FakeDeviceMemory m;
  ExpectNoDevice(DedupeFeatureKeys(m.ids.data(), 4, 26, m.unique.data(), m.rows.data(), m.count.data(),
                                   m.workspace.data(), m.workspace.size(), nullptr));
  // The empty batch still writes the count on the device.
  ExpectNoDevice(DedupeFeatureKeys(nullptr, 0, 26, nullptr, nullptr, m.count.data(), nullptr, 0, nullptr));
  EXPECT_EQ(m.count[0], -1);
}

TEST(GpuSparseNoDeviceTest, GatherScatterFailWithFailedPrecondition) {
  OSPREY_SPARSE_REQUIRE_NO_DEVICE();
  FakeDeviceMemory m;
  for (int dim : {16, 3}) {  // vector and scalar kernels
    ExpectNoDevice(GatherRows(m.table.data(), m.slots.data(), 4, dim, m.out.data(), nullptr));
    ExpectNoDevice(ScatterRows(m.out.data(), m.slots.data(), 4, dim, m.table.data(), nullptr));
  }
  ExpectNoDevice(CastRowValues(m.out.data(), 4, codec::ValueType::kBf16,
                               reinterpret_cast<uint16_t*>(m.table.data()), nullptr));
}

TEST(GpuSparseNoDeviceTest, ArgumentErrorsComeFirst) {
  FakeDeviceMemory m;
  const Status dedupe = DedupeFeatureKeys(m.ids.data(), -1, 26, m.unique.data(), m.rows.data(), m.count.data(),
                                          m.workspace.data(), m.workspace.size(), nullptr);
  EXPECT_EQ(dedupe.code(), StatusCode::kInvalidArgument) << dedupe.ToString();
  const Status gather = GatherRows(m.table.data(), m.slots.data(), 4, 0, m.out.data(), nullptr);
  EXPECT_EQ(gather.code(), StatusCode::kInvalidArgument) << gather.ToString();
  const Status scatter = ScatterRows(nullptr, m.slots.data(), 4, 16, m.table.data(), nullptr);
  EXPECT_EQ(scatter.code(), StatusCode::kInvalidArgument) << scatter.ToString();
  const Status cast = CastRowValues(m.out.data(), 4, codec::ValueType::kFp32,
                                    reinterpret_cast<uint16_t*>(m.table.data()), nullptr);
  EXPECT_EQ(cast.code(), StatusCode::kInvalidArgument) << cast.ToString();
  // Nothing to do is fine anywhere.
  EXPECT_TRUE(GatherRows(nullptr, nullptr, 0, 16, nullptr, nullptr).ok());
}

}  // namespace
}  // namespace osprey::cuda
