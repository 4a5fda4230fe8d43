// JobState's server failover rules (job_state.h): a replacement for a server rank, the wait for
// one after a server died, and heartbeats of a superseded incarnation.
//
//  - After the rendezvous, a server registration that names an existing rank (requested_rank)
//    with a non-zero incarnation other than the rank's current one REPLACES that rank's process:
//    whether the old one was already marked dead or is still believed alive (a scheduler that
//    restarted it faster than the heartbeat timeout; the new incarnation supersedes it at once,
//    so the job resumes without waiting for the timeout). The shard map's epoch is bumped and
//    carries the new endpoint; the replacement's RegisterReply carries the map, the session id
//    and what the old process last reported (its heartbeat clock = optimizer steps, samples =
//    pushes applied), so the replacement can count what its restore lost. Every node learns the
//    new epoch and endpoint from ClusterState (epoch, nodes[].endpoint) on its next heartbeat.
//  - A dead server no longer fails the job at once: the job waits cluster.server_replace_timeout_ms
//    for a replacement and fails naming the server only then (0: at once, the old rule).
//  - A heartbeat carrying an incarnation other than the rank's current one (the old process,
//    superseded while it still ran) is refused (FailedPrecondition: it must exit).
//  - Refused: a replacement without an endpoint, a rank outside [0, num_servers), the same
//    incarnation again, and any replacement once the job is shutting down (OnRegister).
#include <algorithm>

#include "common/logging.h"
#include "coordinator/job_state.h"
#include "proto/wire.h"

namespace osprey::coordinator {
namespace {

using Ms = std::chrono::milliseconds;

void ReplyError(Outbox* out, const ReplyAddress& to, const Status& status) {
  out->push_back(OutgoingReply{to, status, Buffer()});
}

}  // namespace

bool JobState::IsServerReplacement(const proto::RegisterRequest& req) const {
  if (!rendezvous_complete_ || req.role() != proto::ROLE_SERVER || req.incarnation() == 0) return false;
  const int rank = req.requested_rank();
  if (rank < 0 || rank >= static_cast<int>(servers_.size())) return false;
  return servers_[rank].incarnation != req.incarnation();
}

void JobState::OnReplaceServer(const ReplyAddress& from, const proto::RegisterRequest& req,
                               Clock::time_point now, Outbox* out) {
  const int rank = req.requested_rank();
  Node& node = servers_[rank];
  const std::string who = "replacement for server " + std::to_string(rank) + " (pid " +
                          std::to_string(req.pid()) + " on host '" + req.host() + "')";
  if (req.endpoint().empty()) {
    ReplyError(out, from, InvalidArgument(who + " registered without the endpoint workers reach it at"));
    return;
  }
  if (node.alive) {
    OSPREY_LOG_WARN("{} supersedes {} at once (still believed alive; a restarted process)", who,
                    NodeName(node.role, rank, node.pid));
  } else {
    OSPREY_LOG_INFO("{} registered {:.1f} s after {} was marked dead", who,
                    std::chrono::duration<double>(now - node.dead_since).count(),
                    NodeName(node.role, rank, node.pid));
  }
  proto::RegisterReply reply;
  reply.set_replaced(true);
  reply.set_replaced_steps(static_cast<uint64_t>(std::max<int64_t>(0, node.clock)));
  reply.set_replaced_pushes(node.samples);
  node.endpoint = req.endpoint();
  node.metrics_endpoint = req.metrics_endpoint();
  node.host = req.host();
  node.pid = req.pid();
  node.incarnation = req.incarnation();
  node.sends_report = req.sends_server_report();
  node.alive = true;
  node.last_seen = now;
  node.reported = false;
  node.told = false;
  node.clock = 0;
  node.samples = 0;
  ++node.replacements;
  server_reports_.erase(rank);  // the old process's statistics, if any, are not this one's
  if (req.bsp_rollback()) BeginRollback(rank);  // job_state_rollback.cc
  reply.set_rollback_generation(rollback_.generation);
  shard_map_.set_epoch(shard_map_.epoch() + 1);
  shard_map_.set_server_endpoints(rank, node.endpoint);
  reply.set_rank(rank);
  reply.set_num_servers(cluster_.num_servers);
  reply.set_num_workers(cluster_.num_workers);
  *reply.mutable_shard_map() = shard_map_;
  reply.set_session_id(session_id_);
  out->push_back(OutgoingReply{from, Status::OK(), SerializeMessage(reply)});
  OSPREY_LOG_INFO("server {} now at {} (pid {}): shard-map epoch {}", rank, node.endpoint, node.pid,
                  shard_map_.epoch());
}

void JobState::OnServerDead(Node& node, const std::string& what, Clock::time_point now, Outbox* out) {
  node.dead_since = now;
  if (cluster_.server_replace_timeout_ms <= 0) {
    OSPREY_LOG_ERROR("{}: marked dead; a dead server fails the job (cluster.server_replace_timeout_ms 0)",
                     what);
    BeginShutdown(what + " (server at " + node.endpoint + " is dead)", now, out);
    return;
  }
  OSPREY_LOG_ERROR("{}: marked dead; waiting up to {} ms for a replacement (osprey-server --rank {})", what,
                   cluster_.server_replace_timeout_ms, node.rank);
}

void JobState::FailUnreplacedServers(Clock::time_point now, Outbox* out) {
  if (shutting_down_ || cluster_.server_replace_timeout_ms <= 0) return;
  for (const Node& n : servers_) {
    if (n.alive || n.reported) continue;
    if (now - n.dead_since < Ms(cluster_.server_replace_timeout_ms)) continue;
    BeginShutdown(NodeName(n.role, n.rank, n.pid) + " died and no replacement registered within " +
                      std::to_string(cluster_.server_replace_timeout_ms) +
                      " ms (cluster.server_replace_timeout_ms; server at " + n.endpoint + " is dead)",
                  now, out);
    return;
  }
}

}  // namespace osprey::coordinator
