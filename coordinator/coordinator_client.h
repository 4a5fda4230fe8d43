// CoordinatorClient: what a server, a worker or the launcher embeds to talk to the coordinator.
//
// It owns a dialer Transport connected to the coordinator. Every call takes a timeout and returns
// DeadlineExceeded naming the op and the endpoint when no reply came, so a node never blocks on a
// coordinator that is gone. Error replies from the coordinator come back as their Status (a
// refused registration: ResourceExhausted / AlreadyExists / InvalidArgument / FailedPrecondition;
// a job that is shutting down: Aborted).
//
// Heartbeats run on the client's own thread: every interval it calls `fill` for the node's
// numbers, sends them, and hands the ClusterState reply to `on_state` (where a server learns
// which workers are dead and whether to shut down). When no heartbeat got a reply for
// `timeout_ms`, or the coordinator refused one (e.g. the node was marked dead), `on_lost` is
// called once with the reason and heartbeats stop; the node should then exit.
//
// Coordinator restart (#12), with `outage_ms` > 0 (cluster.coordinator_outage_ms): a heartbeat
// that gets no answer within max(2 intervals, 1 s) -- or an Unavailable one, from a restarted
// coordinator that does not know this node yet -- does not end anything: the node goes on, and
// every interval re-registers (RegisterRequest.rejoin: the role, rank, incarnation, endpoint and
// session id of its Register() call, its progress from `fill`, the last ClusterState it got).
// Once a coordinator accepts, heartbeats go on and the calls that were waiting (a barrier, a
// report) are re-sent with their request ids; until then an Unavailable reply does not end them.
// Only when nothing was answered for `outage_ms` is `on_lost` called (and every waiting call
// ends with that reason). A refused heartbeat makes the node re-register at once, and a refused
// re-registration (another session, a coordinator started without --recover, a node marked dead)
// is final at once. A live coordinator answers a needless re-registration as a no-op.
//
// Thread-safety: every method may be called from any thread, concurrently. The callbacks run on
// the heartbeat thread; they must not call Stop() (it joins that thread). Stop() and the
// destructor stop heartbeats, wake calls in flight (Unavailable) and join.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <thread>

#include "common/mutex.h"
#include "common/status.h"
#include "common/transport.h"
#include "coordinator/rpc_client.h"
#include "osprey.pb.h"

namespace osprey::coordinator {

struct HeartbeatOptions {
  int interval_ms = 500;   // cluster.heartbeat_interval_ms
  int timeout_ms = 5000;   // cluster.heartbeat_timeout_ms: silence after which the coordinator
                           // counts as gone
  std::function<proto::Heartbeat()> fill;                     // required
  std::function<void(const proto::ClusterState&)> on_state;   // optional
  std::function<void(const Status&)> on_lost;                 // optional; called at most once
  int outage_ms = 0;  // cluster.coordinator_outage_ms; 0: lost after timeout_ms, no re-registration
};

class CoordinatorClient {
 public:
  // Takes ownership of `transport` (fresh: not started, no handler) and connects it to
  // `coordinator_endpoint` ("tcp://127.0.0.1:7000", or an inproc endpoint in tests).
  static StatusOr<std::unique_ptr<CoordinatorClient>> Create(
      std::unique_ptr<Transport> transport, const std::string& coordinator_endpoint);
  ~CoordinatorClient();
  CoordinatorClient(const CoordinatorClient&) = delete;
  CoordinatorClient& operator=(const CoordinatorClient&) = delete;

  // Blocks until every node of the job registered (the reply carries this node's rank and the
  // shard map), the coordinator refuses, or `timeout_ms` passes.
  StatusOr<proto::RegisterReply> Register(const proto::RegisterRequest& request, int timeout_ms);
  // Blocks until every live node of `role` reached barrier `name`.
  Status Barrier(const std::string& name, proto::Role role, int rank, int timeout_ms);
  // Sends a worker's final report.
  Status Report(const proto::WorkerReport& report, int timeout_ms);
  // Sends a server's final statistics (OP_SERVER_REPORT). DeadlineExceeded when the coordinator
  // is gone; the server should then warn and exit anyway.
  Status ReportServer(const proto::ServerReport& report, int timeout_ms);
  // The NCCL host group exchange (OP_HOST_GROUP): local rank 0 passes the id it made, the others
  // pass "" and block until it arrives (or timeout_ms). Returns the id.
  StatusOr<proto::HostGroupReply> HostGroup(int rank, const std::string& nccl_id, int timeout_ms);
  // OP_SCALE (job_state.h OnScale): blocks until the coordinator answers (a SCALE_REQUEST when
  // its step committed or was abandoned; a SCALE_PAUSE when the worker may go on).
  StatusOr<proto::ScaleReply> Scale(const proto::ScaleRequest& request, int timeout_ms);
  // The coordinator's view of the job; needs no registration.
  StatusOr<proto::ClusterState> GetState(int timeout_ms);
  // Asks the coordinator to shut the job down; a non-empty `reason` marks the job failed.
  Status RequestShutdown(const std::string& reason, int timeout_ms);

  // Starts the heartbeat thread (see above). FailedPrecondition when already started or stopped,
  // InvalidArgument without `fill` or with a non-positive interval/timeout.
  Status StartHeartbeats(HeartbeatOptions options);
  // Short form: timeout = 10 x interval, no on_lost (poll heartbeat_status() instead).
  Status StartHeartbeats(int interval_ms, std::function<proto::Heartbeat()> fill,
                         std::function<void(const proto::ClusterState&)> on_state);
  // OK while heartbeats are answered (or not started); the reason once they were lost.
  Status heartbeat_status() const;

  void Stop();

  const std::string& endpoint() const { return rpc_->endpoint(); }
  // This process's incarnation: the request's to Register(), or a random one Register() chose.
  uint64_t incarnation() const EXCLUDES(mu_);
  // Re-registrations a coordinator accepted (see above).
  uint64_t rejoins() const EXCLUDES(mu_);

 private:
  explicit CoordinatorClient(std::unique_ptr<RpcClient> rpc);
  void HeartbeatLoop(const HeartbeatOptions& options);
  // Records the loss, ends the waiting calls and calls on_lost.
  void Lost(const HeartbeatOptions& options, const Status& why);
  // One re-registration attempt (see above); OK once a coordinator accepted it.
  Status Rejoin(const HeartbeatOptions& options, const proto::ClusterState& last_state,
                int timeout_ms) EXCLUDES(mu_);

  const std::unique_ptr<RpcClient> rpc_;

  mutable Mutex mu_;
  CondVar cv_;
  bool stopping_ GUARDED_BY(mu_) = false;
  bool heartbeating_ GUARDED_BY(mu_) = false;
  Status heartbeat_status_ GUARDED_BY(mu_);
  // What Register() sent and got back: a re-registration repeats it.
  bool registered_ GUARDED_BY(mu_) = false;
  proto::RegisterRequest registration_ GUARDED_BY(mu_);
  proto::RegisterReply registered_as_ GUARDED_BY(mu_);
  uint64_t incarnation_ GUARDED_BY(mu_) = 0;
  uint64_t rejoins_ GUARDED_BY(mu_) = 0;
  std::thread heartbeat_thread_;
};

}  // namespace osprey::coordinator
