#include "coordinator/scaling_efficiency.h"

#include <algorithm>

namespace osprey::coordinator {

void ThroughputTracker::Observe(int rank, uint64_t samples, Clock::time_point now) {
  auto it = workers_.find(rank);
  if (it == workers_.end() || samples < it->second.last_samples) {
    if (samples == 0) {  // not training yet: its rate starts at its first samples
      workers_.erase(rank);
      return;
    }
    workers_[rank] = Worker{samples, samples, now, now};
    return;
  }
  it->second.last_samples = samples;
  it->second.last = now;
}

std::map<int, double> ThroughputTracker::Rates() const {
  std::map<int, double> out;
  for (const auto& [rank, w] : workers_) {
    const double secs = std::chrono::duration<double>(w.last - w.first).count();
    if (secs > 0) out[rank] = static_cast<double>(w.last_samples - w.first_samples) / secs;
  }
  return out;
}

std::optional<double> ThroughputTracker::Efficiency() const {
  const std::map<int, double> rates = Rates();
  if (rates.empty()) return std::nullopt;
  double sum = 0, fastest = 0;
  for (const auto& [rank, r] : rates) {
    sum += r;
    fastest = std::max(fastest, r);
  }
  const double base = baseline_ > 0 ? baseline_ : fastest;
  if (base <= 0) return std::nullopt;
  return sum / static_cast<double>(rates.size()) / base;
}

}  // namespace osprey::coordinator
