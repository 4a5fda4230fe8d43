// ThroughputTracker: each worker's samples/s as the coordinator sees it in heartbeats, and the
// job's scaling efficiency from them (osprey_coordinator_worker_samples_per_second,
// osprey_coordinator_scaling_efficiency; coordinator_metrics.h).
//
// A worker's rate is averaged since the first observation at which it had trained samples:
//   rate_r = (samples_now - samples_first) / (now - t_first)     (needs two observations)
// so it includes the job's barrier waits and stragglers, not only its compute. The efficiency of
// the workers with a rate (all live workers of the job, in steady state) is
//   efficiency = mean_r(rate_r) / baseline
// with baseline the configured one worker's samples/s (metrics.single_worker_samples_per_sec, a
// run of the same job with one worker), else the fastest worker's rate. With the configured
// baseline it is the textbook scaling efficiency (N workers' samples/s over N x one worker's);
// relative to the fastest worker it only shows imbalance (1.0 when every worker keeps up with the
// fastest, below when some are slower), not the cost of adding workers.
//
// Pure: no clock (the caller passes now), no threads. Thread-safety: none (the caller locks).
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <optional>

namespace osprey::coordinator {

class ThroughputTracker {
 public:
  using Clock = std::chrono::steady_clock;
  // baseline <= 0: relative to the fastest worker.
  explicit ThroughputTracker(double single_worker_samples_per_sec)
      : baseline_(single_worker_samples_per_sec) {}

  // Worker `rank` had trained `samples` by `now`. A worker whose count went down (restarted)
  // starts over.
  void Observe(int rank, uint64_t samples, Clock::time_point now);
  // Forgets a worker (dead, or gone from the job).
  void Forget(int rank) { workers_.erase(rank); }

  // samples/s by rank, for the workers with two observations over a positive time.
  std::map<int, double> Rates() const;
  // nullopt until some worker has a rate (or when every rate is 0 with no baseline).
  std::optional<double> Efficiency() const;

 private:
  struct Worker {
    uint64_t first_samples = 0, last_samples = 0;
    Clock::time_point first, last;
  };
  const double baseline_;
  std::map<int, Worker> workers_;
};

}  // namespace osprey::coordinator
