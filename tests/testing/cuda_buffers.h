// Device buffers for the GPU tests: vectors to and from the device, and poisoned output buffers.
// Every buffer has kSlackBytes beyond what was asked, so it is never empty (pointers stay
// non-null) and a kernel that writes a little past its end hits slack, not another allocation. A
// failed allocation or copy is a test failure (EXPECT) and an allocation failure yields an empty
// buffer.
#pragma once

#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cstddef>
#include <utility>
#include <vector>

#include "worker/cuda/codec_kernels.h"

namespace osprey::cuda::testing {

inline constexpr size_t kSlackBytes = 256;

// v on the device, with room for extra_elements more elements.
template <typename T>
DeviceBuffer Upload(const std::vector<T>& v, size_t extra_elements = 0) {
  auto buf = DeviceBuffer::Allocate(sizeof(T) * (v.size() + extra_elements) + kSlackBytes);
  EXPECT_TRUE(buf.ok()) << buf.status().ToString();
  if (!buf.ok()) return DeviceBuffer();
  if (!v.empty()) {
    EXPECT_EQ(cudaMemcpy(buf->data(), v.data(), sizeof(T) * v.size(), cudaMemcpyHostToDevice), cudaSuccess);
  }
  return std::move(buf).value();
}

// n elements from device memory d.
template <typename T>
std::vector<T> Download(const void* d, size_t n) {
  std::vector<T> v(n);
  if (n > 0) {
    EXPECT_EQ(cudaMemcpy(v.data(), d, sizeof(T) * n, cudaMemcpyDeviceToHost), cudaSuccess);
  }
  return v;
}

// A buffer of `bytes` bytes, every byte 0xFF (-1 in every int32, NaN in every float), so that an
// output a kernel fails to write shows.
inline DeviceBuffer Poisoned(size_t bytes) {
  auto buf = DeviceBuffer::Allocate(bytes + kSlackBytes);
  EXPECT_TRUE(buf.ok()) << buf.status().ToString();
  if (!buf.ok()) return DeviceBuffer();
  EXPECT_EQ(cudaMemset(buf->data(), 0xFF, buf->size()), cudaSuccess);
  return std::move(buf).value();
}

inline DeviceBuffer PoisonedFloats(size_t n) { return Poisoned(sizeof(float) * n); }

}  // namespace osprey::cuda::testing
