// ScaleProtocol: the rules of one scale step (osprey scale: add or remove servers while the job
// trains) as a plain state machine with no threads, no transport and no clock of its own (every
// call takes `now`), driven by JobState (job_state_scale.cc), which owns the replies.
//
// A step from `from` to `to` servers:
//   kJoining       growing: wait until to - from joining servers have registered (shrinking
//                  skips it). The ranks stay dense: new servers get ranks from .. to-1, and a
//                  shrink removes the highest ranks to .. from-1 (jump-hash placement moves only
//                  their keys).
//   kPausing       every live worker, told through its heartbeat's ClusterState, drains its
//                  requests at its next step boundary and reports the step it stopped before
//                  (OnPause). The meeting boundary C is the largest of the paused workers' steps
//                  and, for each worker still training, its heartbeat's step (the steps it has
//                  completed: it is in that step, or draining before it). A paused worker behind
//                  C is released to train up to C (run_to) and pauses again there: so a bsp
//                  worker blocked in a pull of step s, which waits for a paused worker's push of
//                  step s-1, is never stuck. When every live worker waits at C, nothing is in
//                  flight.
//   kTransferring  the new map (epoch + 1) is published; each old server (ranks 0 .. from-1)
//                  sends the records it no longer owns to their new owners and reports
//                  (OnServerDone). When all have: commit.
// The joining and pausing phases end with a failure after `timeout_ms` (the step is abandoned:
// the paused workers go on with the old map, nothing moved). The transfer has no timeout here:
// a server that dies during it fails the job through the heartbeat timeout.
//
// Thread-safety: none (JobState's caller serializes).
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "common/config/cluster_config.h"
#include "common/status.h"

namespace osprey::coordinator {

class ScaleProtocol {
 public:
  using Clock = std::chrono::steady_clock;
  enum class Phase { kIdle, kJoining, kPausing, kTransferring };

  // What Advance decided; JobState turns it into replies.
  struct Events {
    std::vector<int> run_to;      // workers released to train up to clock(), then pause again
    bool transfer_begins = false; // every live worker waits at clock(): publish the new map
    bool commit = false;          // every old server has moved its records: commit the map
    std::string failure;          // the step was abandoned (phase is kIdle again)
  };

  // Starts a step. FailedPrecondition when a step is in progress; InvalidArgument for `to` < 1
  // or `to` == `from`.
  Status Begin(int from, int to, int timeout_ms, Clock::time_point now);
  // A worker drained at the boundary before step `clock`. FailedPrecondition unless pausing.
  Status OnPause(int worker, int64_t clock, Clock::time_point now);
  // Old server `rank` has sent its `records`. FailedPrecondition unless transferring or for a
  // rank outside [0, from).
  Status OnServerDone(int rank, uint64_t records, Clock::time_point now);
  // Applies the rules above: `live_workers` are the workers expected to pause (alive, not yet
  // reported), each with the step of its last heartbeat; `joiners` the joining servers
  // registered so far. Call after every event and on a timer (heartbeats move the clocks).
  Events Advance(const std::map<int, int64_t>& live_workers, size_t joiners, Clock::time_point now);
  // Back to kIdle (after JobState committed the map or abandoned the step).
  void Reset();

  Phase phase() const { return phase_; }
  int from() const { return from_; }
  int to() const { return to_; }
  // kPausing with run_to set, kTransferring: the step boundary every worker pauses at.
  int64_t clock() const { return clock_; }
  // Workers waiting now (by rank: the step they stopped before).
  const std::map<int, int64_t>& paused() const { return paused_; }
  // After commit: the first worker to stand still at the final boundary (its last pause) -> new
  // map committed, and transfer begun -> commit.
  double pause_seconds() const;
  double transfer_seconds() const;
  uint64_t records_moved() const { return records_; }

 private:
  Phase phase_ = Phase::kIdle;
  int from_ = 0;
  int to_ = 0;
  int timeout_ms_ = 0;
  Clock::time_point begun_, first_pause_, transfer_begun_, committed_;
  bool any_pause_ = false;
  int64_t clock_ = 0;
  std::map<int, int64_t> paused_;
  std::map<int, Clock::time_point> paused_at_;  // when each paused worker's pause arrived
  std::set<int> done_;
  uint64_t records_ = 0;
};

// Why a job of `config` cannot scale (empty: it can): the Redis store (its rows are fenced per
// server rank, and re-owning them is not built yet) and tables with feature admission / eviction
// (their sketch and row ages are not moved).
std::string ScaleRefusal(const config::PsConfig& config);

// "idle" / "joining" / "pausing" / "transferring".
const char* ScalePhaseName(ScaleProtocol::Phase phase);

}  // namespace osprey::coordinator
