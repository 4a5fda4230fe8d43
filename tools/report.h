// The final report of `osprey launch`: what the job achieved, from the workers' WorkerReports.
//
// Worker 0 evaluates on the held-out set, so its report carries auc, logloss, oracle_auc and
// eval_samples. Over all reports: steps = the largest step count, samples/s = the sum of samples
// divided by the longest train_seconds, bytes pushed / pulled = sums. Wall time is the launcher's.
//
// Pure functions; thread-safe.
#pragma once

#include <cstdint>
#include <limits>
#include <string>

#include "osprey.pb.h"

namespace osprey::tools {

struct JobReport {
  static constexpr double kMissing = std::numeric_limits<double>::quiet_NaN();
  double auc = kMissing;         // NaN when worker 0 did not report
  double oracle_auc = kMissing;
  double logloss = kMissing;
  uint64_t eval_samples = 0;
  double samples_per_sec = 0;
  uint64_t steps = 0;
  uint64_t bytes_pushed = 0;
  uint64_t bytes_pulled = 0;
  double wall_seconds = 0;
  int num_reports = 0;
  // Dense push compression, summed over workers (0 when the dense table is not compressed).
  uint64_t dense_bytes_raw = 0;
  uint64_t dense_bytes_encoded = 0;
  double encode_seconds = 0;
  uint64_t compressed_messages = 0;
  double last_density = kMissing;  // worker 0's
  // Step-time breakdown, seconds averaged over workers (see proto WorkerReport).
  double time_wait_input = 0;
  double time_compute = 0;
  double time_push = 0;
  double time_nccl = 0;
  double prefetch_read = 0;
  double prefetch_dedupe = 0;
  double prefetch_cache = 0;
  double prefetch_pull = 0;
  // Hot-row cache, summed over workers; hit rate NaN without lookups.
  uint64_t cache_lookups = 0;
  uint64_t cache_hits = 0;
  uint64_t cache_evictions = 0;
  uint64_t rows_pulled = 0;
  double cache_hit_rate = kMissing;
  double bytes_per_sample = kMissing;  // (pushed + pulled) / samples
  std::string device;                  // worker 0's
};

JobReport SummarizeReports(const proto::ClusterState& state, double wall_seconds);

// Several human-readable lines, ending in a newline; a "compression" line only when some dense
// push was compressed.
std::string FormatReport(const JobReport& report);

// One JSON object with the keys auc, oracle_auc, logloss, samples_per_sec, steps, bytes_pushed,
// bytes_pulled, wall_seconds, then time_wait_input, time_compute, time_push, time_nccl,
// prefetch_read, prefetch_dedupe, prefetch_cache, prefetch_pull, cache_lookups, cache_hits,
// cache_evictions, rows_pulled, cache_hit_rate, bytes_per_sample and device (a string); numbers
// that are missing or not finite are written as null, since JSON has no NaN.
std::string ReportJson(const JobReport& report);

// "512 B", "1.5 KiB", "3.20 GiB".
std::string FormatBytes(uint64_t bytes);

}  // namespace osprey::tools
