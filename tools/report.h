// The final report of `osprey launch`: what the job achieved, from the workers' WorkerReports.
//
// Worker 0 evaluates on the held-out set, so its report carries auc, logloss, oracle_auc and
// eval_samples. Over all reports: steps = the largest step count, samples/s = the sum of samples
// divided by the longest train_seconds, bytes pushed / pulled = sums. Wall time is the launcher's.
// The servers' final statistics (ClusterState.server_reports) are summed over servers, and their
// staleness histograms merged bucket by bucket.
//
// Pure functions; thread-safe.
#pragma once

#include <cstdint>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "osprey.pb.h"

namespace osprey::tools {

// One point of the loss curve the launcher samples from its progress polls: when the slowest
// live worker's step advanced, the mean loss of the live workers and the job's samples/s then.
struct CurvePoint {
  double seconds = 0;  // since the first poll
  int64_t step = 0;
  double loss = std::numeric_limits<double>::quiet_NaN();  // NaN before any worker reported one
  double samples_per_sec = 0;
};

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
  // Worker 0's density over the run: (encode step, density), at most 8 points (proto
  // WorkerReport.density_trajectory); empty when it compressed nothing.
  std::vector<std::pair<uint64_t, double>> density_trajectory;
  // Worker 0's compression diagnostics (proto WorkerReport.compression_*): NaN / empty when it
  // compressed nothing.
  double compression_cosine = kMissing;
  double compression_no_update_share = kMissing;
  std::string compression_warning;
  std::vector<proto::LayerCompressionDiagnostics> compression_layers;
  // Step-time breakdown, seconds averaged over workers (see proto WorkerReport).
  double time_wait_input = 0;
  double time_compute = 0;
  double time_push = 0;
  double time_nccl = 0;
  double prefetch_read = 0;
  double prefetch_dedupe = 0;
  double prefetch_cache = 0;
  double prefetch_pull = 0;
  // GPU workers: device time of the steps' stages (CUDA events), seconds averaged over workers.
  double device_plan = 0;
  double device_pull = 0;
  double device_gather = 0;
  double device_compute = 0;
  // Hot-row cache, summed over workers; hit rate NaN without lookups.
  uint64_t cache_lookups = 0;
  uint64_t cache_hits = 0;
  uint64_t cache_evictions = 0;
  uint64_t rows_pulled = 0;
  double cache_hit_rate = kMissing;
  double bytes_per_sample = kMissing;  // (pushed + pulled) / samples
  std::string device;                  // worker 0's
  // Servers' final statistics (proto ServerReport), summed over the servers that reported.
  int num_server_reports = 0;
  uint64_t windows_applied = 0;   // optimizer steps
  uint64_t pushes_applied = 0;
  uint64_t pushes_dropped = 0;    // drop_above
  uint64_t rows_dropped = 0;      // drop_above, sparse rows
  uint64_t rows_skipped = 0;      // non_finite: skip_row
  uint64_t pulls_held = 0;        // bsp / ssp pulls that waited for their clock
  uint64_t refused = 0;           // requests refused for their sender's role / checkpoint dir
  uint64_t auth_refused = 0;      // CURVE connections refused (unknown key, no CURVE)
  uint64_t limit_refusals = 0;    // requests refused by a limit (limits: frame, keys, held)
  uint64_t bad_headers = 0;       // requests whose header did not parse
  // The coordinator's (ClusterState): refused for the sender's role, and malformed messages.
  uint64_t coordinator_refused = 0;
  uint64_t coordinator_bad_requests = 0;
  uint64_t decoded_pushes = 0;    // compressed pushes decoded
  uint64_t decode_bytes_encoded = 0;
  uint64_t decode_bytes_decoded = 0;
  double decode_seconds = 0;
  // Server failover: replacement servers that reported, the optimizer steps their restores
  // rolled back, pushes they recognised as re-sent; workers' acknowledged and re-sent requests.
  uint64_t server_replacements = 0;
  uint64_t server_steps_lost = 0;
  uint64_t pushes_deduplicated = 0;
  uint64_t pushes_acked = 0;
  uint64_t requests_resent = 0;
  // Feature admission / eviction of sparse tables (proto ServerStats).
  uint64_t rows_admitted = 0;
  uint64_t gradients_not_admitted = 0;
  uint64_t rows_evicted_ttl = 0;
  uint64_t rows_evicted_cap = 0;
  uint64_t redis_unflushed_rows = 0;  // write_back Redis store: dirty rows at the servers' reports
  // Merged staleness histogram: [0]: s = 0; [i]: s in [2^(i-1), 2^i); the last bucket also holds
  // larger (one entry per sparse row and per dense push). Empty without server reports.
  std::vector<uint64_t> staleness;
  // The loss curve (osprey launch's polls; empty from SummarizeReports alone).
  std::vector<CurvePoint> curve;
  // Adaptive per-node ratio: one entry per worker whose dense codec had adaptive_ratio, by rank.
  struct AdaptiveWorker {
    int rank = 0;
    double final_density = 0, min_density = 0, max_density = 0;
    uint64_t changes = 0;
    bool cheap_select = false;
    double step_seconds = 0, median_step_seconds = 0;  // the last the controller compared
    double samples_per_sec = 0;                        // this worker's samples / train_seconds
    // async_barrier: times it left the step barrier, steps trained outside it, clocks skipped.
    uint64_t barrier_exits = 0, steps_outside_barrier = 0, clocks_skipped = 0;
  };
  std::vector<AdaptiveWorker> adaptive;
};

