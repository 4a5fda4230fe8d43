// JobState: the coordinator's rules as a plain state machine -- rendezvous, heartbeats and failure
// detection, barriers, final reports, shutdown -- with no threads, no transport and no clock of
// its own (every call takes `now`), so tests can drive it deterministically.
//
// Each On*() call handles one request and appends the replies it causes to an Outbox: usually one
// reply to the caller, but completing the rendezvous answers every registered node and the last
// arrival at a barrier (or a death) answers every waiter. A request that is refused gets an error
// reply naming why; nothing here aborts.
//
// Rules (see also coordinator.h):
//  - Ranks: a node's requested_rank if >= 0, otherwise the free ranks in registration order,
//    assigned when the last node registers. Replies are held until then.
//  - A node is expected to heartbeat from the moment the rendezvous completes; one silent for
//    cluster.heartbeat_timeout_ms is marked dead (logged once). A dead server fails the job unless
//    a replacement registers within cluster.server_replace_timeout_ms (job_state_replace.cc). A dead
//    worker does not: the job goes on with the others, its barriers and the "every live worker
//    reported" rule stop waiting for it. A worker that has sent its final report may exit; it is
//    no longer expected to heartbeat and stays alive in the state.
//  - A worker registering after the rendezvous with its rank and a new incarnation takes the
//    rank over, dead or alive, and resumes at its clock (job_state_rejoin.cc has the rules).
//  - The job is over once it is shutting down (done, failed, or asked to) and every live node
//    that still runs has been told (got a reply with shutting_down) -- and every live server that
//    registered with sends_server_report has sent its ServerReport -- or a grace period of
//    heartbeat_timeout_ms has passed. A server that sent its report may exit; like a reported
//    worker it is no longer expected to heartbeat.
//
// Thread-safety: none; the Coordinator serializes every call under its mutex.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "common/buffer.h"
#include "common/config/cluster_config.h"
#include "common/status.h"
#include "common/transport.h"
#include "coordinator/scale_protocol.h"
#include "osprey.pb.h"

namespace osprey::coordinator {

using Clock = std::chrono::steady_clock;

// Where a reply goes: the requesting peer and the request id to echo.
struct ReplyAddress {
  PeerId peer = -1;
  uint64_t request_id = 0;
};

// One reply to send: status OK -> OP_REPLY carrying `payload` (a serialized reply message or
// empty); otherwise OP_ERROR.
struct OutgoingReply {
  ReplyAddress to;
  Status status;
  Buffer payload;
};
using Outbox = std::vector<OutgoingReply>;

class JobState {
 public:
  // `config` is copied (only the cluster section and the tables are used). `start` begins the
  // startup timeout.
  JobState(const config::PsConfig& config, uint64_t session_id, Clock::time_point start);

  void OnRegister(const ReplyAddress& from, const proto::RegisterRequest& req,
                  Clock::time_point now, Outbox* out);
  void OnHeartbeat(const ReplyAddress& from, const proto::Heartbeat& hb, Clock::time_point now,
                   Outbox* out);
  void OnBarrier(const ReplyAddress& from, const proto::BarrierRequest& req, Clock::time_point now,
                 Outbox* out);
  void OnReport(const ReplyAddress& from, const proto::WorkerReport& report,
                Clock::time_point now, Outbox* out);
  // OP_SERVER_REPORT: a server's final statistics; kept (a later one from the same rank replaces
  // it) and carried by Snapshot().server_reports. Errors: as a heartbeat's (unknown or dead rank,
  // rendezvous not complete).
  void OnServerReport(const ReplyAddress& from, const proto::ServerReport& report,
                      Clock::time_point now, Outbox* out);
  // OP_HOST_GROUP: local rank 0 of a host posts its NCCL unique id; every request of that host
  // (earlier or later) is answered with it. Errors: unknown rank, a local rank 0 without an id,
  // an id from another local rank, an id larger than 1024 bytes.
  void OnHostGroup(const ReplyAddress& from, const proto::HostGroupRequest& req, Outbox* out);
  // OP_SHUTDOWN: starts shutting down; a non-empty `reason` becomes the failure (unless the job
  // is already done). Replies OK to `from`.
  void OnShutdown(const ReplyAddress& from, const std::string& reason, Clock::time_point now,
                  Outbox* out);

  // Coordinator restart (#12, job_state_recover.cc): call right after construction for a
  // coordinator started with --recover. See "Recovery" in job_state_recover.cc for the rules.
  void BeginRecovery(Clock::time_point now);
  bool recovering() const { return recovering_; }
  // While recovering: the session and state a MetadataStore kept (metadata_store.h).
  void AdoptStoredMetadata(uint64_t session_id, const proto::ClusterState& state);
  uint64_t session_id() const { return session_id_; }

