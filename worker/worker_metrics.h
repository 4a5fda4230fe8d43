// The Prometheus metrics of one osprey-worker (common/metrics/metrics.h).
//
// Counted per step by the CPU training loop (StepMetrics; handles resolved once):
//   osprey_worker_step_duration_seconds                     histogram, one observation per step
//   osprey_worker_step_phase_seconds_total{phase}           counter: wait_input, compute, push,
//                                                           nccl (the step's critical path) and
//                                                           the prefetch side's read, dedupe,
//                                                           cache, pull (StepTimes in trainer.h)
//   osprey_worker_pull_staleness{table="sparse"|"dense"} histogram (steps): per step and table,
//                                                           max(0, clock - v), clock the step the
//                                                           pull was for, v the newest table
//                                                           version the client had seen in any
//                                                           reply once the pull completed
//                                                           (README "Metrics and monitoring")
//   osprey_worker_model_flops_total                         counter: samples x DlrmFlopsPerSample
//   osprey_worker_peak_flops_per_second                     gauge (metrics.peak_flops_per_sec > 0)
// GPU workers only (CacheMetrics; the planner thread adds the cache's deltas once per step):
//   osprey_worker_cache_lookups_total, osprey_worker_cache_hits_total,
//   osprey_worker_cache_evictions_total                     counters of the hot-row cache
// Exported from what the worker already keeps (ExportWorkerMetrics, read at scrape time):
//   osprey_worker_samples_total, osprey_worker_clock (steps done), osprey_worker_loss (moving
//   average), osprey_worker_bytes_pushed_total{table}, osprey_worker_bytes_pulled_total{table},
//   osprey_worker_requests_total, osprey_worker_request_errors_total.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "common/metrics/metrics.h"
#include "worker/client/client.h"
#include "worker/models/dlrm.h"
#include "worker/trainer.h"

namespace osprey::worker {

// Model FLOPs of one training sample of the built-in DLRM (forward + backward), counted as
// multiply-adds x 2 (models/dlrm.h's shape): every MLP layer in x out, the (F+1)F/2 pairwise dot
// products of width embedding_dim; backward counted as twice the forward (the weight and input
// gradients of every product). Pooling, activations, the loss and the optimizer are left out.
double DlrmFlopsPerSample(const models::DlrmConfig& config);

// Thread-safety: every method may be called from any thread (each update is one atomic add on
// a handle resolved at construction), so the GPU loop's threads each add their own phases.
class StepMetrics {
 public:
  enum Phase { kWaitInput, kCompute, kPush, kNccl, kRead, kDedupe, kCache, kPull, kNumPhases };
  // `flops_per_sample` > 0: osprey_worker_model_flops_total counts samples x it;
  // `peak_flops` > 0: exported as osprey_worker_peak_flops_per_second.
  explicit StepMetrics(metrics::Registry* registry, double flops_per_sample = 0, double peak_flops = 0);
  // One step took `seconds`; `before`/`after`: the loop's summed StepTimes around it.
  void OnStep(const StepTimes& before, const StepTimes& after, double seconds) const;
  // The GPU loop's pieces of the same: a step's time, samples, and one phase's seconds.
  void ObserveStep(double seconds) const { step_.Observe(seconds); }
  void AddSamples(uint64_t samples) const { flops_.Inc(flops_per_sample_ * static_cast<double>(samples)); }
  void AddPhase(Phase phase, double seconds) const;
  // The pulls of step `clock` completed; `sparse_version` / `dense_version`: the client's
  // table versions then (Client::version).
  void OnPull(int64_t clock, uint64_t sparse_version, uint64_t dense_version) const;

 private:
  metrics::Histogram step_;
  std::array<metrics::Counter, kNumPhases> phases_;
  metrics::Histogram stale_sparse_, stale_dense_;
  metrics::Counter flops_;
  double flops_per_sample_ = 0;
};

// The hot-row cache's counters. Update from one thread (the planner): it adds the increase of
// the cumulative counts since the previous Update.
class CacheMetrics {
 public:
  explicit CacheMetrics(metrics::Registry* registry);
  void Update(uint64_t lookups, uint64_t hits, uint64_t evictions);

 private:
  metrics::Counter lookups_, hits_, evictions_;
  uint64_t last_[3] = {0, 0, 0};
};

// Registers the scrape-time families; `loop` and `client` must outlive the registry's exposer.
// `tables`: (name, table id) of the job's tables.
void ExportWorkerMetrics(const TrainLoop* loop, const Client* client,
                         std::vector<std::pair<std::string, uint32_t>> tables,
                         metrics::Registry* registry);

}  // namespace osprey::worker
