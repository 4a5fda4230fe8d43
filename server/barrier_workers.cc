#include "server/barrier_workers.h"

namespace osprey::server {

std::vector<int> WorkersHoldingBarrier(const proto::ClusterState& state) {
  std::vector<int> live, holding;
  for (const proto::NodeState& n : state.nodes()) {
    if (n.role() != proto::ROLE_WORKER || !n.alive()) continue;
    live.push_back(n.rank());
    if (!n.barrier_exempt()) holding.push_back(n.rank());
  }
  return holding.empty() ? live : holding;
}

}  // namespace osprey::server
