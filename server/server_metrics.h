// ServerMetrics: the Prometheus metrics of one osprey-server (common/metrics/metrics.h).
//
// Counted here, on the request path (handles resolved once per table and op at Activate, so a
// request costs one counter add and one histogram observe):
//   osprey_server_requests_total{op,table}              counter
//   osprey_server_request_duration_seconds{op,table}    histogram: time in the server's handler
//                                                       (a held pull's wait for its clock is not in it)
//   osprey_server_checkpoint_duration_seconds           histogram
// Exported from what the server already counts (ServerStats; ExportServerStats, read at scrape):
//   osprey_server_bytes_received_total / _sent_total, osprey_server_pushes_applied_total,
//   osprey_server_pushes_dropped_total, osprey_server_windows_applied_total (merge windows),
//   osprey_server_pulls_held_total, osprey_server_held_requests, osprey_server_held_bytes,
//   osprey_server_bad_requests_total{kind}, osprey_server_push_staleness (histogram, clocks),
//   osprey_server_rows{table}, osprey_server_last_checkpoint_timestamp_seconds.
//
// Threading: OnRequest/OnCheckpoint from any thread (atomics in prometheus-cpp).
#pragma once

#include <array>
#include <string>
#include <vector>

#include "common/metrics/metrics.h"
#include "osprey.pb.h"

namespace osprey::server {

class Server;

class ServerMetrics {
 public:
  // Resolves the handles of every table of `table_names` (indexed by table id).
  ServerMetrics(metrics::Registry* registry, const std::vector<std::string>& table_names);

  // One handled request of `op` on `table` that took `seconds` in the handler.
  void OnRequest(proto::Op op, uint32_t table, double seconds) const;
  // One checkpoint written in `seconds`, finished at unix time `unix_seconds`.
  void OnCheckpoint(double seconds, double unix_seconds) const;

 private:
  // pull_sparse, push_sparse, pull_dense, push_dense, init_dense, other.
  static constexpr int kOps = 6;
  struct OpHandles {
    metrics::Counter requests;
    metrics::Histogram latency;
  };
  std::vector<std::array<OpHandles, kOps>> per_table_;
  std::array<OpHandles, kOps> untabled_;  // stats, checkpoint, bad table ids
  metrics::Histogram checkpoint_;
  metrics::Gauge last_checkpoint_;
};

// Registers the scrape-time families of `srv` (the second list above); `srv` must outlive the
// registry's exposer.
void ExportServerStats(const Server* srv, metrics::Registry* registry);

}  // namespace osprey::server
