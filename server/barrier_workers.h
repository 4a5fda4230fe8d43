// Which workers the step barrier waits for (bsp windows, ssp bounds): the live workers of the
// coordinator's ClusterState, less those that left the barrier (adaptive_ratio.async_barrier,
// NodeState.barrier_exempt). A worker that left still pushes: a push of a clock already closed is
// applied on arrival (table_shard.h), and its pulls of a closed clock are answered at once. When
// every live worker left, the barrier waits for all of them, as without the option.
#pragma once

#include <vector>

#include "osprey.pb.h"

namespace osprey::server {

struct BarrierWorkers {
  std::vector<int> holding;  // live workers the barrier waits for, in node order
  std::vector<int> left;     // live workers that left it (empty when all of them did)
};

// The live workers of `state`, split as above.
BarrierWorkers WorkersAtBarrier(const proto::ClusterState& state);

}  // namespace osprey::server
