// JobState's part of a scale step (osprey scale): joining servers, OP_SCALE requests, and the
// replies ScaleProtocol's decisions cause. The rules are scale_protocol.h's; README "Adding and
// removing servers" tells the user's side.
#include <algorithm>

#include "common/logging.h"
#include "coordinator/job_state.h"
#include "proto/wire.h"

namespace osprey::coordinator {
namespace {

void ReplyScale(Outbox* out, const ReplyAddress& to, const proto::ScaleReply& reply) {
  out->push_back(OutgoingReply{to, Status::OK(), SerializeMessage(reply)});
}

}  // namespace

void JobState::OnJoin(const ReplyAddress& from, const proto::RegisterRequest& req,
                      Clock::time_point now, Outbox* out) {
  const std::string who = "joining server (pid " + std::to_string(req.pid()) + " on host '" +
                          req.host() + "')";
  Status st;
  if (shutting_down_) {
    st = Aborted("the job is shutting down: " + failure_);
  } else if (req.role() != proto::ROLE_SERVER) {
    st = InvalidArgument(who + ": only servers may join a running job");
  } else if (!rendezvous_complete_) {
    st = FailedPrecondition(who + ": the job has not started yet (start servers without --join "
                            "until the rendezvous is complete)");
  } else if (req.endpoint().empty()) {
    st = InvalidArgument(who + " registered without the endpoint workers reach it at");
  }
  if (!st.ok()) {
    OSPREY_LOG_WARN("registration refused: {}", st.message());
    out->push_back(OutgoingReply{from, st, Buffer()});
    return;
  }
  Node node;
  node.role = proto::ROLE_SERVER;
  node.endpoint = req.endpoint();
  node.host = req.host();
  node.pid = req.pid();
  node.metrics_endpoint = req.metrics_endpoint();
  node.sends_report = req.sends_server_report();
  node.pending_register = from;
  node.last_seen = now;
  joiners_.push_back(std::move(node));
  OSPREY_LOG_INFO("{} registered; {} joining server(s) wait for a scale step", who, joiners_.size());
  AdvanceScale(now, out);
}

void JobState::OnScale(const ReplyAddress& from, const proto::ScaleRequest& req,
                       Clock::time_point now, Outbox* out) {
  auto error = [&](const Status& s) { out->push_back(OutgoingReply{from, s, Buffer()}); };
  if (shutting_down_) return error(Aborted("scale: the job is shutting down"));
  if (!rendezvous_complete_) return error(FailedPrecondition("scale: the job has not started yet"));
  Status st;
  switch (req.kind()) {
    case proto::SCALE_REQUEST: {
      if (!scale_refusal_.empty()) return error(Unimplemented(scale_refusal_));
      st = scale_.Begin(static_cast<int>(servers_.size()), req.servers(), cluster_.startup_timeout_ms, now);
      if (!st.ok()) return error(st);
      scale_requester_ = from;
      OSPREY_LOG_INFO("scale: from {} to {} servers requested", servers_.size(), req.servers());
      break;
    }
    case proto::SCALE_PAUSE: {
      Node* node = FindNode(proto::ROLE_WORKER, req.rank(), &st);
      if (node == nullptr) return error(st);
      if (scale_.phase() != ScaleProtocol::Phase::kPausing) {
        // No step (or it was abandoned a moment ago): go on with the current map.
        proto::ScaleReply reply;
        *reply.mutable_shard_map() = shard_map_;
        return ReplyScale(out, from, reply);
      }
      st = scale_.OnPause(req.rank(), req.clock(), now);
      if (!st.ok()) return error(st);
      scale_pauses_[req.rank()] = from;
      break;
    }
    case proto::SCALE_DONE: {
      Node* node = FindNode(proto::ROLE_SERVER, req.rank(), &st);
      if (node == nullptr) return error(st);
      if (!req.error().empty()) {
        error(Aborted("scale: " + req.error()));
        BeginShutdown("scale: server " + std::to_string(req.rank()) + " could not move its rows: " +
                      req.error(), now, out);
        return;
      }
      st = scale_.OnServerDone(req.rank(), req.rows_sent(), now);
      if (!st.ok()) return error(st);
      scale_done_[req.rank()] = from;
      break;
    }
    default:
      return error(InvalidArgument("scale: unknown request kind " + std::to_string(req.kind())));
  }
  AdvanceScale(now, out);
}

void JobState::AdvanceScale(Clock::time_point now, Outbox* out) {
  if (scale_.phase() == ScaleProtocol::Phase::kIdle || shutting_down_) return;
  std::map<int, int64_t> live;  // rank -> the step of its last heartbeat
  for (const Node& w : workers_) {
    if (w.alive && !w.reported) live[w.rank] = w.clock;
  }
  ScaleProtocol::Events ev = scale_.Advance(live, joiners_.size(), now);
  if (!ev.failure.empty()) return AbandonScale(ev.failure, out);
  for (int w : ev.run_to) {
    proto::ScaleReply reply;
    *reply.mutable_shard_map() = shard_map_;
    reply.set_run_to_clock(scale_.clock());
    ReplyScale(out, scale_pauses_[w], reply);
    scale_pauses_.erase(w);
  }
  if (ev.transfer_begins) BeginTransfer(now, out);
  if (ev.commit) CommitScale(now, out);
}

void JobState::BeginTransfer(Clock::time_point now, Outbox* out) {
  const int to = scale_.to();
  scale_target_ = shard_map_;
  scale_target_.set_epoch(shard_map_.epoch() + 1);
  // Rows move at this epoch: requests routed with an older map are refused from now on (a server
  // replacement, by contrast, bumps the epoch and keeps the placement; job_state_replace.cc).
  scale_target_.set_placement_epoch(scale_target_.epoch());
  scale_target_.clear_server_endpoints();
  const int keep = std::min<int>(to, static_cast<int>(servers_.size()));
  for (int r = 0; r < keep; ++r) scale_target_.add_server_endpoints(servers_[r].endpoint);
  // Growing: the first joiners take the new ranks and learn the new map now, to receive rows.
  proto::RegisterReply reply;
  reply.set_num_servers(to);
  reply.set_num_workers(cluster_.num_workers);
  reply.set_session_id(session_id_);
  std::vector<Node> joining;
  for (int r = keep; r < to; ++r) {
    Node n = std::move(joiners_.front());
    joiners_.erase(joiners_.begin());
    n.rank = r;
    n.last_seen = now;  // heartbeats are due from now on
    scale_target_.add_server_endpoints(n.endpoint);
    joining.push_back(std::move(n));
  }
  *reply.mutable_shard_map() = scale_target_;
  for (Node& n : joining) {
    reply.set_rank(n.rank);
    out->push_back(OutgoingReply{n.pending_register, Status::OK(), SerializeMessage(reply)});
    servers_.push_back(std::move(n));
  }
  OSPREY_LOG_INFO("scale: every worker paused before step {}; servers move rows to epoch {} ({} servers)",
                  scale_.clock(), scale_target_.epoch(), to);
}

void JobState::CommitScale(Clock::time_point now, Outbox* out) {
  const int to = scale_.to();
  for (const auto& [rank, addr] : scale_done_) {
    proto::ScaleReply reply;
    *reply.mutable_shard_map() = scale_target_;
    reply.set_removed(rank >= to);
    ReplyScale(out, addr, reply);
  }
  if (static_cast<int>(servers_.size()) > to) servers_.resize(static_cast<size_t>(to));
  shard_map_ = scale_target_;
  cluster_.num_servers = to;
  for (const auto& [rank, addr] : scale_pauses_) {
    proto::ScaleReply reply;
    *reply.mutable_shard_map() = shard_map_;
    ReplyScale(out, addr, reply);
  }
  proto::ScaleReply result;
  *result.mutable_shard_map() = shard_map_;
  result.set_pause_seconds(scale_.pause_seconds());
  result.set_transfer_seconds(scale_.transfer_seconds());
  result.set_rows_moved(scale_.records_moved());
  result.set_clock(scale_.clock());
  ReplyScale(out, scale_requester_, result);
  OSPREY_LOG_INFO("scale: committed epoch {} with {} servers at step {}: {} records moved, paused "
                  "{:.3f} s (transfer {:.3f} s)", shard_map_.epoch(), to, scale_.clock(),
                  scale_.records_moved(), scale_.pause_seconds(), scale_.transfer_seconds());
  scale_pauses_.clear();
  scale_done_.clear();
  scale_.Reset();
}

void JobState::AbandonScale(const std::string& why, Outbox* out) {
  OSPREY_LOG_WARN("scale abandoned: {}", why);
  for (const auto& [rank, addr] : scale_pauses_) {
    proto::ScaleReply reply;
    *reply.mutable_shard_map() = shard_map_;
    ReplyScale(out, addr, reply);
  }
  out->push_back(OutgoingReply{scale_requester_, Aborted(why), Buffer()});
  scale_pauses_.clear();
  scale_done_.clear();
  scale_.Reset();
}

proto::ScaleStatus JobState::ScaleStatusProto() const {
  proto::ScaleStatus s;
  switch (scale_.phase()) {
    case ScaleProtocol::Phase::kIdle: s.set_phase(proto::SCALE_IDLE); break;
    case ScaleProtocol::Phase::kJoining: s.set_phase(proto::SCALE_JOINING); break;
    case ScaleProtocol::Phase::kPausing: s.set_phase(proto::SCALE_PAUSING); break;
    case ScaleProtocol::Phase::kTransferring:
      s.set_phase(proto::SCALE_TRANSFERRING);
      *s.mutable_target() = scale_target_;
      break;
  }
  s.set_from_servers(scale_.from());
  s.set_to_servers(scale_.to());
  return s;
}

}  // namespace osprey::coordinator
