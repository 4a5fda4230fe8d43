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
// window closes; pulls may be held until their clock is ready (bsp / ssp). The rules are in
// table_shard.h. A held pull is answered later, from whichever thread closed the window.
//
// Threading: requests are handled on the transport's I/O thread. All Store and TableShard work
// happens under work_mu_, so the Store is used by one thread at a time: the I/O thread, the timer
// thread (started by Activate only when a table has a merge_window_us) and callers of
// SetLiveWorkers (the heartbeat thread). Transport::Send is thread-safe. Listen, Activate,
// SetLiveWorkers, Stop and stats may be called from any thread.
#pragma once

#include <atomic>
#include <condition_variable>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "common/config/table_config.h"
#include "common/status.h"
#include "common/transport.h"
#include "proto/wire.h"
#include "server/codec_decode.h"
#include "server/store.h"
#include "server/table_shard.h"

namespace osprey::server {

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
  uint64_t pulls_held = 0;
  // staleness[0]: s = 0; [i]: s in [2^(i-1), 2^i); the last bucket also holds larger. One entry
  // per sparse row pushed (per-row staleness) and per dense push.
  std::vector<uint64_t> staleness;
};

class Server {
 public:
  Server(std::unique_ptr<Transport> transport, std::unique_ptr<Store> store);
  ~Server();

  // Binds `endpoint` and starts serving (holding requests until Activate). Returns the bound
  // endpoint. Errors from Transport::Listen/Start.
  StatusOr<std::string> Listen(const std::string& endpoint);

  // Creates the tables of `tables` (same order as map.tables()) for server `rank` of the map and
  // serves held requests. InvalidArgument when the map and the tables disagree.
  Status Activate(int rank, const proto::ShardMap& map,
                  const std::vector<config::TableConfig>& tables);

  // The ranks of the live workers (from the coordinator's ClusterState). bsp windows and ssp
  // bounds count only these, so a dead worker no longer holds the others. Until the first call
  // every worker that sent a request counts. Thread-safe; may be called before Activate.
  void SetLiveWorkers(std::vector<int> ranks);

  // Checkpoints (server/checkpoint.h). Call before Activate. With `checkpoint.dir` set the server
  // writes its file there every `every_steps` and every `every_seconds` (checked after each
  // push). every_steps: when the server holds a bsp table, at the bsp clocks D = k * every_steps
  // (a consistent cut: every server saves at done() == D of its bsp tables, which wait for the
  // save before closing clock D); otherwise every every_steps optimizer steps of the busiest
  // table. every_seconds is always a per-server snapshot.
  // OP_CHECKPOINT writes one on demand: with header clock 0 (or no bsp table) at once; with
  // header clock D > 0 and a bsp table, the reply (the file path) comes when the cut at D is
  // taken, or an error at once when this server already closed clock D (the caller picks a
  // later D). A cut whose clock is never reached (the job ended) is never answered.
  void SetCheckpointConfig(const config::CheckpointConfig& checkpoint);
  // Activate restores the checkpoint in `dir` (any server count) before serving anything; a bad
  // checkpoint makes Activate fail with nothing loaded. Logs "server R restored checkpoint DIR
  // (N files, clock C): versions [..]".
  void SetRestoreDir(const std::string& dir);
  // Writes this server's checkpoint file into `dir` now (a per-server snapshot, clock 0);
  // returns its path. Thread-safe.
  StatusOr<std::string> Checkpoint(const std::string& dir);
  // The versions each table started from (restored, else 0), by table id. After Activate.
  std::vector<uint64_t> restored_versions();

  // Stops the transport and the timer thread; held pulls are dropped unanswered.
  void Stop();

  ServerStatsSnapshot stats() const;
  int rank() const { return rank_; }
  // Compressed pushes decoded so far (frames, bytes, time); readable from any thread.
  const DecodeStats& decode_stats() const { return decode_stats_; }

