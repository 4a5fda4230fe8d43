// ConsistencyPolicy: the rules of one consistency mode (bsp / ssp / async) for a TableShard: which
// window a push joins, when windows close, when a pull may be answered. One class per mode; the
// exact rules are documented in table_shard.h (and implemented here, nowhere else).
//
// ShardRules is the table's consistency and staleness settings in the server's own types: the one
// place that reads config::ConsistencyConfig (MakeShardRules), so mode strings are compared once
// per table, not per window.
//
// WorkerClocks is the per-shard progress of the workers and the live set (table_shard.h:
// "progress", "live").
//
// Thread-safety: none; owned by one TableShard, used under the server's work lock. Policies are
// immutable after Make.
#pragma once

#include <algorithm>
#include <cstdint>
#include <limits>
#include <memory>
#include <unordered_map>
#include <vector>

#include "common/config/table_config.h"

namespace osprey::server {

using config::ConsistencyMode;  // parsed at config load

struct ShardRules {
  ConsistencyMode mode = ConsistencyMode::kAsync;
  int64_t staleness_bound = 4;
  int64_t merge_window_us = 0;
  int merge_max_pushes = 1;
  bool reduce_mean = true;       // merge_reduce mean (else sum)
  bool lr_inverse = false;       // lr_scale inverse
  bool momentum_decay = false;
  float momentum = 0;            // the optimizer's momentum (momentum_decay reads it)
  float dc_lambda = 0;
  int64_t drop_above = -1;       // < 0: off
  bool skip_non_finite = false;  // non_finite skip_row (else reject)
};

// The table's rules from its config.
ShardRules MakeShardRules(const config::TableConfig& config);

// Progress of each worker at one shard, and which workers are live.
class WorkerClocks {
 public:
  static constexpr int64_t kNobody = std::numeric_limits<int64_t>::max();
  // progress[worker] = max(progress, clock).
  void Advance(int worker, int64_t clock);
  // Progress of the slowest live worker (a live worker never seen counts 0); kNobody when there
  // is none. Until SetLive, every worker seen is live.
  int64_t Slowest() const;
  // The live workers the barrier waits for, and those that left it (async_barrier).
  void SetLive(const std::vector<int>& ranks, const std::vector<int>& left = {});
  bool LeftBarrier(int worker) const { return std::find(left_.begin(), left_.end(), worker) != left_.end(); }
  bool any() const { return !progress_.empty(); }
  // bsp rollback: progress[worker] = min(progress, clock) for every worker.
  void RewindTo(int64_t clock) {
    for (auto& [worker, p] : progress_) p = std::min(p, clock);
  }

 private:
  std::unordered_map<int, int64_t> progress_;
  std::vector<int> live_;
  std::vector<int> left_;
  bool live_known_ = false;
};

class ConsistencyPolicy {
 public:
  static std::unique_ptr<ConsistencyPolicy> Make(const ShardRules& rules);
  virtual ~ConsistencyPolicy() = default;

  virtual ConsistencyMode mode() const = 0;
  // Whether pushes and pulls advance the workers' progress (bsp, ssp).
  virtual bool tracks_progress() const = 0;
  // Whether a push may be applied on arrival, without a merge window (ssp / async with
  // merge_max_pushes 1, when the push has no row to skip).
  virtual bool ApplyOnArrival(bool any_bad) const = 0;
  // The clock of the window a push of clock `clock` joins, `done` clocks being closed.
  virtual int64_t WindowClock(int64_t clock, int64_t done) const = 0;
  // Whether the windows are kept one per clock, closed in order (bsp), rather than one window
  // that is applied and reused (ssp, async).
  virtual bool windows_per_clock() const = 0;
  // Whether the oldest window (of clock `window_clock`, `pushes` pushes, the first at
  // `first_us`) closes now. `slowest` from WorkerClocks, `cut` the checkpoint cut clock.
  virtual bool WindowDue(int64_t window_clock, int pushes, int64_t first_us, int64_t now_us,
                         int64_t slowest, int64_t cut) const = 0;
  // bsp: the closed-clock count after closing what was due.
  virtual int64_t DoneAfter(int64_t done, int64_t slowest, int64_t cut) const { return done; }
  // Whether a pull of clock `clock` (> 0) arriving now may be answered at once.
  virtual bool PullReady(int64_t clock, int64_t done, int64_t slowest) const = 0;
  // Whether a held pull of clock `clock` may be answered now.
  virtual bool Release(int64_t clock, int64_t done, int64_t slowest) const = 0;
  // Whether the open window is applied before released pulls are answered (ssp).
  virtual bool ApplyBeforeRelease() const { return false; }
  // When the open window (pushes, first at first_us) must close for time; kNoDeadline: never.
  virtual int64_t Deadline(int pushes, int64_t first_us) const = 0;

  static constexpr int64_t kNoDeadline = std::numeric_limits<int64_t>::max();
};

}  // namespace osprey::server