  // Applies the startup timeout and heartbeat timeouts; call every few tens of milliseconds.
  void Tick(Clock::time_point now, Outbox* out);

  // The state every heartbeat / OP_CLUSTER_STATE reply carries.
  proto::ClusterState Snapshot() const;

  bool rendezvous_complete() const { return rendezvous_complete_; }
  bool shutting_down() const { return shutting_down_; }
  // True when the job is over (see the rules above); then result() is final.
  bool over(Clock::time_point now) const;
  // OK for a job whose every live worker reported; Aborted naming the failure otherwise.
  Status result() const;

  // Seconds since each registered node's last heartbeat (the metrics' heartbeat lag); empty
  // before the rendezvous.
  struct HeartbeatAge {
    proto::Role role;
    int rank;
    bool alive;
    double seconds;
  };
  std::vector<HeartbeatAge> HeartbeatAges(Clock::time_point now) const;
  // Requests waiting at a barrier now, all barriers together.
  size_t barrier_waiters() const;
  // OP_SCALE (job_state_scale.cc; scale_protocol.h has the rules): SCALE_REQUEST (osprey scale;
  // answered when the step committed or was abandoned), SCALE_PAUSE (a drained worker; answered
  // with the map to go on with), SCALE_DONE (an old server moved its rows; answered at commit).
  void OnScale(const ReplyAddress& from, const proto::ScaleRequest& req, Clock::time_point now,
               Outbox* out);
  // The coordinator's own metrics URL, carried by every later Snapshot().
  void set_metrics_endpoint(std::string url) { metrics_endpoint_ = std::move(url); }

 private:
  struct Node {
    proto::Role role = proto::ROLE_UNSPECIFIED;
    int rank = -1;  // assigned at rendezvous
    int requested_rank = -1;
    std::string endpoint;
    std::string metrics_endpoint;
    std::string host;
    int pid = 0;
    ReplyAddress pending_register;
    bool alive = true;
    Clock::time_point last_seen;
    int64_t clock = 0;
    double loss = 0;
    uint64_t samples = 0;
    uint64_t heartbeats = 0;  // received; lets tests wait for a node's next reports
    std::string compression_warning;  // workers: from the latest heartbeat
    double step_seconds = 0;          // workers: Heartbeat.step_seconds (job_state_steptime.cc)
    double density = 0;               // workers: Heartbeat.density
    bool barrier_exempt = false;      // workers: Heartbeat.barrier_exempt (job_state_steptime.cc)
    bool reported = false;  // workers: WorkerReport; servers: ServerReport
    bool sends_report = false;  // servers: promised a ServerReport at registration
    bool told = false;  // got a reply carrying shutting_down (or its registration was refused)
    int local_rank = 0;  // workers: place among the workers of the same host (by rank)
    int local_size = 1;
    uint64_t incarnation = 0;  // RegisterRequest.incarnation of the process that holds the rank
    uint32_t rejoins = 0;      // workers: processes that took the rank over (job_state_rejoin.cc)
    Clock::time_point dead_since;
    uint32_t replacements = 0;
  };

  // Median of the live workers' step_seconds (> 0 only); 0 with fewer than two of them
  // (job_state_steptime.cc).
  double MedianStepSeconds() const;
  // ClusterState.barrier_clock: the smallest clock of the live workers holding the step barrier
  // when some live worker left it (Heartbeat.barrier_exempt); -1 when none did, or all did.
  int64_t BarrierClock() const;