 private:
  void OnMessage(Message&& msg);
  void Handle(Message&& msg);
  // Validates and executes one request; fills reply values. Errors become OP_ERROR replies. A pull
  // whose clock is not ready sets *held and gets no reply now. Called under work_mu_.
  Status Execute(const proto::Header& h, const Message& msg, proto::Header* reply, Buffer* values,
                 bool* held);
  // A sparse pull's codec asks for its rows as fp16 or bf16 (common/codec/row_cast.h):
  // InvalidArgument unless codec and value type name one of those and codec_count is the rows'
  // float count.
  Status ValidatePullCast(const proto::Header& h, const TableShard& t) const;
  Status ServePull(const proto::Header& h, const Message& msg, proto::Header* reply,
                   Buffer* values);
  Status ValidateKeys(const proto::Header& h, const Message& msg, const TableShard& t);
  // Closes due windows of `t` and answers the pulls that became ready. Called under work_mu_.
  void Release(TableShard* t);
  void TimerLoop();
  StatusOr<std::string> CheckpointLocked(const std::string& dir, int64_t clock = 0);
  // bsp cuts (see SetCheckpointConfig). Called under work_mu_.
  Status RequestCut(const proto::Header& h, PeerId peer, const std::string& dir);
  void ArmCut();
  bool CutReached(int64_t clock, bool periodic) const;
  void MaybeTakeCut();
  int64_t BspClock() const;
  // Activate's restore from restore_dir_ (if set) and the periodic-checkpoint counters.
  Status RestoreLocked(const proto::ShardMap& map);
  // Periodic checkpoints (every_steps / every_seconds). Called under work_mu_ after a push.
  void MaybeCheckpoint();
  void Reply(PeerId peer, const proto::Header& header, Buffer values);
  void ReplyError(PeerId peer, const proto::Header& request, const Status& status);

  std::unique_ptr<Transport> transport_;
  std::unique_ptr<Store> store_;

  std::mutex mu_;  // guards active_ and held_ (the hand-over between Listen and Activate)
  bool active_ = false;
  std::deque<Message> held_;

  // Written by Activate before active_ is set (under mu_), read-only afterwards on the I/O thread.
  int rank_ = -1;
  uint64_t epoch_ = 0;
  int num_servers_ = 0;

  // Every Store and TableShard call; see "Threading" above. Taken after mu_ when both are held.
  std::mutex work_mu_;
  std::vector<std::unique_ptr<TableShard>> tables_;  // GUARDED_BY(work_mu_) after Activate
  std::vector<int> live_;                            // GUARDED_BY(work_mu_)
  bool live_known_ = false;                          // GUARDED_BY(work_mu_)
  bool stopping_ = false;                            // GUARDED_BY(work_mu_)
  std::condition_variable timer_cv_;
  std::thread timer_;

  ServerCounters counters_;
  config::CheckpointConfig checkpoint_;                 // set before Activate
  std::string restore_dir_;                             // set before Activate
  std::vector<config::TableConfig> table_configs_;      // GUARDED_BY(work_mu_)
  uint64_t next_checkpoint_step_ = 0;                   // GUARDED_BY(work_mu_)
  struct CutWaiter {
    PeerId peer;
    proto::Header request;
    std::string dir;
  };
  struct Cut {
    bool periodic = false;
    std::vector<CutWaiter> waiters;
  };
  std::map<int64_t, Cut> cuts_;                         // GUARDED_BY(work_mu_), by clock
  bool has_bsp_ = false;                                // set by Activate
  std::vector<uint64_t> restored_versions_;             // GUARDED_BY(work_mu_)
  int64_t last_checkpoint_us_ = 0;                      // GUARDED_BY(work_mu_)
  std::atomic<uint64_t> requests_{0};
  std::atomic<uint64_t> bad_requests_{0};
  std::atomic<uint64_t> bytes_in_{0};
  std::atomic<uint64_t> bytes_out_{0};
  DecodeStats decode_stats_;
};

}  // namespace osprey::server
