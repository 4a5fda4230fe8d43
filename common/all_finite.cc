#include "common/all_finite.h"

#include <algorithm>
#include <cstdint>
#include <cstring>

namespace osprey {

// A float is finite iff its magnitude bits are below the all-ones exponent 0x7f800000; the
// maximum of the magnitudes is an integer reduction, which vectorizes without any floating-point
// compare. Compiled for AVX-512, AVX2 and baseline x86-64, one picked at load time (as
// server/optim/kernels.cc): the check is a pass over every pushed byte, at memory speed.
#if defined(__x86_64__) && defined(__linux__) && defined(__GNUC__)
__attribute__((target_clones("avx512f", "avx2", "default")))
#endif
bool AllFiniteFloats(const float* __restrict__ g, size_t n) {
  constexpr size_t kBlock = 1024;  // checked between blocks to stop early
  for (size_t start = 0; start < n; start += kBlock) {
    const size_t end = std::min(n, start + kBlock);
    uint32_t max_bits = 0;
    for (size_t i = start; i < end; ++i) {
      uint32_t bits;
      std::memcpy(&bits, g + i, sizeof(bits));
      bits &= 0x7fffffffu;
      max_bits = bits > max_bits ? bits : max_bits;
    }
    if (max_bits >= 0x7f800000u) return false;
  }
  return true;
}

}  // namespace osprey