JobReport SummarizeReports(const proto::ClusterState& state, double wall_seconds);

// Several human-readable lines, ending in a newline; a "compression" line only when some dense
// push was compressed (with worker 0's density trajectory when the density changed over the run);
// a "servers" line when servers reported (decode time and bytes when a push was compressed), and a
// "staleness" line when their histogram holds any entry.
std::string FormatReport(const JobReport& report);

// One JSON object with the keys auc, oracle_auc, logloss, samples_per_sec, steps, bytes_pushed,
// bytes_pulled, wall_seconds, then time_wait_input, time_compute, time_push, time_nccl,
// prefetch_read, prefetch_dedupe, prefetch_cache, prefetch_pull, device_plan, device_pull,
// device_gather, device_compute, cache_lookups, cache_hits,
// cache_evictions, rows_pulled, cache_hit_rate, bytes_per_sample, then the servers' statistics:
// server_reports (how many servers reported), server_windows_applied, server_pushes_applied,
// server_pushes_dropped, server_rows_dropped, server_rows_skipped, server_pulls_held,
// server_decoded_pushes, server_decode_bytes_encoded, server_decode_bytes_decoded,
// server_decode_seconds, server_refused, server_auth_refused, server_limit_refusals, server_bad_headers,
// coordinator_refused, coordinator_bad_requests, staleness_histogram (an array of counts, buckets as in JobReport), then
// density_trajectory (worker 0's: an array of {"step": N, "density": D}, [] when nothing was
// compressed), adaptive_ratio (see AdaptiveJson), device (a string), and last curve (an array of {"seconds", "step", "loss",
// "samples_per_sec"} objects, [] when none was recorded); numbers that are missing or not finite are written as
// null, since JSON has no NaN.
std::string ReportJson(const JobReport& report);

// report_adaptive.cc: the AdaptiveWorker entries of `state`'s reports, by rank; one
// "adaptive ratio" line per entry (FormatReport appends them); and ", \"adaptive_ratio\": [...]"
// (objects with rank, final_density, min_density, max_density, changes, cheap_select,
// step_seconds, median_step_seconds, samples_per_sec; [] without adaptive workers), which
// ReportJson puts after density_trajectory.
std::vector<JobReport::AdaptiveWorker> AdaptiveWorkers(const proto::ClusterState& state);
std::string AdaptiveText(const JobReport& report);
std::string AdaptiveJson(const JobReport& report);

// "512 B", "1.5 KiB", "3.20 GiB".
std::string FormatBytes(uint64_t bytes);

}  // namespace osprey::tools
