#include "coordinator/coordinator_client.h"

#include <algorithm>
#include <chrono>
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
  proto::RegisterReply reply;
  OSPREY_RETURN_IF_ERROR(rpc_->Call(proto::OP_REGISTER, &request, &reply, timeout_ms));
  return reply;
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
  if (options.on_lost) options.on_lost(why);
}

void CoordinatorClient::HeartbeatLoop(const HeartbeatOptions& options) {
  const Ms interval(options.interval_ms);
  const Ms timeout(options.timeout_ms);
  SteadyClock::time_point last_ok = SteadyClock::now();
  SteadyClock::time_point next = last_ok;
  while (true) {
    {
      MutexLock lock(&mu_);
      if (cv_.WaitUntil(&lock, next, [this]() REQUIRES(mu_) { return stopping_; })) return;
    }
    const SteadyClock::time_point now = SteadyClock::now();
    next = std::max(next + interval, now);
    const auto remaining = std::chrono::duration_cast<Ms>(last_ok + timeout - now);
    if (remaining.count() <= 0) {
      Lost(options, DeadlineExceeded("no heartbeat reply from the coordinator at " +
                                     rpc_->endpoint() + " for " +
                                     std::to_string(options.timeout_ms) + " ms"));
      return;
    }
    proto::Heartbeat hb = options.fill();
    proto::ClusterState state;
    Status st = rpc_->Call(proto::OP_HEARTBEAT, &hb, &state, static_cast<int>(remaining.count()));
    if (st.ok()) {
      last_ok = SteadyClock::now();
      if (options.on_state) options.on_state(state);
      continue;
    }
    // No answer yet (or the send failed): retried until the timeout runs out. A refusal is final.
    if (st.code() == StatusCode::kDeadlineExceeded || st.code() == StatusCode::kUnavailable) {
      continue;
    }
    Lost(options, st.WithContext("the coordinator refused a heartbeat"));
    return;
  }
}

}  // namespace osprey::coordinator
