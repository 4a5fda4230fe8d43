#include "server/barrier_workers.h"

namespace osprey::server {

BarrierWorkers WorkersAtBarrier(const proto::ClusterState& state) {
  BarrierWorkers out;
  std::vector<int> live;
  for (const proto::NodeState& n : state.nodes()) {
    if (n.role() != proto::ROLE_WORKER || !n.alive()) continue;
    live.push_back(n.rank());
    (n.barrier_exempt() ? out.left : out.holding).push_back(n.rank());
  }
  if (out.holding.empty()) {  // everybody left: everybody holds it
    out.holding = std::move(live);
    out.left.clear();
  }
  return out;
}

}  // namespace osprey::server
