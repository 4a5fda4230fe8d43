#include "coordinator/coordinator.h"

#include <algorithm>
#include <random>
#include <utility>

#include "common/logging.h"
#include "coordinator/control_message.h"
#include "proto/wire.h"

namespace osprey::coordinator {
namespace {

uint64_t NewSessionId() {
  std::random_device rd;
  return (uint64_t{rd()} << 32) ^ rd();
}

}  // namespace

Coordinator::Coordinator(const config::PsConfig& config, std::unique_ptr<Transport> transport)
    : config_(config),
      transport_(std::move(transport)),
      // Timeouts are checked at a tenth of the heartbeat interval, 5..100 ms.
      tick_(std::clamp(config.cluster.heartbeat_interval_ms / 10, 5, 100)),
      state_(config, /*session_id=*/0, Clock::now()) {}  // replaced by Start()

Coordinator::~Coordinator() { Stop(); }

StatusOr<std::string> Coordinator::Start(const std::string& endpoint) {
  {
    MutexLock lock(&mu_);
    if (started_) return FailedPrecondition("Coordinator::Start called twice");
    started_ = true;
    // The startup timeout counts from the moment the coordinator can be reached.
    state_ = JobState(config_, NewSessionId(), Clock::now());
    if (recover_) state_.BeginRecovery(Clock::now());
    if (recover_ && metadata_) {
      StatusOr<std::optional<StoredMetadata>> stored = metadata_->Load();
      if (!stored.ok()) {
        OSPREY_LOG_WARN("the job's stored metadata: {}; recovering from the nodes alone",
                        stored.status().ToString());
      } else if (stored->has_value()) {
        state_.AdoptStoredMetadata((*stored)->session_id, (*stored)->state);
      }
    }
  }
  transport_->SetHandler([this](Message&& msg) { Handle(std::move(msg)); });
  OSPREY_ASSIGN_OR_RETURN(std::string bound, transport_->Listen(endpoint));
  OSPREY_RETURN_IF_ERROR(transport_->Start());
  timer_ = std::thread([this] { TimerLoop(); });
  OSPREY_LOG_INFO("coordinator listening on {} (expecting {} servers, {} workers)", bound,
                  config_.cluster.num_servers, config_.cluster.num_workers);
  return bound;
}

void Coordinator::SetRecover(bool recover) {
  MutexLock lock(&mu_);
  recover_ = recover;
}

void Coordinator::SetMetadataStore(std::unique_ptr<MetadataStore> store) {
  metadata_ = std::move(store);
}

void Coordinator::Stop() {
  {
    MutexLock lock(&mu_);
    if (stopped_) return;
    stopped_ = true;
  }
  cv_.SignalAll();
  if (timer_.joinable()) timer_.join();
  transport_->Stop();
}

Status Coordinator::Wait() {
  MutexLock lock(&mu_);
  cv_.Wait(&lock, [this]() REQUIRES(mu_) { return over_ || stopped_; });
  if (!over_) return Aborted("the coordinator was stopped before the job was over");
  return state_.result();
}

Status Coordinator::WaitFor(std::chrono::milliseconds timeout) {
  MutexLock lock(&mu_);
  if (!cv_.WaitFor(&lock, timeout, [this]() REQUIRES(mu_) { return over_ || stopped_; })) {
    return DeadlineExceeded("the job is not over after " + std::to_string(timeout.count()) +
                            " ms");
  }
  if (!over_) return Aborted("the coordinator was stopped before the job was over");
  return state_.result();
}

proto::ClusterState Coordinator::State() const {
  MutexLock lock(&mu_);
  proto::ClusterState state = state_.Snapshot();
  state.set_coordinator_refused(refused());
  state.set_coordinator_bad_requests(bad_requests());
  return state;
}

std::vector<JobState::HeartbeatAge> Coordinator::HeartbeatAges() const {
  MutexLock lock(&mu_);
  return state_.HeartbeatAges(Clock::now());
}

size_t Coordinator::barrier_waiters() const {
  MutexLock lock(&mu_);
  return state_.barrier_waiters();
}

void Coordinator::SetMetricsEndpoint(std::string url) {
  MutexLock lock(&mu_);
  state_.set_metrics_endpoint(std::move(url));
}

void Coordinator::UpdateOverLocked() {
  if (!over_ && state_.over(Clock::now())) {
    over_ = true;
    cv_.SignalAll();
  }
}

void Coordinator::TimerLoop() {
  MutexLock lock(&mu_);
  Clock::time_point saved_at;
  while (!stopped_) {
    Outbox out;
    state_.Tick(Clock::now(), &out);
    UpdateOverLocked();
    if (!out.empty()) {
      lock.Unlock();
      Send(&out);
      lock.Lock();
    }
    if (metadata_ && !state_.recovering() && Clock::now() - saved_at >= std::chrono::milliseconds(100)) {
      StoredMetadata m{state_.session_id(), state_.Snapshot()};
      lock.Unlock();
      SaveMetadata(m);
      saved_at = Clock::now();
      lock.Lock();
    }
    cv_.WaitFor(&lock, tick_, [this]() REQUIRES(mu_) { return stopped_; });
  }
}

void Coordinator::SaveMetadata(const StoredMetadata& m) {
  // Heartbeat counters change every interval and mean nothing to a restarted coordinator.
  proto::ClusterState state = m.state;
  for (proto::NodeState& n : *state.mutable_nodes()) n.clear_heartbeats();
  std::string key = std::to_string(m.session_id) + state.SerializeAsString();
  if (key == saved_metadata_) return;
  Status st = metadata_->Save(StoredMetadata{m.session_id, std::move(state)});
  if (!st.ok()) {
    OSPREY_LOG_WARN("saving the job's metadata: {}", st.ToString());
    return;
  }
  saved_metadata_ = std::move(key);
}

void Coordinator::Send(Outbox* out) {
  for (OutgoingReply& r : *out) {
    Message msg = r.status.ok() ? MakeReply(r.to.peer, r.to.request_id, std::move(r.payload))
                                : MakeErrorReply(r.to.peer, r.to.request_id, r.status);
    Status st = transport_->Send(std::move(msg));
    // A peer that went away cannot be answered; that is not the coordinator's failure.
    if (!st.ok()) OSPREY_LOG_DEBUG("reply to peer {} not sent: {}", r.to.peer, st.ToString());
  }
}

void Coordinator::Handle(Message&& msg) {
  proto::Header header;
  Outbox out;
  Status st = ParseRequestHeader(msg, &header).WithContext("message from peer " +
                                                            std::to_string(msg.peer));
  if (!st.ok()) {
    bad_requests_.fetch_add(1);
    OSPREY_LOG_WARN("bad request: {}", st.message());
    out.push_back(OutgoingReply{{msg.peer, header.request_id()}, st, Buffer()});
  } else {
    Dispatch(msg, header, &out);
  }
  Send(&out);
}

Status Coordinator::Authorize(proto::Op op, PeerRole role) const {
  if (role == PeerRole::kUnauthenticated) {
    if (config_.security.mode == config::SecurityMode::kNone) return Status::OK();
    return PermissionDenied(OpName(op) + " from an unauthenticated peer");
  }
  bool ok = true;
  switch (op) {
    case proto::OP_SHUTDOWN: ok = role == PeerRole::kAdmin || role == PeerRole::kCoordinator; break;
    case proto::OP_CLUSTER_STATE: break;
    case proto::OP_SCALE: ok = role == PeerRole::kAdmin; break;  // osprey scale dials as admin
    default: ok = role == PeerRole::kServer || role == PeerRole::kWorker; break;
  }
  if (ok) return Status::OK();
  return PermissionDenied(OpName(op) + " from role '" + PeerRoleName(role) +
                          "' is not allowed (" +
                          (op == proto::OP_SHUTDOWN ? "only the launcher / admin may"
                           : op == proto::OP_SCALE  ? "only the admin key (osprey scale) may"
                                                    : "only servers and workers may") + ")");
}

// A worker's key must not take a server's place in the shard map, nor the other way round.
Status Coordinator::AuthorizeRegister(proto::Role claimed, PeerRole role) const {
  if (role == PeerRole::kUnauthenticated) return Status::OK();  // Authorize has decided
  if ((claimed == proto::ROLE_SERVER) == (role == PeerRole::kServer)) return Status::OK();
  return PermissionDenied(std::string("OP_REGISTER as a ") +
                          (claimed == proto::ROLE_SERVER ? "server" : "worker") + " from role '" +
                          PeerRoleName(role) + "'");
}

bool Coordinator::Refused(const Message& msg, const ReplyAddress& from, proto::Op op,
                          const Status& why, Outbox* out) {
  if (why.ok()) return false;
  bad_requests_.fetch_add(1);
  // One log line per refused op (the kinds of RefusalLog), however many arrive.
  refusals_.Record(static_cast<unsigned>(op) & 31, msg.peer, msg.peer_role, why);
  out->push_back(OutgoingReply{from, why, Buffer()});
  return true;
}

void Coordinator::Dispatch(const Message& msg, const proto::Header& header, Outbox* out) {
  const ReplyAddress from{msg.peer, header.request_id()};
  const proto::Op op = header.op();
  if (Refused(msg, from, op, Authorize(op, msg.peer_role), out)) return;
  proto::RegisterRequest reg;
  proto::Heartbeat hb;
  proto::BarrierRequest barrier;
  proto::WorkerReport report;
  proto::HostGroupRequest host_group;
  proto::ServerReport server_report;
  proto::ScaleRequest scale;
  google::protobuf::MessageLite* body = nullptr;
  Status valid;
  switch (op) {
    case proto::OP_REGISTER: body = &reg; break;
    case proto::OP_HEARTBEAT: body = &hb; break;
    case proto::OP_BARRIER: body = &barrier; break;
    case proto::OP_REPORT: body = &report; break;
    case proto::OP_HOST_GROUP: body = &host_group; break;
    case proto::OP_SERVER_REPORT: body = &server_report; break;
    case proto::OP_SCALE: body = &scale; break;
    case proto::OP_CLUSTER_STATE:
    case proto::OP_SHUTDOWN: break;
    default: valid = Unimplemented("the coordinator does not serve " + OpName(op));
  }
  if (valid.ok()) valid = body != nullptr ? ParseBody(msg, op, body) : CheckNoKeys(msg, op);
  if (valid.ok() && op == proto::OP_REGISTER &&
      Refused(msg, from, op, AuthorizeRegister(reg.role(), msg.peer_role), out)) {
    return;
  }
  if (!valid.ok()) {
    bad_requests_.fetch_add(1);
    OSPREY_LOG_WARN("bad request from peer {}: {}", msg.peer, valid.message());
    out->push_back(OutgoingReply{from, valid, Buffer()});
    return;
  }
  const Clock::time_point now = Clock::now();
  MutexLock lock(&mu_);
  switch (op) {
    case proto::OP_REGISTER: state_.OnRegister(from, reg, now, out); break;
    case proto::OP_HEARTBEAT: state_.OnHeartbeat(from, hb, now, out); break;
    case proto::OP_BARRIER: state_.OnBarrier(from, barrier, now, out); break;
    case proto::OP_REPORT: state_.OnReport(from, report, now, out); break;
    case proto::OP_HOST_GROUP: state_.OnHostGroup(from, host_group, out); break;
    case proto::OP_SERVER_REPORT: state_.OnServerReport(from, server_report, now, out); break;
    case proto::OP_SCALE: state_.OnScale(from, scale, now, out); break;
    case proto::OP_CLUSTER_STATE:
      out->push_back(OutgoingReply{from, Status::OK(), SerializeMessage(state_.Snapshot())});
      break;
    case proto::OP_SHUTDOWN: {
      // The reason travels as plain text; a runaway one is cut, not refused.
      std::string reason(reinterpret_cast<const char*>(msg.values.data()),
                         std::min<size_t>(msg.values.size(), 4096));
      state_.OnShutdown(from, reason, now, out);
      break;
    }
    default: break;
  }
  UpdateOverLocked();
}

}  // namespace osprey::coordinator
