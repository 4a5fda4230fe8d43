// CheckpointScheduler: decides when a server writes its checkpoint file (server/checkpoint.h), so
// the request handler only reports events (a push was handled, the live set changed, a worker
// asked for a cut) and the rules live here.
//
// Rules (config::CheckpointConfig, with `checkpoint.dir` set):
//   every_steps, when the server holds a bsp table: a consistent cut at the bsp clocks
//     D = k * every_steps: every bsp shard keeps the window of clock D open (SetCutClock) until
//     this server saved at done() == D of every active bsp table, then the cut is cleared, the
//     shards advance and the next cut is armed. A server whose bsp tables saw no request has its
//     initial state at any clock; a periodic cut still waits for training to start.
//   every_steps otherwise: every every_steps optimizer steps of the busiest table (counted from
//     the restored versions), checked after each push.
//   every_seconds (any mode): a per-server snapshot once that long passed, checked after each
//     push.
//   On demand (OP_CHECKPOINT, RequestCut): with a clock D > 0 and a bsp table, answered when the
//     cut at D is taken, or refused at once when this server already closed clock D. A cut whose
//     clock is never reached (the job ended) is never answered.
// A failed write is logged (periodic) or sent to the waiting requesters (on demand); training
// goes on either way.
//
// Ownership: borrows the server's tables and Replier; `write` writes one file (the server's
// CheckpointLocked). Thread-safety: none; every call is made under the server's work lock.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "common/config/table_config.h"
#include "common/status.h"
#include "server/replier.h"
#include "server/table_shard.h"

namespace osprey::server {

class CheckpointScheduler {
 public:
  // Writes this server's file into dir with header clock `clock` (0: a per-server snapshot).
  using Writer = std::function<StatusOr<std::string>(const std::string& dir, int64_t clock)>;

  CheckpointScheduler(Replier* replier, Writer write, int rank)
      : replier_(replier), write_(std::move(write)), rank_(rank) {}

  // Starts scheduling over `tables` (borrowed; their versions are the restored ones) at `now_us`.
  void Start(const config::CheckpointConfig& config,
             const std::vector<std::unique_ptr<TableShard>>* tables, int64_t now_us);

  // After a push was handled: takes due cuts, then a due periodic checkpoint.
  void AfterPush(int64_t now_us);
  // After the live set changed (windows may have closed): takes due cuts.
  void AfterLiveChange(int64_t now_us) { TakeDueCuts(now_us); }
  // OP_CHECKPOINT with clock h.clock() > 0 on a server with a bsp table: the reply goes to `peer`
  // once the cut is taken. FailedPrecondition (reply now) without a directory or when the clock
  // is already closed here.
  Status RequestCut(const proto::Header& h, PeerId peer, const std::string& dir, int64_t now_us);

  bool has_bsp() const { return has_bsp_; }
  // The bsp clocks closed here (the most of any bsp table; 0 without one).
  int64_t BspClock() const;

 private:
  struct Waiter {
    PeerId peer;
    proto::Header request;
    std::string dir;
  };
  struct Cut {
    bool periodic = false;
    std::vector<Waiter> waiters;
  };
  void ArmCut();
  bool CutReached(int64_t clock, bool periodic) const;
  void TakeDueCuts(int64_t now_us);
  // Writes the cut's files (one per directory), logs them, answers its waiters.
  void TakeCut(int64_t clock, const Cut& cut);
  void MaybeCheckpoint(int64_t now_us);

  Replier* const replier_;
  const Writer write_;
  const int rank_;
  config::CheckpointConfig config_;
  const std::vector<std::unique_ptr<TableShard>>* tables_ = nullptr;
  bool has_bsp_ = false;
  std::map<int64_t, Cut> cuts_;  // by clock
  uint64_t next_step_ = 0;
  int64_t last_us_ = 0;
};

}  // namespace osprey::server
