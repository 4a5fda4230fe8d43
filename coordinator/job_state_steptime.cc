// The job's median step time, the target of the workers' adaptive per-node ratio (issue 18,
// worker/adaptive_ratio.h). Workers put their own step time in every heartbeat; each heartbeat
// reply (ClusterState) carries the median over the live workers that reported one.
#include <algorithm>
#include <vector>

#include "coordinator/job_state.h"

namespace osprey::coordinator {

double JobState::MedianStepSeconds() const {
  std::vector<double> times;
  for (const Node& n : workers_) {
    if (n.alive && n.step_seconds > 0) times.push_back(n.step_seconds);
  }
  // One worker is its own median: there is nobody to be slower than.
  if (times.size() < 2) return 0;
  std::sort(times.begin(), times.end());
  const size_t mid = times.size() / 2;
  return times.size() % 2 == 1 ? times[mid] : 0.5 * (times[mid - 1] + times[mid]);
}

}  // namespace osprey::coordinator
