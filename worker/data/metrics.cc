#include "worker/data/metrics.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

namespace osprey::data {

double Auc(const float* scores, const float* labels, size_t n) {
  constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
  struct Item {
    float score;
    bool positive;
  };
  std::vector<Item> items(n);
  for (size_t i = 0; i < n; ++i) {
    if (std::isnan(scores[i])) return kNaN;  // NaN would break the sort's strict weak ordering
    items[i] = {scores[i], labels[i] > 0.5f};
  }
  std::sort(items.begin(), items.end(), [](const Item& a, const Item& b) { return a.score < b.score; });

  // Walk groups of equal score in ascending order. Each positive beats every negative below its
  // group and ties with the negatives inside it; counting in units of one half keeps the sum an
  // exact integer (no rank sums that lose precision in double for n ~ 10^9).
  uint64_t negatives_below = 0, positives = 0;
  unsigned __int128 twice_wins = 0;
  for (size_t begin = 0; begin < n;) {
    size_t end = begin;
    uint64_t group_pos = 0, group_neg = 0;
    for (; end < n && items[end].score == items[begin].score; ++end) {
      if (items[end].positive) {
        ++group_pos;
      } else {
        ++group_neg;
      }
    }
    twice_wins += static_cast<unsigned __int128>(group_pos) * (2 * negatives_below + group_neg);
    negatives_below += group_neg;
    positives += group_pos;
    begin = end;
  }
  if (positives == 0 || negatives_below == 0) return kNaN;
  const double pairs = static_cast<double>(positives) * static_cast<double>(negatives_below);
  return static_cast<double>(twice_wins) / (2.0 * pairs);
}

double LogLoss(const float* probs, const float* labels, size_t n) {
  if (n == 0) return std::numeric_limits<double>::quiet_NaN();
  constexpr double kEps = 1e-7;
  double sum = 0;
  for (size_t i = 0; i < n; ++i) {
    const double p = std::clamp(static_cast<double>(probs[i]), kEps, 1.0 - kEps);
    const double y = labels[i];
    sum -= y * std::log(p) + (1.0 - y) * std::log(1.0 - p);
  }
  return sum / static_cast<double>(n);
}

}  // namespace osprey::data
