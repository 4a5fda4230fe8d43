#include "worker/client/push_parts.h"

#include <algorithm>

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
  return RowPartStarts(num_keys, floats_per_key * sizeof(float), part_bytes, max_parts);
}

std::vector<size_t> RowPartStarts(size_t num_keys, size_t row_bytes, size_t part_bytes, size_t max_parts) {
  std::vector<size_t> starts{0};
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

}  // namespace osprey::worker
