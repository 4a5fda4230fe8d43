// Server: one osprey-server's request handling over a Transport and a Store.
//
// Lifecycle: Listen() binds and starts the transport (requests that arrive before Activate() are
// held, not refused, because workers may learn the shard map a moment before this server does);
// Activate() gives the server its rank and the shard map, creates the tables it owns, and serves
// the held requests; Stop() stops the transport.
//
// Every request is validated before anything is applied: header parse, protocol version, op,
// table id and type, shard-map epoch, frame sizes against the header's counts, key and chunk
// ownership, codec, finite gradients. A bad request gets an OP_ERROR reply naming the problem and
// is counted in stats().bad_requests; nothing of it is applied and the server keeps serving.
//
// Pushes are merged into per-table merge windows and applied as one optimizer step when the
// window closes; pulls may be held until their clock is ready (bsp / ssp). The rules, and what a
// pusher sees when a window's apply fails, are in table_shard.h. Each TableShard answers its own
// held pulls and held push acks through the Server's Replier side, from whichever thread closed
// the window. Checkpoints are scheduled by a CheckpointScheduler (checkpoint_scheduler.h).
//
// Threading: requests are handled on the transport's I/O thread. All Store and TableShard work
// happens under work_mu_, so the Store is used by one thread at a time: the I/O thread, the timer
// thread (started by Activate only when a table has a merge_window_us) and callers of
// SetLiveWorkers (the heartbeat thread). Transport::Send is thread-safe, so Reply may run on any
// of them. Every method may be called from any thread. Lock order: mu_ before work_mu_.
#pragma once

#include <atomic>
#include <deque>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "common/config/table_config.h"
#include "common/mutex.h"
#include "common/status.h"
#include "common/thread_annotations.h"
#include "common/transport.h"
#include "proto/wire.h"
#include "server/checkpoint.h"
#include "server/checkpoint_scheduler.h"
#include "server/server_metrics.h"
#include "server/codec_decode.h"
#include "common/refusal_log.h"
#include "server/op_auth.h"
#include "server/apply_pool.h"
#include "server/hold_budget.h"
#include "server/log_limiter.h"
#include "proto/applied_clocks_op.h"
#include "server/applied_clocks.h"
#include "server/push_dedup.h"
#include "server/migration/rows_digest.h"
#include "server/replier.h"
#include "server/store.h"
#include "server/table_shard.h"

namespace osprey::server {

namespace migration {
class RowSender;
}

struct ServerStatsSnapshot {
  uint64_t requests = 0;
  uint64_t bad_requests = 0;
  uint64_t bytes_in = 0;
  uint64_t bytes_out = 0;
  uint64_t pushes_applied = 0;   // pushes merged into applied windows
  uint64_t pushes_dropped = 0;   // drop_above (dense pushes; sparse pushes with every row dropped)
  uint64_t rows_dropped = 0;     // drop_above on sparse rows (per-row staleness)
  uint64_t dc_compensated = 0;   // DC-ASGD: rows / chunks compensated
  uint64_t dc_uncompensated = 0; // DC-ASGD: pushed with no remembered pull
  uint64_t rows_skipped = 0;     // non_finite skip_row
  uint64_t windows_applied = 0;  // optimizer steps
  uint64_t windows_split = 0;    // of them, spread over the apply threads (apply_pool.h)
  int apply_threads = 1;         // cluster.server_apply_threads
  uint64_t pulls_held = 0;
  // Feature admission / eviction (server/admission/row_lifecycle.h).
  uint64_t rows_admitted = 0;
  uint64_t gradients_not_admitted = 0;
  uint64_t rows_evicted_ttl = 0;
  uint64_t rows_evicted_cap = 0;
  uint64_t refused = 0;        // op_auth.h: a role that may not, a foreign checkpoint directory
  uint64_t auth_refused = 0;   // the transport's refused connections (CURVE)
  // Of bad_requests: headers that did not parse, and requests refused by a limit
  // (common/config/limits_config.h: frame size, key count, held requests).
  uint64_t bad_headers = 0;
  uint64_t limit_refusals = 0;
  uint64_t pushes_deduplicated = 0;  // re-sent pushes answered without applying (push_dedup.h)
  uint64_t held_bytes = 0;      // now: memory of the requests held unanswered (HoldBudget)
  uint64_t held_requests = 0;   // now: how many
  // staleness[0]: s = 0; [i]: s in [2^(i-1), 2^i); the last bucket also holds larger. One entry
  // per sparse row pushed (per-row staleness) and per dense push.
  std::vector<uint64_t> staleness;
};

class Server : private Replier {
 public:
  Server(std::unique_ptr<Transport> transport, std::unique_ptr<Store> store);
  ~Server() override;

