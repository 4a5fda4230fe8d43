// The Prometheus metrics of one osprey-worker (common/metrics/metrics.h).
//
// Counted per step by the CPU training loop (StepMetrics; handles resolved once):
//   osprey_worker_step_duration_seconds                     histogram, one observation per step
//   osprey_worker_step_phase_seconds_total{phase}           counter: wait_input, compute, push,
//                                                           nccl (the step's critical path) and
//                                                           the prefetch side's read, dedupe,
//                                                           cache, pull (StepTimes in trainer.h)
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
#include "worker/trainer.h"

namespace osprey::worker {

class StepMetrics {
 public:
  explicit StepMetrics(metrics::Registry* registry);
  // One step took `seconds`; `before`/`after`: the loop's summed StepTimes around it.
  void OnStep(const StepTimes& before, const StepTimes& after, double seconds) const;

 private:
  metrics::Histogram step_;
  std::array<metrics::Counter, 8> phases_;
};

// Registers the scrape-time families; `loop` and `client` must outlive the registry's exposer.
// `tables`: (name, table id) of the job's tables.
void ExportWorkerMetrics(const TrainLoop* loop, const Client* client,
                         std::vector<std::pair<std::string, uint32_t>> tables,
                         metrics::Registry* registry);

}  // namespace osprey::worker
