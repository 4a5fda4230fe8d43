// Coordinator: the rendezvous and failure detector of one Osprey job (osprey-coordinator).
//
// Servers and workers talk to it through CoordinatorClient (coordinator_client.h):
//   OP_REGISTER       RegisterRequest -> RegisterReply, held until cluster.num_servers servers
//                     and cluster.num_workers workers have registered; then every node gets its
//                     rank, the counts, the shard map (epoch 1) and the session id. A registration
//                     beyond the counts or for a rank already taken is refused with OP_ERROR.
//                     Without a complete rendezvous within cluster.startup_timeout_ms the job
//                     fails, and the failure names who is missing.
//   OP_HEARTBEAT      Heartbeat -> ClusterState. A node silent for cluster.heartbeat_timeout_ms is
//                     marked dead (alive=false in every later ClusterState, logged once). A dead
//                     server fails the job; a dead worker does not (the others go on; servers drop
//                     it from their BSP counts by reading the state).
//   OP_BARRIER        BarrierRequest -> empty reply once every live node of that role arrived
//                     (a death can release it).
//   OP_REPORT         WorkerReport -> empty reply. When every live worker reported, the state says
//                     done and shutting_down; servers see it on their next heartbeat and exit.
//   OP_SERVER_REPORT  ServerReport -> empty reply: a server's final statistics, sent once it saw
//                     shutting_down; kept in ClusterState.server_reports (the launcher's report).
//   OP_CLUSTER_STATE  -> ClusterState; no registration needed (the launcher polls it).
//   OP_SHUTDOWN       optional values: a reason (UTF-8 text) -> empty reply; starts shutting down,
//                     the reason becomes the failure.
// Every request is authorized by the sender's role first (Authorize: refused ones are counted in
// refused(), logged once per op, answered with PermissionDenied). Every incoming message is
// validated; an unparsable header, a wrong protocol version, an unknown
// op or a bad body gets an OP_ERROR reply (request_id echoed when known), is counted in
// bad_requests(), and the coordinator keeps serving. The rules themselves live in JobState.
//
// Threads: the transport's I/O thread runs every handler (each is short: a state update under
// mu_); a timer thread started by Start() applies timeouts every few tens of ms. Public methods
// are thread-safe. Stop() (and the destructor) joins both.
#pragma once

#include <atomic>
#include <chrono>
#include <memory>
#include <string>
#include <thread>

#include "common/config/cluster_config.h"
#include "common/mutex.h"
#include "common/refusal_log.h"
#include "common/status.h"
#include "common/transport.h"
#include "coordinator/job_state.h"
#include "coordinator/metadata_store.h"
#include "osprey.pb.h"

namespace osprey::coordinator {

class Coordinator {
 public:
  // Takes ownership of `transport` (fresh: not started, no handler). `config` is copied.
  Coordinator(const config::PsConfig& config, std::unique_ptr<Transport> transport);
  ~Coordinator();
  Coordinator(const Coordinator&) = delete;
  Coordinator& operator=(const Coordinator&) = delete;

  // Before Start(): start as a restarted coordinator (osprey-coordinator --recover) that rebuilds
  // the running job from the nodes' re-registrations (JobState::BeginRecovery,
  // job_state_recover.cc) instead of waiting for a fresh rendezvous.
  void SetRecover(bool recover) EXCLUDES(mu_);
  // Before Start(): keep the job's metadata in `store` (saved by the timer thread when it
  // changed, at most every 100 ms); with SetRecover, Start() reads it back first.
  void SetMetadataStore(std::unique_ptr<MetadataStore> store);

  // Listens on `endpoint` (port 0: any free port), starts the transport and the timer thread,
  // and returns the bound endpoint. The startup timeout counts from here. Call once.
  StatusOr<std::string> Start(const std::string& endpoint);

  // Blocks until the job is over: done and the live servers told (or the grace period passed),
  // failed, or shut down. Returns OK only for a successful job, Aborted with the failure
  // otherwise. Returns at once (Aborted) when Stop() was called first.
  Status Wait();
  // Like Wait() but gives up after `timeout`: DeadlineExceeded when the job is not over yet.
  Status WaitFor(std::chrono::milliseconds timeout);

  // Stops the timer and the transport (pending requests get no reply). Idempotent.
  void Stop();

  // A snapshot of the state (what OP_CLUSTER_STATE returns).
  proto::ClusterState State() const;
  // Malformed or refused-at-the-door messages (not requests refused by the rules).
  uint64_t bad_requests() const { return bad_requests_.load(); }
  // Requests refused for the sender's role (see Authorize); also counted in bad_requests().
  uint64_t refused() const { return refusals_.total(); }
  // For the metrics (coordinator_metrics.h): seconds since each node's last heartbeat, and the
  // requests waiting at barriers now.
  std::vector<JobState::HeartbeatAge> HeartbeatAges() const EXCLUDES(mu_);
  size_t barrier_waiters() const EXCLUDES(mu_);
  // The coordinator's own metrics URL, carried by every later State() (the launcher prints it).
  void SetMetricsEndpoint(std::string url) EXCLUDES(mu_);

 private:
  void Handle(Message&& msg);
  // Validates the body of one request and applies it to state_; the replies go to *out.
  void Dispatch(const Message& msg, const proto::Header& header, Outbox* out);
  // Who may send what: OP_SHUTDOWN only the admin (launcher, tools) or coordinator role,
  // OP_CLUSTER_STATE any job key, the node ops (register, heartbeat, barrier, reports, host
  // group) servers and workers. Under security: curve a peer without a role may do nothing;
  // under none every peer is trusted. PermissionDenied naming the op and the role.
  Status Authorize(proto::Op op, PeerRole role) const;
  // OP_REGISTER: the role registered as must be the key's (server key: a server, worker key: a
  // worker). PermissionDenied otherwise.
  Status AuthorizeRegister(proto::Role claimed, PeerRole role) const;
  // False when `why` is OK; else counts, logs (once per op) and queues the error reply.
  bool Refused(const Message& msg, const ReplyAddress& from, proto::Op op, const Status& why,
               Outbox* out);
  void TimerLoop();
  // Saves `m` unless it is what was saved last (timer thread, without mu_).
  void SaveMetadata(const StoredMetadata& m);
  // Sends the replies; called without mu_ held.
  void Send(Outbox* out);
  void UpdateOverLocked() REQUIRES(mu_);

  const config::PsConfig config_;
  const std::unique_ptr<Transport> transport_;
  std::chrono::milliseconds tick_;

  mutable Mutex mu_;
  CondVar cv_;
  JobState state_ GUARDED_BY(mu_);
  bool over_ GUARDED_BY(mu_) = false;
  bool started_ GUARDED_BY(mu_) = false;
  bool stopped_ GUARDED_BY(mu_) = false;
  bool recover_ GUARDED_BY(mu_) = false;
  std::unique_ptr<MetadataStore> metadata_;  // set before Start(); then the timer thread's
  std::string saved_metadata_;                // the timer thread's: what was saved last

  std::atomic<uint64_t> bad_requests_{0};
  RefusalLog refusals_;  // logs the first refusal of each op
  std::thread timer_;
};

}  // namespace osprey::coordinator