  // What one peer may ask of this server (limits_config.h; defaults until called). Call before
  // Listen. The frame limit is checked here for every transport; a ZeroMQ transport should also
  // be made with TransportOptions::max_message_bytes = limits.max_frame_bytes, so that a larger
  // frame is never read into memory.
  void SetLimits(const config::LimitsConfig& limits);
  // The threads a merged window's apply may spread over (cluster.server_apply_threads, >= 1; the
  // serving thread is one of them). Call before Activate.
  void SetApplyThreads(int threads);

  // Binds `endpoint` and starts serving (holding requests until Activate). Returns the bound
  // endpoint. Errors from Transport::Listen/Start.
  StatusOr<std::string> Listen(const std::string& endpoint) EXCLUDES(mu_, work_mu_);

  // Creates the tables of `tables` (same order as map.tables()) for server `rank` of the map and
  // serves held requests. InvalidArgument when the map and the tables disagree.
  Status Activate(int rank, const proto::ShardMap& map,
                  const std::vector<config::TableConfig>& tables) EXCLUDES(mu_, work_mu_);

  // The ranks of the live workers that hold the step barrier, and of those that left it
  // (WorkersAtBarrier of the coordinator's ClusterState, barrier_workers.h). bsp windows and ssp
  // bounds count only `ranks`, so a dead worker, or one that left the barrier, no longer holds the
  // others; a bsp push of a closed clock from one in `left` is applied on arrival. Until the first
  // call every worker that sent a request counts. May be called before Activate.
  void SetLiveWorkers(std::vector<int> ranks, std::vector<int> left = {}) EXCLUDES(work_mu_);

  // Authorization (op_auth.h): with `required` (security: curve) a request whose sender has no
  // authenticated role is refused; either way control ops need the coordinator or admin role and
  // data ops the worker role when the sender has one. Call before Listen.
  void SetRolesRequired(bool required) { roles_required_.store(required); }

