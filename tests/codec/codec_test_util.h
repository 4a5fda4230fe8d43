// Shared helpers of the codec tests: reproducible gradients and payload parsing.
#pragma once

#include <cstdint>
#include <cstring>
#include <map>
#include <random>
#include <vector>

#include "common/codec/codec_math.h"
#include "common/codec/encoded.h"

namespace osprey::codec::testing {

// Gradient-like data: mostly Gaussian, 1% of elements 30x larger (heavy tail), a few exact zeros.
inline std::vector<float> RandomGradient(size_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::uniform_real_distribution<float> uniform(0.0f, 1.0f);
  std::vector<float> g(n);
  for (size_t i = 0; i < n; ++i) {
    const float u = uniform(rng);
    g[i] = u < 0.002f ? 0.0f : normal(rng) * (u > 0.99f ? 30.0f : 1.0f) * 1e-3f;
  }
  return g;
}

// Values from a handful of magnitudes: every threshold has many ties.
inline std::vector<float> TiedGradient(size_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<float> g(n);
  for (size_t i = 0; i < n; ++i) g[i] = static_cast<float>(static_cast<int>(rng() % 9) - 4) * 0.25f;
  return g;
}

inline uint32_t ReadU32(const uint8_t* p) {
  uint32_t v;
  std::memcpy(&v, p, sizeof(v));
  return v;
}

// Sparse payload -> index -> raw value bits (u32 for fp32, u16 widened for fp16/bf16).
inline std::map<uint32_t, uint32_t> SparsePairs(const EncodedMeta& meta, const uint8_t* payload) {
  std::map<uint32_t, uint32_t> pairs;
  const size_t vb = ValueBytes(meta.value_type);
  const uint8_t* values = payload + 4 * meta.count;
  for (size_t i = 0; i < meta.count; ++i) {
    uint32_t bits = 0;
    std::memcpy(&bits, values + vb * i, vb);
    pairs[ReadU32(payload + 4 * i)] = bits;
  }
  return pairs;
}

inline bool SameBits(float a, float b) { return FloatBits(a) == FloatBits(b); }

}  // namespace osprey::codec::testing
