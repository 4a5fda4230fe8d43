#include "worker/client/push_parts.h"

#include <algorithm>
#include <cstring>

namespace osprey::worker {

std::vector<size_t> PartStarts(const std::vector<uint64_t>& key_floats, size_t part_bytes,
                               size_t max_parts) {
  std::vector<size_t> starts{0};
  if (part_bytes == 0 || key_floats.size() < 2 || max_parts < 2) return starts;
  uint64_t total = 0;
  for (uint64_t f : key_floats) total += f * sizeof(float);
  if (total < 2 * uint64_t{part_bytes}) return starts;
  // Parts of at least `target` bytes, so no more than max_parts of them.
  const uint64_t target = std::max<uint64_t>(part_bytes, (total + max_parts - 1) / max_parts);
  uint64_t in_part = 0, left = total;
  for (size_t i = 0; i < key_floats.size(); ++i) {
    const uint64_t bytes = key_floats[i] * sizeof(float);
    if (in_part >= target && left >= target) {  // cut before key i; the rest is a part too
      starts.push_back(i);
      in_part = 0;
    }
    in_part += bytes;
    left -= bytes;
  }
  return starts;
}

std::vector<size_t> UniformPartStarts(size_t num_keys, size_t floats_per_key, size_t part_bytes,
                                      size_t max_parts) {
  std::vector<size_t> starts{0};
  const uint64_t row_bytes = uint64_t{floats_per_key} * sizeof(float);
  const uint64_t total = row_bytes * num_keys;
  if (part_bytes == 0 || num_keys < 2 || max_parts < 2 || row_bytes == 0 || total < 2 * uint64_t{part_bytes}) {
    return starts;
  }
  const uint64_t target = std::max<uint64_t>(part_bytes, (total + max_parts - 1) / max_parts);
  const size_t keys_per_part = static_cast<size_t>((target + row_bytes - 1) / row_bytes);
  // Whole parts of keys_per_part keys; the remainder joins the last one.
  for (size_t k = keys_per_part; k + keys_per_part <= num_keys; k += keys_per_part) starts.push_back(k);
  return starts;
}

// Compiled for AVX-512, AVX2 and baseline x86-64, picked at load time (as server/optim/kernels.cc):
// the check runs before the first part goes out, so its speed is the push's.
#if defined(__x86_64__) && defined(__linux__) && defined(__GNUC__)
__attribute__((target_clones("avx512f", "avx2", "default")))
#endif
bool AllFiniteFloats(const float* g, size_t n) {
  // A float is finite iff its magnitude bits are below the all-ones exponent; the maximum of the
  // magnitudes is an integer reduction that vectorizes (as server/optim's AllFiniteLoop).
  constexpr size_t kBlock = 4096;  // checked between blocks to stop early
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

}  // namespace osprey::worker
