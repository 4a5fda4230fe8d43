// The job's median step time, the target of the workers' adaptive per-node ratio (issue 18,
// worker/adaptive_ratio.h). Workers put their own step time in every heartbeat; each heartbeat
// reply (ClusterState) carries the median over the live workers that reported one.
//
// adaptive_ratio.async_barrier: a worker still slow at its density bound says so in its heartbeat
// (barrier_exempt); the reply carries the barrier clock -- where the workers that hold the barrier
// are -- so it can skip ahead to it, and the servers stop waiting for it (server_main.cc).
#include <algorithm>
#include <limits>
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

int64_t JobState::BarrierClock() const {
  int64_t clock = std::numeric_limits<int64_t>::max();
  bool any_exempt = false;
  for (const Node& n : workers_) {
    if (!n.alive) continue;
    if (n.barrier_exempt) {
      any_exempt = true;
    } else {
      clock = std::min(clock, n.clock);
    }
  }
  // Nobody left, or everybody did (then nobody is waited for less than anybody else).
  if (!any_exempt || clock == std::numeric_limits<int64_t>::max()) return -1;
  return clock;
}

}  // namespace osprey::coordinator
