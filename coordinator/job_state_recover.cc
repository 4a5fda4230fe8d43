// JobState: coordinator restart (#12 item 3). The rest of JobState is job_state.cc.
//
// Recovery: a coordinator killed mid-job is restarted with --recover on the same endpoint. Its
// JobState then starts with BeginRecovery(): no session id, every rank of the job expected back,
// heartbeats not yet due. The nodes, which went on training while it was away, re-register
// (RegisterRequest.rejoin) with their role, rank, incarnation, endpoint, session id, progress,
// the newest shard map epoch they saw and the last ClusterState they received. Rules:
//  - The session id kept in the job's MetadataStore (AdoptStoredMetadata), else the first
//    re-registration's, is adopted; one with another session id is refused
//    (FailedPrecondition naming both), as is a rank outside the job, a server without an
//    endpoint, and a fresh (non-rejoin) registration while recovering. A rank that is back
//    already may re-register again with the same incarnation (a repeat is answered again); with
//    another incarnation it is refused (AlreadyExists).
//  - Each re-registration is answered at once (RegisterReply.recovered = true): the node
//    heartbeats from then on. A heartbeat or other request of a node that is not back yet gets
//    Unavailable ("re-register"), which makes it re-register.
//  - Rebuilt from the re-registrations: each node's endpoint, host, pid, metrics URL, progress;
//    the shard map's server endpoints and its epoch (the largest any node saw: never back); from
//    the carried ClusterStates also the worker and server reports already received and which
//    nodes were dead (not waited for), and the last known progress of nodes not back yet.
//  - Barriers hold while recovering (a node not back may be at one too; nodes re-send their
//    arrivals), and the "every live worker reported" check waits for the end of recovery.
//  - Recovery completes when every node that is alive and has not reported is back, or when
//    cluster.heartbeat_timeout_ms passed since the restart; then the missing ones are marked dead
//    as usual (a dead server fails the job), every node that is back gets a fresh heartbeat grace
//    period from that moment, barriers are released and the done check runs.
//  - A rejoin to a coordinator that is not recovering (a node that merely missed heartbeat
//    replies) is answered as a no-op (recovered = false) when the session and rank match a live
//    node; refused otherwise (a coordinator started without --recover knows no session).
#include <algorithm>
#include <cstdio>
#include <string>

#include "common/logging.h"
#include "coordinator/job_state.h"
#include "proto/wire.h"

namespace osprey::coordinator {
namespace {

using Ms = std::chrono::milliseconds;

std::string Hex(uint64_t v) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%llx", static_cast<unsigned long long>(v));
  return buf;
}

}  // namespace

void JobState::BeginRecovery(Clock::time_point now) {
  recovering_ = true;
  recover_start_ = now;
  session_id_ = 0;  // adopted from the first re-registration
  rendezvous_complete_ = true;  // ranks are fixed: the nodes keep theirs
  for (proto::Role role : {proto::ROLE_SERVER, proto::ROLE_WORKER}) {
    std::vector<Node>& nodes = NodesOf(role);
    nodes.assign(static_cast<size_t>(CountOf(role)), Node());
    for (size_t i = 0; i < nodes.size(); ++i) {
      nodes[i].role = role;
      nodes[i].rank = nodes[i].requested_rank = static_cast<int>(i);
      nodes[i].last_seen = now;
    }
  }
  shard_map_.clear_server_endpoints();
  for (int i = 0; i < cluster_.num_servers; ++i) shard_map_.add_server_endpoints("");
  OSPREY_LOG_WARN("recovering (--recover): waiting up to {} ms (cluster.heartbeat_timeout_ms) for "
                  "{} servers and {} workers to re-register", cluster_.heartbeat_timeout_ms,
                  cluster_.num_servers, cluster_.num_workers);
}

void JobState::AdoptStoredMetadata(uint64_t session_id, const proto::ClusterState& state) {
  if (!recovering_ || session_id == 0) return;
  session_id_ = session_id;
  AdoptLastState(state);
  OSPREY_LOG_INFO("recovering session {:x} from the stored metadata: epoch {}, {} worker reports",
                  session_id_, shard_map_.epoch(), reports_.size());
}

Status JobState::RecoveryGate(proto::Role role, int rank) const {
  if (!recovering_ || rejoined_.count({role, rank}) > 0) return Status::OK();
  return Unavailable("the coordinator was restarted and is recovering: " + RoleName(role) + " " +
                     std::to_string(rank) + " must re-register (rejoin) first");
}

