#include "tools/metrics_endpoints.h"

namespace osprey::tools {

std::string MetricsEndpointsText(const proto::ClusterState& state) {
  if (state.metrics_endpoint().empty()) return "";
  if (state.nodes_size() < state.num_servers() + state.num_workers()) return "";
  std::string text = "coordinator " + state.metrics_endpoint() + "\n";
  for (const proto::NodeState& n : state.nodes()) {
    if (n.metrics_endpoint().empty()) return "";
    text += std::string(n.role() == proto::ROLE_SERVER ? "server-" : "worker-") +
            std::to_string(n.rank()) + " " + n.metrics_endpoint() + "\n";
  }
  return text;
}

}  // namespace osprey::tools