  // Checkpoints: the rules are CheckpointScheduler's (checkpoint_scheduler.h). Call before
  // Activate. OP_CHECKPOINT writes one on demand: with header clock 0 (or no bsp table) at once;
  // with header clock D > 0 and a bsp table, when the cut at D is taken. A request naming a
  // directory outside checkpoint.dir is refused (op_auth.h CheckCheckpointDir).
  void SetCheckpointConfig(const config::CheckpointConfig& checkpoint) EXCLUDES(work_mu_);
  // Activate restores the checkpoint in `dir` (any server count) before serving anything; a bad
  // checkpoint makes Activate fail with nothing loaded. Logs "server R restored checkpoint DIR
  // (N files, clock C): versions [..]".
  void SetRestoreDir(const std::string& dir) EXCLUDES(work_mu_);
  // This server replaces a rank's earlier process (server failover): its bsp tables resume at
  // the restored checkpoint's clock instead of 0 (the workers are already past it). Before Activate.
  void SetReplacement(bool replacement) EXCLUDES(work_mu_) {
    MutexLock work(&work_mu_);
    replacement_ = replacement;
  }
  // bsp rollback (server_rollback.cc; coordinator/job_state_rollback.cc). A replacement told
  // rollback generation G > 0 at registration (before Activate): Activate restores the newest
  // cut every server's checkpoint has (checkpoint_cut.h) from its own file, instead of every
  // file's newest, and refuses data requests of a generation < G (Aborted).
  void SetBspRollback(uint64_t generation) EXCLUDES(work_mu_);
  // Every other server, told G and the cut clock C by the coordinator: answers what it holds
  // with Aborted, drops every row, reloads its own file of cut C from checkpoint.dir, resumes
  // its bsp tables at C and refuses generations < G. Nothing when G was already rolled back.
  // Errors: no file of cut C (checkpoint_cut.h), the restore's.
  Status RollBack(uint64_t generation, int64_t clock) EXCLUDES(work_mu_);
  // The generation this server has rolled back for (0: none) and its cut clock; any thread.
  uint64_t rollback_acked() const { return rollback_acked_.load(); }
  int64_t rollback_cut_clock() const { return rollback_cut_.load(); }
  // Writes this server's checkpoint file into `dir` now (a per-server snapshot, clock 0);
  // returns its path.
  StatusOr<std::string> Checkpoint(const std::string& dir) EXCLUDES(work_mu_);
  // The versions each table started from (restored, else 0), by table id. After Activate.
  std::vector<uint64_t> restored_versions() EXCLUDES(work_mu_);
  // The highest version (optimizer steps applied, restored ones included) of any table.
  // Any thread, without the work lock (the heartbeat reads it while a push may hold that lock).
  uint64_t max_table_version() const { return max_version_.load(std::memory_order_relaxed); }
  // Requests received before Activate and not served yet (held).
  size_t num_early_requests() EXCLUDES(mu_);

  // Stops the transport and the timer thread; held pulls and acks are dropped unanswered.
  void Stop() EXCLUDES(work_mu_);

  ServerStatsSnapshot stats() const;
  // Metrics (server_metrics.h): with a registry, Activate resolves per-table handles and every
  // handled request and checkpoint is counted there. Call before Listen; `registry` must outlive
  // the server.
  void SetMetrics(metrics::Registry* registry) { metrics_registry_ = registry; }
  // (table name, rows of this server's shard) of every table; empty before Activate.
  std::vector<std::pair<std::string, uint64_t>> rows_per_table() const EXCLUDES(work_mu_);
  // The store's rows not yet durable (Store::unflushed_rows; write_back Redis store).
  uint64_t unflushed_rows() const EXCLUDES(work_mu_);
  int rank() const { return rank_.load(std::memory_order_acquire); }
  // Compressed pushes decoded so far (frames, bytes, time); readable from any thread.
  const DecodeStats& decode_stats() const { return decode_stats_; }
  const HoldBudget& hold_budget() const { return *budget_; }

  // Elastic servers (server/migration/server_reshard.cc; README "Adding and removing servers").
  // At a scale step, with no request in flight: switches this server to `target` (a later epoch,
  // any server count), sending every record it no longer owns (sparse rows, dense chunks, with
  // their optimizer state) through `sender` to its new owner, dropping them here once copied,
  // and taking ownership of the dense chunks it gains (filled by the OP_MIGRATE_ROWS they come
  // in); a store that reowns_rows() hands its sparse rows over where they lie instead (the new
  // owner is only told). Returns what moved. FailedPrecondition before Activate or for a target epoch not after
  // this one; Unimplemented for a table with admission / eviction or a store that cannot change
  // its dense chunks (nothing changed then); the sender's errors (the records were dropped here:
  // the job must then be restored from a checkpoint).
  struct ReshardResult {
    uint64_t records_sent = 0;    // every record that moved (sent or handed over)
    uint64_t records_handed = 0;  // of them: handed over in the store (Store::ReownRows)
    uint64_t records_kept = 0;
  };
  StatusOr<ReshardResult> Reshard(const proto::ShardMap& target, migration::RowSender* sender)
      EXCLUDES(work_mu_);
  // Count and checksum of every record this server holds (migration/rows_digest.h; also what
  // OP_ROWS_DIGEST answers). Errors: the store's.
  StatusOr<migration::RowsDigest> Digest() const EXCLUDES(work_mu_);
  // Store::FlushAll: at exit, so that the final digest counts every row (write_back).
  Status FlushStore() EXCLUDES(work_mu_);