  std::vector<Node>& NodesOf(proto::Role role);
  int CountOf(proto::Role role) const;
  // The registered node (role, rank) after the rendezvous, or null with *error set.
  Node* FindNode(proto::Role role, int rank, Status* error);
  Status CheckRegistration(const proto::RegisterRequest& req) const;
  Status MergeTableSizes(const proto::RegisterRequest& req);
  void CompleteRendezvous(Clock::time_point now, Outbox* out);
  void MarkDead(Node& node, Clock::time_point now, Outbox* out);
  void ReleaseBarriers(Outbox* out);
  void CheckDone(Clock::time_point now, Outbox* out);
  // Starts shutting down; `failure` empty means success (done) or a plain shutdown request.
  void BeginShutdown(const std::string& failure, Clock::time_point now, Outbox* out);
  std::string MissingNodes() const;
  // job_state_rejoin.cc: a worker registering after the rendezvous takes its rank over.
  void RejoinWorker(const ReplyAddress& from, const proto::RegisterRequest& req,
                    Clock::time_point now, Outbox* out);
  // job_state_rejoin.cc: refuses a heartbeat from a process a rejoin superseded.
  // Server failover (job_state_replace.cc): a registration after the rendezvous that replaces a
  // server rank's process (a new incarnation), the wait for one, and stale incarnations.
  bool IsServerReplacement(const proto::RegisterRequest& req) const;
  void OnReplaceServer(const ReplyAddress& from, const proto::RegisterRequest& req,
                       Clock::time_point now, Outbox* out);
  void OnServerDead(Node& node, const std::string& what, Clock::time_point now, Outbox* out);
  void FailUnreplacedServers(Clock::time_point now, Outbox* out);
  Status CheckIncarnation(const Node& node, uint64_t incarnation) const;
  // bsp rollback (job_state_rollback.cc).
  void BeginRollback(int replaced_rank);
  void OnRollbackAck(const Node& server, const proto::Heartbeat& hb, Clock::time_point now,
                     Outbox* out);
  void FillRollback(proto::ClusterState* s) const;
  // Recovery (job_state_recover.cc).
  void OnRejoin(const ReplyAddress& from, const proto::RegisterRequest& req, Clock::time_point now,
                Outbox* out);
  Status CheckRejoin(const proto::RegisterRequest& req) const;
  Status RecoveryGate(proto::Role role, int rank) const;
  void AdoptLastState(const proto::ClusterState& state);
  void TickRecovery(Clock::time_point now, Outbox* out);
  void CompleteRecovery(Clock::time_point now, Outbox* out);
  bool AllBack() const;
  // Elastic servers (job_state_scale.cc).
  void OnJoin(const ReplyAddress& from, const proto::RegisterRequest& req, Clock::time_point now,
              Outbox* out);
  void AdvanceScale(Clock::time_point now, Outbox* out);
  void BeginTransfer(Clock::time_point now, Outbox* out);
  void CommitScale(Clock::time_point now, Outbox* out);
  void AbandonScale(const std::string& why, Outbox* out);
  proto::ScaleStatus ScaleStatusProto() const;

  config::ClusterConfig cluster_;
  uint64_t session_id_;
  Clock::time_point start_;
  proto::ShardMap shard_map_;  // tables from the config; endpoints filled at rendezvous

  std::vector<Node> servers_;  // registration order; index == rank after rendezvous
  std::vector<Node> workers_;
  bool rendezvous_complete_ = false;
  std::string metrics_endpoint_;
  // (barrier name, role) -> rank -> waiting request
  std::map<std::pair<std::string, int>, std::map<int, ReplyAddress>> barriers_;
  std::map<int, proto::WorkerReport> reports_;  // by worker rank
  std::map<int, proto::ServerReport> server_reports_;  // by server rank
  // NCCL host groups: host -> the id its local rank 0 posted, and the requests waiting for it.
  std::map<std::string, std::string> host_ids_;
  std::map<std::string, std::vector<std::pair<ReplyAddress, int>>> host_waiting_;  // (address, rank)
  bool done_ = false;
  bool shutting_down_ = false;
  bool shutdown_requested_ = false;
  Clock::time_point shutdown_at_;
  std::string failure_;
  bool recovering_ = false;             // started with --recover, not every node back yet
  Clock::time_point recover_start_;
  std::map<std::pair<int, int>, uint64_t> rejoined_;  // (role, rank) -> incarnation, re-registered
  // Elastic servers: the step in progress, joining servers waiting for it, the held replies.
  ScaleProtocol scale_;
  std::vector<Node> joiners_;  // registration order; ranks assigned when their transfer begins
  ReplyAddress scale_requester_;
  std::map<int, ReplyAddress> scale_pauses_;  // worker rank -> its SCALE_PAUSE
  std::map<int, ReplyAddress> scale_done_;    // server rank -> its SCALE_DONE
  proto::ShardMap scale_target_;
  std::string scale_refusal_;
  struct Rollback {  // bsp rollback (job_state_rollback.cc)
    uint64_t generation = 0;
    bool clock_known = false;
    int64_t clock = 0;
    std::vector<bool> acked;  // by server rank, for this generation
    bool ready = false;
  };
  Rollback rollback_;  // ScaleRefusal(config): why this job cannot scale, if it cannot
};

// "worker 1 (pid 1234)": how logs and errors name a node.
std::string NodeName(proto::Role role, int rank, int pid);
// "server" / "worker" / "role 7".
std::string RoleName(proto::Role role);

}  // namespace osprey::coordinator
