#include "coordinator/job_state.h"

#include <algorithm>
#include <map>

#include "common/logging.h"
#include "proto/wire.h"

namespace osprey::coordinator {
namespace {

using Ms = std::chrono::milliseconds;

void Reply(Outbox* out, const ReplyAddress& to, const google::protobuf::MessageLite& msg) {
  out->push_back(OutgoingReply{to, Status::OK(), SerializeMessage(msg)});
}
void ReplyEmpty(Outbox* out, const ReplyAddress& to) {
  out->push_back(OutgoingReply{to, Status::OK(), Buffer()});
}
void ReplyError(Outbox* out, const ReplyAddress& to, const Status& status) {
  out->push_back(OutgoingReply{to, status, Buffer()});
}

proto::TableType TableTypeOf(config::TableType type) {
  return type == config::TableType::kDense ? proto::TABLE_DENSE : proto::TABLE_SPARSE;
}

}  // namespace

std::string RoleName(proto::Role role) {
  switch (role) {
    case proto::ROLE_SERVER: return "server";
    case proto::ROLE_WORKER: return "worker";
    default: return "role " + std::to_string(static_cast<int>(role));
  }
}

std::string NodeName(proto::Role role, int rank, int pid) {
  return RoleName(role) + " " + std::to_string(rank) + " (pid " + std::to_string(pid) + ")";
}

JobState::JobState(const config::PsConfig& config, uint64_t session_id, Clock::time_point start)
    : cluster_(config.cluster), session_id_(session_id), start_(start) {
  scale_refusal_ = ScaleRefusal(config);
  for (size_t i = 0; i < config.tables.size(); ++i) {
    const config::TableConfig& t = config.tables[i];
    proto::TableSpec* spec = shard_map_.add_tables();
    spec->set_id(static_cast<uint32_t>(i));
    spec->set_name(t.name);
    spec->set_type(TableTypeOf(t.type));
    spec->set_dim(static_cast<uint32_t>(t.dim));
    spec->set_size(t.size);
    spec->set_chunk_floats(t.chunk_floats);
  }
}

std::vector<JobState::Node>& JobState::NodesOf(proto::Role role) {
  return role == proto::ROLE_SERVER ? servers_ : workers_;
}

int JobState::CountOf(proto::Role role) const {
  return role == proto::ROLE_SERVER ? cluster_.num_servers : cluster_.num_workers;
}

Status JobState::CheckRegistration(const proto::RegisterRequest& req) const {
  proto::Role role = req.role();
  if (role != proto::ROLE_SERVER && role != proto::ROLE_WORKER) {
    return InvalidArgument("register: role must be ROLE_SERVER or ROLE_WORKER, got " +
                           std::to_string(static_cast<int>(role)));
  }
  const std::string who = RoleName(role) + " (pid " + std::to_string(req.pid()) + " on host '" +
                          req.host() + "')";
  const std::vector<Node>& nodes = role == proto::ROLE_SERVER ? servers_ : workers_;
  const int n = CountOf(role);
  if (static_cast<int>(nodes.size()) >= n) {
    return ResourceExhausted("the job has " + std::to_string(n) + " " + RoleName(role) +
                             "(s) (cluster.num_" + RoleName(role) + "s) and all have registered; " +
                             "refusing another " + who);
  }
  if (req.requested_rank() < -1 || req.requested_rank() >= n) {
    return InvalidArgument(who + " requested rank " + std::to_string(req.requested_rank()) +
                           ", outside [0, " + std::to_string(n) + ") (or -1 for any)");
  }
  for (const Node& other : nodes) {
    if (req.requested_rank() >= 0 && other.requested_rank == req.requested_rank()) {
      return Status(StatusCode::kAlreadyExists, who + " requested " + RoleName(role) + " rank " +
                           std::to_string(req.requested_rank()) +
                           ", which pid " + std::to_string(other.pid) + " already holds");
    }
    if (req.pid() != 0 && other.pid == req.pid() && other.host == req.host()) {
      return Status(StatusCode::kAlreadyExists, who + " is already registered");
    }
  }
  if (role == proto::ROLE_SERVER && req.endpoint().empty()) {
    return InvalidArgument(who + " registered without the endpoint workers reach it at");
  }
  return Status::OK();
}

Status JobState::MergeTableSizes(const proto::RegisterRequest& req) {
  for (const proto::TableSpec& want : req.tables()) {
    auto it = std::find_if(shard_map_.mutable_tables()->begin(),
                           shard_map_.mutable_tables()->end(),
                           [&](const proto::TableSpec& t) { return t.name() == want.name(); });
    if (it == shard_map_.mutable_tables()->end()) {
      return InvalidArgument("register: table '" + want.name() +
                             "' is not defined in the job config");
    }
    if (it->type() != proto::TABLE_DENSE || want.size() == 0) continue;
    if (it->size() == 0) {
      it->set_size(want.size());
    } else if (it->size() != want.size()) {
      return InvalidArgument("register: dense table '" + want.name() + "' has " +
                             std::to_string(it->size()) + " floats but this worker needs " +
                             std::to_string(want.size()));
    }
  }
  return Status::OK();
}

void JobState::OnRegister(const ReplyAddress& from, const proto::RegisterRequest& req,
                          Clock::time_point now, Outbox* out) {
  if (req.rejoin() || recovering_) return OnRejoin(from, req, now, out);  // job_state_recover.cc
  if (shutting_down_) {
    ReplyError(out, from, Aborted("the job is shutting down: " + failure_));
    return;
  }
  if (req.joining()) return OnJoin(from, req, now, out);  // job_state_scale.cc
  if (rendezvous_complete_ && req.role() == proto::ROLE_WORKER) {
    RejoinWorker(from, req, now, out);  // job_state_rejoin.cc
    return;
  }
  if (IsServerReplacement(req)) {
    OnReplaceServer(from, req, now, out);  // job_state_replace.cc
    return;
  }
  if (rendezvous_complete_) {
    ReplyError(out, from, FailedPrecondition(
        "the rendezvous is already complete; refusing " + RoleName(req.role()) + " (pid " +
        std::to_string(req.pid()) + " on host '" + req.host() + "')"));
    return;
  }
  Status st = CheckRegistration(req);
  if (st.ok()) st = MergeTableSizes(req);
  if (!st.ok()) {
    OSPREY_LOG_WARN("registration refused: {}", st.message());
    ReplyError(out, from, st);
    return;
  }
  Node node;
  node.role = req.role();
  node.requested_rank = req.requested_rank();
  node.endpoint = req.endpoint();
  node.host = req.host();
  node.pid = req.pid();
  node.metrics_endpoint = req.metrics_endpoint();
  node.sends_report = req.role() == proto::ROLE_SERVER && req.sends_server_report();
  node.pending_register = from;
  node.incarnation = req.incarnation();
  std::vector<Node>& nodes = NodesOf(req.role());
  nodes.push_back(std::move(node));
  OSPREY_LOG_INFO("{} (pid {}, host '{}') registered: {}/{} {}s", RoleName(req.role()), req.pid(),
                  req.host(), nodes.size(), CountOf(req.role()), RoleName(req.role()));
  if (static_cast<int>(servers_.size()) == cluster_.num_servers &&
      static_cast<int>(workers_.size()) == cluster_.num_workers) {
    CompleteRendezvous(now, out);
  }
}

void JobState::CompleteRendezvous(Clock::time_point now, Outbox* out) {
  for (std::vector<Node>* nodes : {&servers_, &workers_}) {
    std::vector<bool> taken(nodes->size(), false);
    for (Node& n : *nodes) {
      if (n.requested_rank >= 0) taken[n.rank = n.requested_rank] = true;
    }
    size_t next = 0;
    for (Node& n : *nodes) {
      if (n.requested_rank >= 0) continue;
      while (taken[next]) ++next;
      n.rank = static_cast<int>(next);
      taken[next] = true;
    }
    std::sort(nodes->begin(), nodes->end(),
              [](const Node& a, const Node& b) { return a.rank < b.rank; });
  }
  for (const proto::TableSpec& t : shard_map_.tables()) {
    if (t.type() == proto::TABLE_DENSE && t.size() == 0) {
      BeginShutdown("dense table '" + t.name() +
                    "' has size 0 and no worker registered its size", now, out);
      return;
    }
  }
  shard_map_.set_epoch(1);
  shard_map_.set_placement_epoch(1);
  for (const Node& s : servers_) shard_map_.add_server_endpoints(s.endpoint);
  rendezvous_complete_ = true;
  proto::RegisterReply reply;
  reply.set_num_servers(cluster_.num_servers);
  reply.set_num_workers(cluster_.num_workers);
  *reply.mutable_shard_map() = shard_map_;
  reply.set_session_id(session_id_);
  // Host groups: the workers of each host, by rank.
  std::map<std::string, std::vector<Node*>> by_host;
  for (Node& w : workers_) by_host[w.host].push_back(&w);
  for (auto& [host, group] : by_host) {
    std::sort(group.begin(), group.end(), [](const Node* a, const Node* b) { return a->rank < b->rank; });
    for (size_t i = 0; i < group.size(); ++i) {
      group[i]->local_rank = static_cast<int>(i);
      group[i]->local_size = static_cast<int>(group.size());
    }
  }
  for (std::vector<Node>* nodes : {&servers_, &workers_}) {
    for (Node& n : *nodes) {
      n.last_seen = now;  // heartbeats are due from now on
      reply.set_rank(n.rank);
      reply.set_local_rank(n.local_rank);
      reply.set_local_size(n.local_size);
      Reply(out, n.pending_register, reply);
    }
  }
  OSPREY_LOG_INFO("rendezvous complete: {} servers, {} workers, session {:x}", servers_.size(),
                  workers_.size(), session_id_);
}

JobState::Node* JobState::FindNode(proto::Role role, int rank, Status* error) {
  if (role != proto::ROLE_SERVER && role != proto::ROLE_WORKER) {
    *error = InvalidArgument("unknown role " + std::to_string(static_cast<int>(role)));
    return nullptr;
  }
  if (!rendezvous_complete_) {
    *error = FailedPrecondition(RoleName(role) + " " + std::to_string(rank) +
                                ": the rendezvous has not completed; register first");
    return nullptr;
  }
  std::vector<Node>& nodes = NodesOf(role);
  if (rank < 0 || rank >= static_cast<int>(nodes.size())) {
    *error = NotFound("no " + RoleName(role) + " has rank " + std::to_string(rank) + " (the job has " +
                      std::to_string(nodes.size()) + ")");
    return nullptr;
  }
  Node& node = nodes[rank];
  if (Status gate = RecoveryGate(role, rank); !gate.ok()) {  // job_state_recover.cc
    *error = gate;
    return nullptr;
  }
  if (!node.alive) {
    *error = FailedPrecondition(NodeName(role, rank, node.pid) +
                                " was marked dead (no heartbeat for " +
                                std::to_string(cluster_.heartbeat_timeout_ms) +
                                " ms) and must exit");
    return nullptr;
  }
  return &node;
}

// A heartbeat (or report) from a process a later registration of its rank superseded: a replaced
// server, a worker restarted under the same rank. Incarnation 0 (an older binary) is not checked.
Status JobState::CheckIncarnation(const Node& node, uint64_t incarnation) const {
  if (incarnation == 0 || node.incarnation == 0 || incarnation == node.incarnation) return Status::OK();
  return FailedPrecondition(NodeName(node.role, node.rank, node.pid) + " has been replaced (incarnation " +
                            std::to_string(node.incarnation) + "); the heartbeat from incarnation " +
                            std::to_string(incarnation) + " comes from a superseded process, which must exit");
}

void JobState::OnHeartbeat(const ReplyAddress& from, const proto::Heartbeat& hb,
                           Clock::time_point now, Outbox* out) {
  Status error;
  Node* node = FindNode(hb.role(), hb.rank(), &error);
  if (node == nullptr) {
    ReplyError(out, from, error);
    return;
  }
  if (Status stale = CheckIncarnation(*node, hb.incarnation()); !stale.ok()) {
    ReplyError(out, from, stale);
    return;
  }
  node->last_seen = now;
  node->clock = hb.clock();
  node->loss = hb.loss();
  node->samples = hb.samples();
  node->compression_warning = hb.compression_warning();
  node->step_seconds = hb.step_seconds();
  node->density = hb.density();
  node->barrier_exempt = hb.barrier_exempt();
  ++node->heartbeats;
  if (hb.role() == proto::ROLE_SERVER) OnRollbackAck(*node, hb, now, out);
  if (shutting_down_) node->told = true;
  Reply(out, from, Snapshot());
}

void JobState::OnBarrier(const ReplyAddress& from, const proto::BarrierRequest& req,
                         Clock::time_point now, Outbox* out) {
  Status error;
  Node* node = FindNode(req.role(), req.rank(), &error);
  if (node == nullptr) {
    ReplyError(out, from, error);
    return;
  }
  if (req.name().empty()) {
    ReplyError(out, from, InvalidArgument("barrier: the name is empty"));
    return;
  }
  if (shutting_down_) {
    ReplyError(out, from, Aborted("barrier '" + req.name() + "': the job is shutting down"));
    return;
  }
  std::map<int, ReplyAddress>& waiters = barriers_[{req.name(), req.role()}];
  auto it = waiters.find(req.rank());
  // A re-sent arrival (same peer and request id, after a coordinator restart) is no newer one.
  if (it != waiters.end() &&
      (it->second.peer != from.peer || it->second.request_id != from.request_id)) {
    ReplyError(out, it->second, Aborted("barrier '" + req.name() +
                                        "': superseded by a newer arrival of the same rank"));
  }
  waiters[req.rank()] = from;
  ReleaseBarriers(out);
}

void JobState::ReleaseBarriers(Outbox* out) {
  if (recovering_) return;  // a node not back yet may be waiting too: it re-sends its arrival
  for (auto it = barriers_.begin(); it != barriers_.end();) {
    const std::vector<Node>& nodes = NodesOf(static_cast<proto::Role>(it->first.second));
    bool all_here = true;
    for (const Node& n : nodes) {
      // A dead node will never come; a worker that has reported may already have exited.
      if (n.alive && !n.reported && it->second.count(n.rank) == 0) all_here = false;
    }
    if (!all_here) {
      ++it;
      continue;
    }
    for (const auto& [rank, to] : it->second) ReplyEmpty(out, to);
    it = barriers_.erase(it);
  }
}

void JobState::OnReport(const ReplyAddress& from, const proto::WorkerReport& report,
                        Clock::time_point now, Outbox* out) {
  Status error;
  Node* node = FindNode(proto::ROLE_WORKER, report.rank(), &error);
  if (node == nullptr) {
    ReplyError(out, from, error);
    return;
  }
  node->last_seen = now;
  node->reported = true;
  reports_[report.rank()] = report;
  OSPREY_LOG_INFO("worker {} reported: {} steps, {} samples in {:.1f} s, loss {:.4f}",
                  report.rank(), report.steps(), report.samples(), report.train_seconds(),
                  report.final_loss());
  ReplyEmpty(out, from);
  ReleaseBarriers(out);
  CheckDone(now, out);
}

void JobState::OnServerReport(const ReplyAddress& from, const proto::ServerReport& report,
                              Clock::time_point now, Outbox* out) {
  Status error;
  Node* node = FindNode(proto::ROLE_SERVER, report.rank(), &error);
  if (node == nullptr) {
    ReplyError(out, from, error);
    return;
  }
  node->last_seen = now;
  node->reported = true;
  if (shutting_down_) node->told = true;
  server_reports_[report.rank()] = report;
  OSPREY_LOG_INFO("server {} reported: {} optimizer steps, {} pushes applied, {} pulls held",
                  report.rank(), report.stats().windows_applied(), report.stats().pushes_applied(),
                  report.stats().pulls_held());
  ReplyEmpty(out, from);
}

void JobState::OnHostGroup(const ReplyAddress& from, const proto::HostGroupRequest& req, Outbox* out) {
  Status error;
  Node* node = FindNode(proto::ROLE_WORKER, req.rank(), &error);
  if (node == nullptr) {
    ReplyError(out, from, error);
    return;
  }
  const std::string who = "host group of '" + node->host + "': worker " + std::to_string(req.rank()) +
                          " (local rank " + std::to_string(node->local_rank) + ")";
  if (req.nccl_id().size() > 1024) {
    ReplyError(out, from, InvalidArgument(who + " sent an id of " + std::to_string(req.nccl_id().size()) +
                                          " bytes (at most 1024)"));
    return;
  }
  if (node->local_rank == 0 && req.nccl_id().empty()) {
    ReplyError(out, from, InvalidArgument(who + " must send the NCCL unique id"));
    return;
  }
  if (node->local_rank != 0 && !req.nccl_id().empty()) {
    ReplyError(out, from, InvalidArgument(who + " sent an id; only local rank 0 does"));
    return;
  }
  auto reply_to = [&](const ReplyAddress& to, int rank, const std::string& id) {
    Node& n = workers_[rank];
    proto::HostGroupReply reply;
    reply.set_nccl_id(id);
    reply.set_local_rank(n.local_rank);
    reply.set_local_size(n.local_size);
    Reply(out, to, reply);
  };
  if (node->local_rank == 0) {
    host_ids_[node->host] = req.nccl_id();  // a restarted local rank 0 replaces it
    for (const auto& [to, rank] : host_waiting_[node->host]) reply_to(to, rank, req.nccl_id());
    host_waiting_.erase(node->host);
    reply_to(from, req.rank(), req.nccl_id());
    return;
  }
  auto id = host_ids_.find(node->host);
  if (id != host_ids_.end()) {
    reply_to(from, req.rank(), id->second);
  } else {
    host_waiting_[node->host].emplace_back(from, req.rank());
  }
}

void JobState::OnShutdown(const ReplyAddress& from, const std::string& reason,
                          Clock::time_point now, Outbox* out) {
  OSPREY_LOG_WARN("shutdown requested{}{}", reason.empty() ? "" : ": ", reason);
  shutdown_requested_ = true;
  BeginShutdown(done_ ? std::string() : reason, now, out);
  ReplyEmpty(out, from);
}

void JobState::Tick(Clock::time_point now, Outbox* out) {
  if (shutting_down_) return;  // after this, the grace period in over() bounds the wait
  if (recovering_) return TickRecovery(now, out);  // job_state_recover.cc
  if (!rendezvous_complete_) {
    if (now - start_ >= Ms(cluster_.startup_timeout_ms)) {
      BeginShutdown("the rendezvous did not complete within " +
                    std::to_string(cluster_.startup_timeout_ms) +
                    " ms (cluster.startup_timeout_ms): " + MissingNodes(), now, out);
    }
    return;
  }
  for (std::vector<Node>* nodes : {&servers_, &workers_}) {
    for (Node& n : *nodes) {
      if (!n.alive || n.reported) continue;
      if (now - n.last_seen > Ms(cluster_.heartbeat_timeout_ms)) MarkDead(n, now, out);
    }
  }
  FailUnreplacedServers(now, out);
  AdvanceScale(now, out);
}

void JobState::MarkDead(Node& node, Clock::time_point now, Outbox* out) {
  node.alive = false;
  std::string what = NodeName(node.role, node.rank, node.pid) + " sent no heartbeat for " +
                     std::to_string(cluster_.heartbeat_timeout_ms) + " ms";
  if (node.role == proto::ROLE_SERVER) {
    OnServerDead(node, what, now, out);
    return;
  }
  OSPREY_LOG_WARN("{}: marked dead; the job goes on with the other workers", what);
  ReleaseBarriers(out);
  CheckDone(now, out);
}

void JobState::CheckDone(Clock::time_point now, Outbox* out) {
  if (done_ || shutting_down_ || !rendezvous_complete_ || recovering_) return;
  int alive = 0;
  int pending = 0;
  for (const Node& n : workers_) {
    if (!n.alive) continue;
    ++alive;
    if (!n.reported) ++pending;
  }
  if (alive == 0) {
    BeginShutdown("every worker died before reporting", now, out);
    return;
  }
  if (pending > 0) return;
  done_ = true;
  OSPREY_LOG_INFO("every live worker reported ({} reports): the job is done", reports_.size());
  BeginShutdown(std::string(), now, out);
}

void JobState::BeginShutdown(const std::string& failure, Clock::time_point now, Outbox* out) {
  if (shutting_down_) {
    if (failure_.empty() && !done_) failure_ = failure;
    return;
  }
  shutting_down_ = true;
  shutdown_at_ = now;
  failure_ = failure;
  if (scale_.phase() != ScaleProtocol::Phase::kIdle) AbandonScale("the job is shutting down", out);
  if (!failure.empty()) OSPREY_LOG_ERROR("job failed: {}", failure);
  Status why = Aborted("the job is shutting down" + (failure.empty() ? "" : ": " + failure));
  if (!rendezvous_complete_) {
    for (std::vector<Node>* nodes : {&servers_, &workers_}) {
      for (Node& n : *nodes) {
        ReplyError(out, n.pending_register, why);
        n.told = true;
      }
    }
  }
  for (auto& [key, waiters] : barriers_) {
    for (const auto& [rank, to] : waiters) ReplyError(out, to, why);
  }
  barriers_.clear();
}

bool JobState::over(Clock::time_point now) const {
  if (!shutting_down_) return false;
  if (now - shutdown_at_ >= Ms(cluster_.heartbeat_timeout_ms)) return true;
  for (const std::vector<Node>* nodes : {&servers_, &workers_}) {
    for (const Node& n : *nodes) {
      if (n.alive && !n.told && !n.reported) return false;
    }
  }
  // Servers that promised their final statistics are waited for (within the grace period).
  for (const Node& n : servers_) {
    if (n.alive && n.sends_report && !n.reported) return false;
  }
  return true;
}

Status JobState::result() const {
  if (!failure_.empty()) return Aborted(failure_);
  if (done_) return Status::OK();
  if (shutdown_requested_) return Aborted("shut down on request before every worker reported");
  return Aborted("the job has not finished");
}

proto::ClusterState JobState::Snapshot() const {
  proto::ClusterState s;
  s.set_epoch(shard_map_.epoch());
  for (const std::vector<Node>* nodes : {&servers_, &workers_}) {
    for (const Node& n : *nodes) {
      proto::NodeState* ns = s.add_nodes();
      ns->set_role(n.role);
      ns->set_rank(rendezvous_complete_ ? n.rank : n.requested_rank);
      ns->set_alive(n.alive);
      ns->set_clock(n.clock);
      ns->set_loss(n.loss);
      ns->set_samples(n.samples);
      ns->set_heartbeats(n.heartbeats);
      ns->set_endpoint(n.endpoint);
      ns->set_metrics_endpoint(n.metrics_endpoint);
      ns->set_rejoins(n.rejoins);
      ns->set_incarnation(n.incarnation);
      ns->set_replacements(n.replacements);
      ns->set_compression_warning(n.compression_warning);
      ns->set_step_seconds(n.step_seconds);
      ns->set_density(n.density);
      ns->set_barrier_exempt(n.barrier_exempt);
    }
  }
  s.set_median_step_seconds(MedianStepSeconds());
  s.set_barrier_clock(BarrierClock());
  s.set_shutting_down(shutting_down_);
  for (const auto& [rank, report] : reports_) *s.add_reports() = report;
  for (const auto& [rank, report] : server_reports_) *s.add_server_reports() = report;
  s.set_done(done_);
  s.set_num_servers(cluster_.num_servers);
  s.set_num_workers(cluster_.num_workers);
  s.set_failure(failure_);
  s.set_metrics_endpoint(metrics_endpoint_);
  s.set_recovering(recovering_);
  *s.mutable_scale() = ScaleStatusProto();
  FillRollback(&s);
  return s;
}

std::string JobState::MissingNodes() const {
  std::string text = "missing " +
                     std::to_string(cluster_.num_servers - static_cast<int>(servers_.size())) +
                     " of " + std::to_string(cluster_.num_servers) + " servers and " +
                     std::to_string(cluster_.num_workers - static_cast<int>(workers_.size())) +
                     " of " + std::to_string(cluster_.num_workers) + " workers";
  std::string seen;
  for (const std::vector<Node>* nodes : {&servers_, &workers_}) {
    for (const Node& n : *nodes) {
      seen += (seen.empty() ? "" : ", ") + RoleName(n.role) + " pid " + std::to_string(n.pid) +
              " on '" + n.host + "'";
    }
  }
  return text + " (registered: " + (seen.empty() ? "none" : seen) + ")";
}

}  // namespace osprey::coordinator

namespace osprey::coordinator {

std::vector<JobState::HeartbeatAge> JobState::HeartbeatAges(Clock::time_point now) const {
  std::vector<HeartbeatAge> out;
  if (!rendezvous_complete_) return out;
  for (const std::vector<Node>* nodes : {&servers_, &workers_}) {
    for (const Node& n : *nodes) {
      out.push_back({n.role, n.rank, n.alive, std::chrono::duration<double>(now - n.last_seen).count()});
    }
  }
  return out;
}

size_t JobState::barrier_waiters() const {
  size_t n = 0;
  for (const auto& [key, waiting] : barriers_) n += waiting.size();
  return n;
}

}  // namespace osprey::coordinator
