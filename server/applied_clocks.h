// AppliedClocks: per (table, worker rank), the highest clock of a push this server took (applied,
// merged into a window, or dropped for staleness), so a restarted worker can resume exactly where
// the servers are (OP_APPLIED_CLOCKS, worker/resume_plan.h) instead of where its last heartbeat
// was. A worker's pushes to one table of one server arrive in clock order with at most one step
// in flight (worker/trainer.cc waits a step's pushes before sending the next), so every clock at
// or below the mark was taken and every clock above it was not.
//
// Unlike PushDedup it is keyed by rank, not incarnation: the point is to carry over from a killed
// process to its restart. It lives as long as the server process: a replacement server starts
// empty (and says so: Encode's first word), so the worker falls back to its heartbeat clock there.
// Memory: one int64 per (table, worker rank) that pushed.
//
// Thread-safety: none; the server calls it under its work lock.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <utility>
#include <vector>

#include "common/buffer.h"

namespace osprey::server {

class AppliedClocks {
 public:
  static constexpr int64_t kNone = -1;

  // A push of `clock` from `worker` to `table` was taken.
  void Record(uint32_t table, int worker, int64_t clock);
  // The highest clock recorded for (table, worker); kNone when none.
  int64_t Of(uint32_t table, int worker) const;
  // The OP_APPLIED_CLOCKS reply values (proto/osprey.proto): (num_tables + 1) int64s, [0] =
  // `complete` (1 / 0), [1 + t] = Of(t, worker).
  Buffer Encode(int worker, size_t num_tables, bool complete) const;

 private:
  std::map<std::pair<uint32_t, int>, int64_t> high_;
};

}  // namespace osprey::server
