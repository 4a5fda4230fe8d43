#include "coordinator/coordinator_client.h"

#include <algorithm>
#include <chrono>
#include <random>
#include <utility>

#include "common/logging.h"

namespace osprey::coordinator {

using SteadyClock = std::chrono::steady_clock;
using Ms = std::chrono::milliseconds;

CoordinatorClient::CoordinatorClient(std::unique_ptr<RpcClient> rpc) : rpc_(std::move(rpc)) {}

CoordinatorClient::~CoordinatorClient() { Stop(); }

StatusOr<std::unique_ptr<CoordinatorClient>> CoordinatorClient::Create(
    std::unique_ptr<Transport> transport, const std::string& coordinator_endpoint) {
  OSPREY_ASSIGN_OR_RETURN(std::unique_ptr<RpcClient> rpc,
                          RpcClient::Create(std::move(transport), coordinator_endpoint));
  return std::unique_ptr<CoordinatorClient>(new CoordinatorClient(std::move(rpc)));
}

StatusOr<proto::RegisterReply> CoordinatorClient::Register(const proto::RegisterRequest& request,
                                                           int timeout_ms) {
  proto::RegisterRequest req = request;
  if (req.incarnation() == 0) {
    std::random_device rd;
    req.set_incarnation(((uint64_t{rd()} << 32) ^ rd()) | 1);
  }
  {
    MutexLock lock(&mu_);
    incarnation_ = req.incarnation();
  }
  proto::RegisterReply reply;
  OSPREY_RETURN_IF_ERROR(rpc_->Call(proto::OP_REGISTER, &req, &reply, timeout_ms));
  MutexLock lock(&mu_);
  registered_ = true;
  registration_ = std::move(req);
  registered_as_ = reply;
  return reply;
}

uint64_t CoordinatorClient::incarnation() const {
  MutexLock lock(&mu_);
  return incarnation_;
}

uint64_t CoordinatorClient::rejoins() const {
  MutexLock lock(&mu_);
  return rejoins_;
}

Status CoordinatorClient::Barrier(const std::string& name, proto::Role role, int rank,
                                  int timeout_ms) {
  proto::BarrierRequest request;
  request.set_name(name);
  request.set_role(role);
  request.set_rank(rank);
  return rpc_->Call(proto::OP_BARRIER, &request, nullptr, timeout_ms)
      .WithContext("barrier '" + name + "'");
}

Status CoordinatorClient::Report(const proto::WorkerReport& report, int timeout_ms) {
  return rpc_->Call(proto::OP_REPORT, &report, nullptr, timeout_ms);
}

Status CoordinatorClient::ReportServer(const proto::ServerReport& report, int timeout_ms) {
  return rpc_->Call(proto::OP_SERVER_REPORT, &report, nullptr, timeout_ms)
      .WithContext("server report");
}

StatusOr<proto::HostGroupReply> CoordinatorClient::HostGroup(int rank, const std::string& nccl_id, int timeout_ms) {
  proto::HostGroupRequest request;
  request.set_rank(rank);
  request.set_nccl_id(nccl_id);
  proto::HostGroupReply reply;
  OSPREY_RETURN_IF_ERROR(rpc_->Call(proto::OP_HOST_GROUP, &request, &reply, timeout_ms).WithContext("host group"));
  return reply;
}

StatusOr<proto::ScaleReply> CoordinatorClient::Scale(const proto::ScaleRequest& request, int timeout_ms) {
  proto::ScaleReply reply;
  OSPREY_RETURN_IF_ERROR(rpc_->Call(proto::OP_SCALE, &request, &reply, timeout_ms));
  return reply;
}

StatusOr<proto::ClusterState> CoordinatorClient::GetState(int timeout_ms) {
  proto::ClusterState state;
  OSPREY_RETURN_IF_ERROR(rpc_->Call(proto::OP_CLUSTER_STATE, nullptr, &state, timeout_ms));
  return state;
}

Status CoordinatorClient::RequestShutdown(const std::string& reason, int timeout_ms) {
  return rpc_->CallRaw(proto::OP_SHUTDOWN, reason, nullptr, timeout_ms);
}

Status CoordinatorClient::StartHeartbeats(HeartbeatOptions options) {
  if (!options.fill) return InvalidArgument("StartHeartbeats: no fill callback");
  if (options.interval_ms <= 0 || options.timeout_ms <= 0) {
    return InvalidArgument("StartHeartbeats: interval and timeout must be > 0, got " +
                           std::to_string(options.interval_ms) + " and " +
                           std::to_string(options.timeout_ms) + " ms");
  }
  MutexLock lock(&mu_);
  if (stopping_ || heartbeating_) {
    return FailedPrecondition("StartHeartbeats: already started or stopped");
  }
  heartbeating_ = true;
  heartbeat_thread_ = std::thread([this, o = std::move(options)] { HeartbeatLoop(o); });
  return Status::OK();
}

Status CoordinatorClient::StartHeartbeats(
    int interval_ms, std::function<proto::Heartbeat()> fill,
    std::function<void(const proto::ClusterState&)> on_state) {
  HeartbeatOptions options;
  options.interval_ms = interval_ms;
  options.timeout_ms = 10 * interval_ms;
  options.fill = std::move(fill);
  options.on_state = std::move(on_state);
  return StartHeartbeats(std::move(options));
}

Status CoordinatorClient::heartbeat_status() const {
  MutexLock lock(&mu_);
  return heartbeat_status_;
}

void CoordinatorClient::Stop() {
  {
    MutexLock lock(&mu_);
    stopping_ = true;
  }
  cv_.SignalAll();
  rpc_->Stop();  // wakes a heartbeat waiting for its reply
  if (heartbeat_thread_.joinable()) heartbeat_thread_.join();
}

void CoordinatorClient::Lost(const HeartbeatOptions& options, const Status& why) {
  {
    MutexLock lock(&mu_);
    if (stopping_) return;  // our own Stop() is not a lost coordinator
    heartbeat_status_ = why;
  }
  OSPREY_LOG_ERROR("lost the coordinator: {}", why.ToString());
  rpc_->FailPending(why);  // a barrier or report waiting for it gets the reason now
  if (options.on_lost) options.on_lost(why);
}

Status CoordinatorClient::Rejoin(const HeartbeatOptions& options,
                                 const proto::ClusterState& last_state, int timeout_ms) {
  proto::RegisterRequest req;
  {
    MutexLock lock(&mu_);
    req = registration_;
    req.set_requested_rank(registered_as_.rank());
    req.set_session_id(registered_as_.session_id());
    req.set_shard_epoch(std::max<uint64_t>(registered_as_.shard_map().epoch(), last_state.epoch()));
  }
  const proto::Heartbeat hb = options.fill();
  req.set_rejoin(true);
  req.set_clock(hb.clock());
  req.set_loss(hb.loss());
  req.set_samples(hb.samples());
  *req.mutable_last_state() = last_state;
  // Calls sent from here on reach the coordinator after this registration; the older ones may
  // have been lost with the old coordinator and are re-sent once it is accepted.
  const uint64_t generation = rpc_->NextGeneration();
  proto::RegisterReply reply;
  OSPREY_RETURN_IF_ERROR(rpc_->Call(proto::OP_REGISTER, &req, &reply, timeout_ms));
  size_t resent = 0;
  if (reply.recovered()) resent = rpc_->ResendPending(generation);
  {
    MutexLock lock(&mu_);
    ++rejoins_;
  }
  OSPREY_LOG_WARN("{} {} re-registered with the coordinator at {} ({}; session {:x}); {} waiting "
                  "request(s) re-sent", req.role() == proto::ROLE_SERVER ? "server" : "worker",
                  req.requested_rank(), rpc_->endpoint(),
                  reply.recovered() ? "a restarted coordinator" : "it had not restarted",
                  req.session_id(), resent);
  return Status::OK();
}

void CoordinatorClient::HeartbeatLoop(const HeartbeatOptions& options) {
  const Ms interval(options.interval_ms);
  const bool outages = options.outage_ms > 0;
  // Without outages: lost after timeout_ms of silence. With them: after outage_ms, and one call
  // waits at most max(2 intervals, 1 s), so a coordinator that died mid-call is noticed soon.
  const Ms budget(outages ? options.outage_ms : options.timeout_ms);
  const int attempt_cap = outages ? std::max(2 * options.interval_ms, 1000) : options.timeout_ms;
  bool can_rejoin = false;
  {
    MutexLock lock(&mu_);
    can_rejoin = outages && registered_;
  }
  rpc_->set_hold_unavailable(can_rejoin);
  proto::ClusterState last_state;
  bool rejoining = false;
  SteadyClock::time_point last_ok = SteadyClock::now();
  SteadyClock::time_point next = last_ok;
  while (true) {
    {
      MutexLock lock(&mu_);
      if (cv_.WaitUntil(&lock, next, [this]() REQUIRES(mu_) { return stopping_; })) return;
    }
    const SteadyClock::time_point now = SteadyClock::now();
    next = std::max(next + interval, now);
    const auto remaining = std::chrono::duration_cast<Ms>(last_ok + budget - now);
    if (remaining.count() <= 0) {
      Lost(options, DeadlineExceeded(
          "no reply from the coordinator at " + rpc_->endpoint() + " for " +
          std::to_string(budget.count()) + " ms" +
          (outages ? " (cluster.coordinator_outage_ms): it was not restarted (osprey-coordinator "
                     "--recover on the same endpoint) in time"
                   : "")));
      return;
    }
    const int attempt = static_cast<int>(std::min<int64_t>(remaining.count(), attempt_cap));
    if (rejoining) {
      Status st = Rejoin(options, last_state, attempt);
      if (st.ok()) {
        rejoining = false;
        last_ok = SteadyClock::now();
        next = last_ok;  // heartbeat at once
        continue;
      }
      if (st.code() == StatusCode::kDeadlineExceeded || st.code() == StatusCode::kUnavailable) {
        continue;
      }
      Lost(options, st.WithContext("the coordinator at " + rpc_->endpoint() +
                                   " refused this node's re-registration"));
      return;
    }
    proto::Heartbeat hb = options.fill();
    if (hb.incarnation() == 0) hb.set_incarnation(incarnation());
    proto::ClusterState state;
    Status st = rpc_->Call(proto::OP_HEARTBEAT, &hb, &state, attempt);
    if (st.ok()) {
      last_ok = SteadyClock::now();
      if (can_rejoin) last_state = state;
      if (options.on_state) options.on_state(state);
      continue;
    }
    // No answer yet (or the send failed): retried until the budget runs out. A refusal is final,
    // except that a node that can re-register asks once more that way: a coordinator restarted
    // without --recover (which refuses heartbeats before its rendezvous) then says so.
    const bool retry =
        st.code() == StatusCode::kDeadlineExceeded || st.code() == StatusCode::kUnavailable;
    if (can_rejoin) {
      OSPREY_LOG_WARN("the coordinator at {} {} ({}): going on, re-registering for up to {} ms",
                      rpc_->endpoint(), retry ? "does not answer" : "refused a heartbeat",
                      st.message(), budget.count());
      rejoining = true;
      next = SteadyClock::now();
      continue;
    }
    if (retry) continue;
    Lost(options, st.WithContext("the coordinator refused a heartbeat"));
    return;
  }
}

}  // namespace osprey::coordinator
