// Small statistics helpers for benchmarks and reports.
#pragma once

#include <algorithm>
#include <cmath>
#include <vector>

namespace osprey {

// The median of v: the middle value, the mean of the two middle values for an even count, NaN
// when v is empty.
inline double Median(std::vector<double> v) {
  if (v.empty()) return std::nan("");
  const size_t mid = v.size() / 2;
  std::nth_element(v.begin(), v.begin() + mid, v.end());
  if (v.size() % 2 == 1) return v[mid];
  const double upper = v[mid];
  return 0.5 * (*std::max_element(v.begin(), v.begin() + mid) + upper);
}

}  // namespace osprey
