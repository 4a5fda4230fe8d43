// Which workers the step barrier waits for (bsp windows, ssp bounds): the live workers of the
// coordinator's ClusterState, less those that left the barrier (adaptive_ratio.async_barrier,
// NodeState.barrier_exempt). A worker that left still pushes: a push for a clock already closed
// joins the oldest open window (table_shard.h), and its pulls of a closed clock are answered at
// once. When every live worker left, the barrier waits for all of them, as without the option.
#pragma once

#include <vector>

#include "osprey.pb.h"

namespace osprey::server {

// The ranks of the live workers in `state` that hold the barrier (see above), in node order.
std::vector<int> WorkersHoldingBarrier(const proto::ClusterState& state);

}  // namespace osprey::server
