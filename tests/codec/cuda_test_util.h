// Helpers of the CUDA codec tests: skip without a device (vectors to and from the device come
// from tests/testing/cuda_buffers.h), and compute the CPU reference of one error-feedback step.
#pragma once

#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <vector>

#include "common/codec/dense_codecs.h"
#include "common/codec/radix_select.h"
#include "tests/codec/codec_test_util.h"
#include "tests/testing/cuda_buffers.h"
#include "worker/cuda/codec_kernels.h"

// Every GPU test starts with this: on a machine without a device the test is skipped, not failed.
#define OSPREY_REQUIRE_GPU()                                                       \
  do {                                                                             \
    if (::osprey::cuda::DeviceCount() == 0) GTEST_SKIP() << "no CUDA device here"; \
  } while (0)

namespace osprey::cuda::testing {

inline uint32_t DownloadCount(const uint32_t* d) { return Download<uint32_t>(d, 1)[0]; }

// The CPU side of one step: p from (g, r, u), then the selection applied as the codec stack does.
struct CpuStep {
  std::vector<float> p, r, u;
  std::map<uint32_t, uint32_t> pairs;  // index -> value bits (as SparsePairs)
};

enum class Ef { kNone, kResidual, kMomentum };

inline std::vector<float> FormP(Ef ef, const std::vector<float>& g, const std::vector<float>& r, std::vector<float>* u,
                                float m) {
  std::vector<float> p(g.size());
  for (size_t i = 0; i < g.size(); ++i) {
    if (ef == Ef::kMomentum) {
      (*u)[i] = std::fma(m, (*u)[i], g[i]);
      p[i] = r[i] + (*u)[i];
    } else {
      p[i] = ef == Ef::kResidual ? g[i] + r[i] : g[i];
    }
  }
  return p;
}

inline void ApplySelection(const codec::Selection& sel, codec::ValueType type, Ef ef, CpuStep* s) {
  s->r = s->p;
  for (size_t i = 0; i < s->p.size(); ++i) {
    if (!sel.Selects(codec::MagnitudeKey(s->p[i]), static_cast<uint32_t>(i))) continue;
    const float decoded = codec::RoundTrip(s->p[i], type);
    uint32_t bits = codec::FloatBits(s->p[i]);
    if (type == codec::ValueType::kFp16) bits = codec::FloatToHalfBits(s->p[i]);
    if (type == codec::ValueType::kBf16) bits = codec::FloatToBf16Bits(s->p[i]);
    s->pairs[static_cast<uint32_t>(i)] = bits;
    s->r[i] = s->p[i] - decoded;
    if (ef == Ef::kMomentum) s->u[i] = 0.0f;
  }
}

inline void ExpectSameBits(const std::vector<float>& a, const std::vector<float>& b, const char* what) {
  ASSERT_EQ(a.size(), b.size()) << what;
  size_t bad = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    if (codec::FloatBits(a[i]) != codec::FloatBits(b[i]) && bad++ < 5) {
      ADD_FAILURE() << what << "[" << i << "]: gpu " << a[i] << " cpu " << b[i];
    }
  }
  EXPECT_EQ(bad, 0u) << what << ": elements differing";
}

}  // namespace osprey::cuda::testing