 private:
  // A validated data request: its table and, for pushes, the values as fp32.
  struct DataRequest {
    TableShard* table = nullptr;
    bool is_pull = false;
    Buffer values;  // pushes: fp32 (a compressed push decoded)
  };

  static int64_t NowUs();  // the steady clock, for windows and checkpoint schedules
  void OnMessage(Message&& msg) EXCLUDES(mu_, work_mu_);
  void Handle(Message&& msg) EXCLUDES(work_mu_);
  // Validates and executes one request; fills reply values. Errors become OP_ERROR replies. A
  // request answered later (a held pull, a held push ack, a bsp cut) sets *answered_later.
  Status Execute(const proto::Header& h, const Message& msg, proto::Header* reply, Buffer* values,
                 bool* answered_later) REQUIRES(work_mu_);
  Status ExecuteStats(Buffer* values) REQUIRES(work_mu_);
  // OP_MIGRATE_ROWS / OP_ROWS_DIGEST (server/migration/server_reshard.cc).
  Status CheckReshard(const proto::ShardMap& target) const REQUIRES(work_mu_);
  Status ExecuteMigrate(const proto::Header& h, const Message& msg) REQUIRES(work_mu_);
  Status ExecuteDigest(Buffer* values) REQUIRES(work_mu_);
  Status ExecuteCheckpoint(const proto::Header& h, const Message& msg, proto::Header* reply,
                           Buffer* values, bool* answered_later) REQUIRES(work_mu_);
  Status ExecutePush(const proto::Header& h, const Message& msg, const DataRequest& r,
                     proto::Header* reply, bool* answered_later) REQUIRES(work_mu_);
  // Every check of a pull / push / init before anything is applied (server/request_checks.h).
  Status ValidateData(const proto::Header& h, const Message& msg, DataRequest* r)
      REQUIRES(work_mu_);
  // Closes due windows of `t` and answers what became answerable; logs a failed apply.
  void Release(TableShard* t) REQUIRES(work_mu_);
  void TimerLoop() EXCLUDES(work_mu_);
  StatusOr<std::string> CheckpointLocked(const std::string& dir, int64_t clock = 0)
      REQUIRES(work_mu_);
  // Activate's table creation, restore from restore_dir_ (if set) and checkpoint scheduling.
  Status CreateTables(const proto::ShardMap& map, const std::vector<config::TableConfig>& tables,
                      bool* timer) REQUIRES(work_mu_);
  Status RestoreLocked(const proto::ShardMap& map) REQUIRES(work_mu_);
  // bsp rollback (server_rollback.cc): loads this server's file of cut `clock` of `dir` (< 0: the
  // newest cut every server has) into the (empty) store; returns the clock.
  StatusOr<int64_t> RestoreCutLocked(const std::string& dir, int64_t clock, RestoreInfo* info)
      REQUIRES(work_mu_);
  Status CheckGeneration(const proto::Header& h) const REQUIRES(work_mu_);
  // Replier.
  void Reply(PeerId peer, const proto::Header& header, Buffer values) override;
  void ReplyError(PeerId peer, const proto::Header& request, const Status& status) override;
  // An error reply for a request refused by op_auth.h: counted in bad_requests and refused,
  // logged once per kind.
  void Refuse(const Message& msg, const proto::Header& request, const Status& why, Refusal kind);
  // What a bad request is, for the counters and the log limiter (one line per peer and kind per
  // second, with the count of the lines suppressed).
  enum class BadKind { kHeader = 0, kLimit = 1, kInvalid = 2 };
  void ReplyBad(PeerId peer, const proto::Header& request, const Status& status, BadKind kind)
      EXCLUDES(log_mu_);

