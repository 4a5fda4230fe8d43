// The coordinator's Prometheus metrics, all read at scrape time from what it already keeps:
//   osprey_coordinator_nodes{role,state="live"|"dead"}       gauge
//   osprey_coordinator_epoch                                 gauge (the shard map's epoch)
//   osprey_coordinator_barrier_waiters                       gauge (requests waiting at barriers)
//   osprey_coordinator_heartbeat_age_seconds{role,rank}      gauge (since the node's last heartbeat)
//   osprey_coordinator_node_clock{role,rank}                 gauge (a worker's step, from heartbeats)
//   osprey_coordinator_node_samples_total{rank}              counter (a worker's samples, from heartbeats)
//   osprey_coordinator_bad_requests_total                    counter
//   osprey_coordinator_worker_reports                        gauge (final reports received)
//   osprey_coordinator_worker_samples_per_second{rank}       gauge (a live worker's average since
//                                                            it started training; scaling_efficiency.h)
//   osprey_coordinator_scaling_efficiency                    gauge (mean worker samples/s over one
//                                                            worker's: scaling_efficiency.h defines it)
#pragma once

#include "common/metrics/metrics.h"
#include "coordinator/coordinator.h"
#include "coordinator/scaling_efficiency.h"

namespace osprey::coordinator {

// Registers the families above on `registry`; `coord` must outlive the registry's exposer.
// `single_worker_samples_per_sec`: the efficiency's baseline (<= 0: the fastest worker's).
void ExportCoordinatorMetrics(const Coordinator* coord, metrics::Registry* registry,
                              double single_worker_samples_per_sec = 0);

}  // namespace osprey::coordinator
