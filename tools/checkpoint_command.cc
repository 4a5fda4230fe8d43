// `osprey checkpoint`: on-demand checkpoint of a running job, through its coordinator.
//
// The coordinator gives the live servers. When any server holds a bsp table the checkpoint is a
// cut at one clock (server/checkpoint.h): each server's OP_SERVER_STATS gives the bsp clocks it
// closed; the cut clock D = 1 + the highest of them; every server gets OP_CHECKPOINT with clock D
// at once (one thread per server) and answers when its bsp tables closed exactly D clocks. A
// server that already passed D (the job moved on between the two rounds) answers an error; then
// the whole round is retried with a later D (5 attempts in all). Without bsp tables each server writes
// its own snapshot when the request reaches it.
#include <algorithm>
#include <cstdio>
#include <thread>
#include <vector>

#include "common/config/security_config.h"
#include "coordinator/coordinator_client.h"
#include "coordinator/rpc_client.h"
#include "tools/commands.h"

namespace osprey::tools {
namespace {

// One request to one server over a fresh connection.
// The transport options of this admin tool: plain, or CURVE with the admin keys of `keys_dir`
// toward listeners of role `dials`.
StatusOr<TransportOptions> AdminOptions(const std::string& keys_dir, PeerRole dials) {
  if (keys_dir.empty()) return TransportOptions{};
  config::SecurityConfig security{config::SecurityMode::kCurve, keys_dir};
  return config::MakeTransportOptions(security, PeerRole::kAdmin, dials);
}

Status CallServer(const std::string& endpoint, proto::Op op, const std::string& payload,
                  google::protobuf::MessageLite* reply, int timeout_ms, int64_t clock,
                  const std::string& keys_dir) {
  OSPREY_ASSIGN_OR_RETURN(TransportOptions options, AdminOptions(keys_dir, PeerRole::kServer));
  auto st = MakeTransport(options);
  if (!st.ok()) return st.status();
  auto rpc = coordinator::RpcClient::Create(std::move(*st), endpoint);
  if (!rpc.ok()) return rpc.status();
  Status s = (*rpc)->CallRaw(op, payload, reply, timeout_ms, clock);
  (*rpc)->Stop();
  return s;
}

// The job's live servers from the coordinator (*dead: how many it knows dead; their shards are not
// saved). Returns false, after printing why, when there is nothing to checkpoint: the coordinator
// cannot be reached, the rendezvous is not complete, or no server is alive.
bool LiveServers(const std::string& coordinator, int timeout_ms, const std::string& keys_dir,
                 std::vector<proto::NodeState>* servers, int* dead) {
  auto options = AdminOptions(keys_dir, PeerRole::kCoordinator);
  if (!options.ok()) {
    std::fprintf(stderr, "osprey checkpoint: %s\n", options.status().ToString().c_str());
    return false;
  }
  auto transport = MakeTransport(*options);
  if (!transport.ok()) {
    std::fprintf(stderr, "osprey checkpoint: %s\n", transport.status().ToString().c_str());
    return false;
  }
  auto coord = coordinator::CoordinatorClient::Create(std::move(*transport), coordinator);
  if (!coord.ok()) {
    std::fprintf(stderr, "osprey checkpoint: %s\n", coord.status().ToString().c_str());
    return false;
  }
  auto state = (*coord)->GetState(timeout_ms);
  (*coord)->Stop();
  if (!state.ok()) {
    std::fprintf(stderr, "osprey checkpoint: cannot reach the coordinator: %s\n",
                 state.status().ToString().c_str());
    return false;
  }
  // Before the rendezvous completes servers have no rank and no tables: nothing to save yet.
  int ranked = 0;
  for (const proto::NodeState& node : state->nodes()) {
    if (node.role() == proto::ROLE_SERVER && node.rank() >= 0) ++ranked;
  }
  if (ranked == 0 || ranked < state->num_servers()) {
    std::fprintf(stderr, "osprey checkpoint: the job is still starting (%d of %d servers have a rank)\n",
                 ranked, state->num_servers());
    return false;
  }
  for (const proto::NodeState& node : state->nodes()) {
    if (node.role() != proto::ROLE_SERVER) continue;
    if (!node.alive()) {
      std::fprintf(stderr, "osprey checkpoint: server %d (%s) is dead; its shards are not saved\n",
                   node.rank(), node.endpoint().c_str());
      ++*dead;
      continue;
    }
    servers->push_back(node);
  }
  if (servers->empty()) {
    std::fprintf(stderr, "osprey checkpoint: the coordinator knows no live servers (yet)\n");
    return false;
  }
  return true;
}

// Round 1: the cut clock, `margin` clocks past the highest bsp clock any server closed (0: no
// server holds bsp, no cut). Returns false, after printing the server's error, when one fails.
bool CutClock(const std::vector<proto::NodeState>& servers, int timeout_ms, int64_t margin,
              const std::string& keys_dir, int64_t* clock) {
  *clock = 0;
  for (const proto::NodeState& node : servers) {
    proto::ServerStats st;
    Status s = CallServer(node.endpoint(), proto::OP_SERVER_STATS, "", &st, timeout_ms, 0,
                          keys_dir);
    if (!s.ok()) {
      std::fprintf(stderr, "osprey checkpoint: server %d: %s\n", node.rank(), s.ToString().c_str());
      return false;
    }
    if (st.has_bsp()) *clock = std::max(*clock, st.bsp_clock() + 1 + margin);
  }
  return true;
}

// Round 2: OP_CHECKPOINT at `clock` to every server at once. Returns the exit code (0 when all
// wrote and none was dead, else 1), or -1 when some server had already passed the clock (retry).
int CheckpointAll(const std::vector<proto::NodeState>& servers, const std::string& dir,
                  int timeout_ms, int64_t clock, int dead, const std::string& keys_dir) {
  std::vector<Status> results(servers.size());
  std::vector<std::thread> threads;
  for (size_t i = 0; i < servers.size(); ++i) {
    threads.emplace_back([&, i] {
      results[i] = CallServer(servers[i].endpoint(), proto::OP_CHECKPOINT, dir, nullptr,
                              timeout_ms, clock, keys_dir);
    });
  }
  for (auto& t : threads) t.join();
  bool passed = false;
  int errors = 0;
  for (size_t i = 0; i < servers.size(); ++i) {
    const Status& s = results[i];
    if (s.ok()) continue;
    ++errors;
    passed = passed || s.message().find("already closed") != std::string::npos;
    std::fprintf(stderr, "osprey checkpoint: server %d (%s): %s\n", servers[i].rank(),
                 servers[i].endpoint().c_str(), s.ToString().c_str());
  }
  if (errors == 0) {
    for (const proto::NodeState& node : servers) {
      if (clock > 0) {
        std::printf("server %d (%s): checkpoint written (bsp cut at clock %lld)\n", node.rank(),
                    node.endpoint().c_str(), static_cast<long long>(clock));
      } else {
        std::printf("server %d (%s): checkpoint written\n", node.rank(), node.endpoint().c_str());
      }
    }
    return dead == 0 ? 0 : 1;
  }
  return passed ? -1 : 1;
}

}  // namespace

int RunCheckpoint(const std::string& coordinator, const std::string& dir, int timeout_ms,
                  const std::string& keys_dir) {
  std::vector<proto::NodeState> servers;
  int dead = 0;
  if (!LiveServers(coordinator, timeout_ms, keys_dir, &servers, &dead)) return 1;
  constexpr int kAttempts = 5;
  for (int attempt = 0; attempt < kAttempts; ++attempt) {
    // A retry means a fast job passed the chosen clock before the request reached a server, so
    // each retry picks a clock further ahead (0, 1, 3, 7, 15 clocks of margin); the cut waits for
    // it.
    const int64_t margin = (int64_t{1} << attempt) - 1;
    int64_t clock = 0;
    if (!CutClock(servers, timeout_ms, margin, keys_dir, &clock)) return 1;
    const int rc = CheckpointAll(servers, dir, timeout_ms, clock, dead, keys_dir);
    if (rc >= 0) return rc;
    std::fprintf(stderr, "osprey checkpoint: retrying with a later clock\n");
  }
  std::fprintf(stderr, "osprey checkpoint: the job kept passing the chosen clock; gave up\n");
  return 1;
}

}  // namespace osprey::tools