  std::unique_ptr<Transport> transport_;
  config::LimitsConfig limits_;         // set before Listen, then read only
  std::unique_ptr<HoldBudget> budget_;  // from limits_
  std::unique_ptr<ApplyPool> apply_pool_;  // SetApplyThreads; null: one thread
  Mutex log_mu_;
  LogLimiter log_limiter_ GUARDED_BY(log_mu_);
  std::atomic<uint64_t> bad_headers_{0};
  std::atomic<uint64_t> limit_refusals_{0};
  const std::unique_ptr<Store> store_ PT_GUARDED_BY(work_mu_);

  Mutex mu_;  // the hand-over between Listen and Activate
  bool active_ GUARDED_BY(mu_) = false;
  std::deque<Message> held_ GUARDED_BY(mu_);

  // Every Store and TableShard call; see "Threading" above.
  mutable Mutex work_mu_;
  std::atomic<int> rank_{-1};  // written once by Activate
  uint64_t epoch_ GUARDED_BY(work_mu_) = 0;
  uint64_t placement_epoch_ GUARDED_BY(work_mu_) = 0;  // ShardMap.placement_epoch (0: epoch_)
  bool placement_known_ GUARDED_BY(work_mu_) = false;  // the map had a placement_epoch
  int num_servers_ GUARDED_BY(work_mu_) = 0;
  std::vector<std::unique_ptr<TableShard>> tables_ GUARDED_BY(work_mu_);
  std::vector<int> live_ GUARDED_BY(work_mu_);
  std::vector<int> left_ GUARDED_BY(work_mu_);  // left the barrier (SetLiveWorkers)
  Mutex live_mu_;  // SetLiveWorkers' check for an unchanged set, without work_mu_
  bool live_seen_ GUARDED_BY(live_mu_) = false;
  std::vector<int> live_seen_ranks_ GUARDED_BY(live_mu_);
  std::vector<int> live_seen_left_ GUARDED_BY(live_mu_);
  bool live_known_ GUARDED_BY(work_mu_) = false;
  bool stopping_ GUARDED_BY(work_mu_) = false;
  CondVar timer_cv_;
  std::thread timer_;

  ServerCounters counters_;
  PushDedup dedup_ GUARDED_BY(work_mu_);  // applied pushes by (worker, incarnation, request id)
  std::atomic<uint64_t> pushes_deduplicated_{0};
  // Highest clock taken per (table, worker rank): OP_APPLIED_CLOCKS (applied_clocks.h).
  AppliedClocks applied_ GUARDED_BY(work_mu_);
  std::atomic<uint64_t> max_version_{0};  // max_table_version(): updated by Release and restores
  config::CheckpointConfig checkpoint_ GUARDED_BY(work_mu_);
  std::string restore_dir_ GUARDED_BY(work_mu_);
  bool replacement_ GUARDED_BY(work_mu_) = false;
  uint64_t rollback_generation_ GUARDED_BY(work_mu_) = 0;  // refused below it
  std::atomic<uint64_t> rollback_acked_{0};
  std::atomic<int64_t> rollback_cut_{0};
  std::vector<config::TableConfig> table_configs_ GUARDED_BY(work_mu_);
  std::unique_ptr<CheckpointScheduler> scheduler_ GUARDED_BY(work_mu_);  // from Activate
  std::vector<uint64_t> restored_versions_ GUARDED_BY(work_mu_);
  std::atomic<uint64_t> requests_{0};
  std::atomic<uint64_t> bad_requests_{0};
  std::atomic<bool> roles_required_{false};
  RefusalLog refusals_;
  std::atomic<uint64_t> bytes_in_{0};
  std::atomic<uint64_t> bytes_out_{0};
  DecodeStats decode_stats_;
  metrics::Registry* metrics_registry_ = nullptr;  // set before Listen, then read only
  std::unique_ptr<ServerMetrics> metrics_ GUARDED_BY(work_mu_);  // from Activate, with a registry
};

}  // namespace osprey::server
