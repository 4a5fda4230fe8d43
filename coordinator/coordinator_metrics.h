// The coordinator's Prometheus metrics, all read at scrape time from what it already keeps:
//   osprey_coordinator_nodes{role,state="live"|"dead"}       gauge
//   osprey_coordinator_epoch                                 gauge (the shard map's epoch)
//   osprey_coordinator_barrier_waiters                       gauge (requests waiting at barriers)
//   osprey_coordinator_heartbeat_age_seconds{role,rank}      gauge (since the node's last heartbeat)
//   osprey_coordinator_node_clock{role,rank}                 gauge (a worker's step, from heartbeats)
//   osprey_coordinator_node_samples_total{rank}              counter (a worker's samples, from heartbeats)
//   osprey_coordinator_bad_requests_total                    counter
//   osprey_coordinator_worker_reports                        gauge (final reports received)
#pragma once

#include "common/metrics/metrics.h"
#include "coordinator/coordinator.h"

namespace osprey::coordinator {

// Registers the families above on `registry`; `coord` must outlive the registry's exposer.
void ExportCoordinatorMetrics(const Coordinator* coord, metrics::Registry* registry);

}  // namespace osprey::coordinator