Status JobState::CheckRejoin(const proto::RegisterRequest& req) const {
  const proto::Role role = req.role();
  const std::string who = RoleName(role) + " (pid " + std::to_string(req.pid()) + " on host '" +
                          req.host() + "')";
  if (!req.rejoin()) {
    return FailedPrecondition("the coordinator was restarted (--recover) and only takes back the "
                              "nodes of its running job; refusing a new registration of " + who);
  }
  if (role != proto::ROLE_SERVER && role != proto::ROLE_WORKER) {
    return InvalidArgument("re-registration: role must be ROLE_SERVER or ROLE_WORKER, got " +
                           std::to_string(static_cast<int>(role)));
  }
  const int n = CountOf(role);
  if (req.requested_rank() < 0 || req.requested_rank() >= n) {
    return InvalidArgument(who + " re-registered as rank " + std::to_string(req.requested_rank()) +
                           ", outside [0, " + std::to_string(n) + ")");
  }
  if (req.session_id() == 0) return InvalidArgument(who + " re-registered without a session id");
  if (!recovering_ && !rendezvous_complete_) {
    return FailedPrecondition(who + " re-registered for session " + Hex(req.session_id()) +
                              ", but this coordinator was not started with --recover and knows "
                              "no running job");
  }
  if (session_id_ != 0 && req.session_id() != session_id_) {
    return FailedPrecondition(who + " re-registered for session " + Hex(req.session_id()) +
                              ", but this coordinator's job is session " + Hex(session_id_) +
                              ": a node of another job (or of an earlier run)");
  }
  if (role == proto::ROLE_SERVER && req.endpoint().empty()) {
    return InvalidArgument(who + " re-registered without the endpoint workers reach it at");
  }
  auto back = rejoined_.find({role, req.requested_rank()});
  if (recovering_ && back != rejoined_.end() && back->second != req.incarnation()) {
    return Status(StatusCode::kAlreadyExists,
                  who + " re-registered as " + RoleName(role) + " " +
                      std::to_string(req.requested_rank()) + " with incarnation " +
                      Hex(req.incarnation()) + ", but incarnation " + Hex(back->second) +
                      " already re-registered as that rank");
  }
  return Status::OK();
}

void JobState::OnRejoin(const ReplyAddress& from, const proto::RegisterRequest& req,
                        Clock::time_point now, Outbox* out) {
  Status st = CheckRejoin(req);
  if (st.ok() && recovering_) st = MergeTableSizes(req);
  if (!st.ok()) {
    OSPREY_LOG_WARN("re-registration refused: {}", st.message());
    out->push_back(OutgoingReply{from, st, Buffer()});
    return;
  }
  const proto::Role role = req.role();
  const int rank = req.requested_rank();
  Node& node = NodesOf(role)[rank];
  if (!recovering_) {
    // A node that only missed heartbeat replies: the coordinator never went away.
    Status error;
    if (FindNode(role, rank, &error) == nullptr) {
      out->push_back(OutgoingReply{from, error, Buffer()});
      return;
    }
    node.last_seen = now;
  } else {
    const bool repeat = rejoined_.count({role, rank}) > 0;
    if (session_id_ == 0) {
      session_id_ = req.session_id();
      OSPREY_LOG_INFO("recovering session {:x} (from {} {})", session_id_, RoleName(role), rank);
    }
    node.endpoint = req.endpoint();
    node.host = req.host();
    node.pid = req.pid();
    node.metrics_endpoint = req.metrics_endpoint();
    node.sends_report = role == proto::ROLE_SERVER && req.sends_server_report();
    node.alive = true;
    node.last_seen = now;
    node.clock = req.clock();
    node.loss = req.loss();
    node.samples = req.samples();
    rejoined_[{role, rank}] = req.incarnation();
    if (role == proto::ROLE_SERVER) shard_map_.set_server_endpoints(rank, req.endpoint());
    shard_map_.set_epoch(std::max<uint64_t>(shard_map_.epoch(), req.shard_epoch()));
    AdoptLastState(req.last_state());
    if (!repeat) {
      OSPREY_LOG_INFO("{} re-registered (incarnation {:x}, clock {}, epoch {}): {} of {} nodes "
                      "back", NodeName(role, rank, req.pid()), req.incarnation(), req.clock(),
                      req.shard_epoch(), rejoined_.size(),
                      cluster_.num_servers + cluster_.num_workers);
    }
  }
  proto::RegisterReply reply;
  reply.set_rank(rank);
  reply.set_num_servers(cluster_.num_servers);
  reply.set_num_workers(cluster_.num_workers);
  *reply.mutable_shard_map() = shard_map_;
  reply.set_session_id(session_id_);
  reply.set_local_rank(node.local_rank);
  reply.set_local_size(node.local_size);
  reply.set_recovered(recovering_ || rejoined_.count({role, rank}) > 0);
  if (shutting_down_) node.told = true;  // its next heartbeat says so
  out->push_back(OutgoingReply{from, Status::OK(), SerializeMessage(reply)});
  if (recovering_ && AllBack()) CompleteRecovery(now, out);
}

