// `osprey checkpoint`: on-demand checkpoint of a running job, through its coordinator.
#include <cstdio>

#include "coordinator/coordinator_client.h"
#include "coordinator/rpc_client.h"
#include "tools/commands.h"

namespace osprey::tools {

int RunCheckpoint(const std::string& coordinator, const std::string& dir, int timeout_ms) {
  auto transport = MakeTransport(TransportOptions{});
  if (!transport.ok()) {
    std::fprintf(stderr, "osprey checkpoint: %s\n", transport.status().ToString().c_str());
    return 1;
  }
  auto coord = coordinator::CoordinatorClient::Create(std::move(*transport), coordinator);
  if (!coord.ok()) {
    std::fprintf(stderr, "osprey checkpoint: %s\n", coord.status().ToString().c_str());
    return 1;
  }
  auto state = (*coord)->GetState(timeout_ms);
  (*coord)->Stop();
  if (!state.ok()) {
    std::fprintf(stderr, "osprey checkpoint: cannot reach the coordinator: %s\n",
                 state.status().ToString().c_str());
    return 1;
  }
  // Before the rendezvous completes servers have no rank and no tables: nothing to save yet.
  int ranked = 0;
  for (const proto::NodeState& node : state->nodes()) {
    if (node.role() == proto::ROLE_SERVER && node.rank() >= 0) ++ranked;
  }
  if (ranked == 0 || ranked < state->num_servers()) {
    std::fprintf(stderr, "osprey checkpoint: the job is still starting (%d of %d servers have a rank)\n",
                 ranked, state->num_servers());
    return 1;
  }
  int asked = 0, failed = 0;
  for (const proto::NodeState& node : state->nodes()) {
    if (node.role() != proto::ROLE_SERVER) continue;
    std::string who = "server " + std::to_string(node.rank()) + " (" + node.endpoint() + ")";
    if (!node.alive()) {
      std::fprintf(stderr, "osprey checkpoint: %s is dead; its shards are not saved\n", who.c_str());
      ++failed;
      continue;
    }
    ++asked;
    auto st = MakeTransport(TransportOptions{});
    Status s = st.status();
    if (s.ok()) {
      auto rpc = coordinator::RpcClient::Create(std::move(*st), node.endpoint());
      s = rpc.ok() ? (*rpc)->CallRaw(proto::OP_CHECKPOINT, dir, nullptr, timeout_ms) : rpc.status();
      if (rpc.ok()) (*rpc)->Stop();
    }
    if (!s.ok()) {
      std::fprintf(stderr, "osprey checkpoint: %s: %s\n", who.c_str(), s.ToString().c_str());
      ++failed;
    } else {
      std::printf("%s: checkpoint written\n", who.c_str());
    }
  }
  if (asked == 0 && failed == 0) {
    std::fprintf(stderr, "osprey checkpoint: the coordinator knows no servers (yet)\n");
    return 1;
  }
  return failed == 0 ? 0 : 1;
}

}  // namespace osprey::tools