void JobState::AdoptLastState(const proto::ClusterState& state) {
  shard_map_.set_epoch(std::max<uint64_t>(shard_map_.epoch(), state.epoch()));
  for (const proto::NodeState& ns : state.nodes()) {
    if (ns.role() != proto::ROLE_SERVER && ns.role() != proto::ROLE_WORKER) continue;
    std::vector<Node>& nodes = NodesOf(ns.role());
    if (ns.rank() < 0 || ns.rank() >= static_cast<int>(nodes.size())) continue;
    if (rejoined_.count({ns.role(), ns.rank()}) > 0) continue;  // its own word counts
    Node& n = nodes[ns.rank()];
    if (!ns.alive()) n.alive = false;  // dead before the restart: not waited for
    if (ns.clock() >= n.clock) {
      n.clock = ns.clock();
      n.loss = ns.loss();
      n.samples = ns.samples();
    }
    if (n.endpoint.empty()) n.endpoint = ns.endpoint();
    if (n.metrics_endpoint.empty()) n.metrics_endpoint = ns.metrics_endpoint();
    if (ns.role() == proto::ROLE_SERVER &&
        shard_map_.server_endpoints(ns.rank()).empty()) {
      shard_map_.set_server_endpoints(ns.rank(), ns.endpoint());
    }
  }
  for (const proto::WorkerReport& r : state.reports()) {
    if (r.rank() < 0 || r.rank() >= static_cast<int>(workers_.size())) continue;
    reports_.emplace(r.rank(), r);  // one already known stays
    workers_[r.rank()].reported = true;
  }
  for (const proto::ServerReport& r : state.server_reports()) {
    if (r.rank() < 0 || r.rank() >= static_cast<int>(servers_.size())) continue;
    server_reports_.emplace(r.rank(), r);
    servers_[r.rank()].reported = true;
  }
}

bool JobState::AllBack() const {
  for (const std::vector<Node>* nodes : {&servers_, &workers_}) {
    for (const Node& n : *nodes) {
      if (n.alive && !n.reported && rejoined_.count({n.role, n.rank}) == 0) return false;
    }
  }
  return true;
}

void JobState::TickRecovery(Clock::time_point now, Outbox* out) {
  if (now - recover_start_ >= Ms(cluster_.heartbeat_timeout_ms)) CompleteRecovery(now, out);
}

void JobState::CompleteRecovery(Clock::time_point now, Outbox* out) {
  recovering_ = false;
  std::vector<Node*> missing;
  for (std::vector<Node>* nodes : {&servers_, &workers_}) {
    for (Node& n : *nodes) {
      n.last_seen = now;  // a fresh grace period: the outage was the coordinator's, not theirs
      if (n.alive && !n.reported && rejoined_.count({n.role, n.rank}) == 0) missing.push_back(&n);
    }
  }
  OSPREY_LOG_INFO("recovery of session {:x} complete after {} ms: {} nodes back, {} missing, "
                  "shard map epoch {}, {} worker reports known", session_id_,
                  std::chrono::duration_cast<Ms>(now - recover_start_).count(), rejoined_.size(),
                  missing.size(), shard_map_.epoch(), reports_.size());
  for (Node* n : missing) {
    OSPREY_LOG_WARN("{} {} did not re-register within {} ms of the coordinator's restart",
                    RoleName(n->role), n->rank, cluster_.heartbeat_timeout_ms);
    if (n->alive) MarkDead(*n, now, out);
  }
  ReleaseBarriers(out);
  CheckDone(now, out);
}

}  // namespace osprey::coordinator
