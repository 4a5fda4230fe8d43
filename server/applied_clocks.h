// AppliedClocks: per (table, worker rank), the highest clock of a push this server took (applied,
// merged into a window, or dropped for staleness), so a restarted worker can resume exactly where
// the servers are (OP_APPLIED_CLOCKS, worker/resume_plan.h) instead of where its last heartbeat
// was. A worker's pushes to one table of one server arrive in clock order with at most one step
// in flight (worker/trainer.cc waits a step's pushes before sending the next), so every clock at
// or below the mark was taken and every clock above it was not.
//
// Unlike PushDedup it is keyed by rank, not incarnation: the point is to carry over from a killed
// process to its restart.
//
// Fence: the answer must stay true after it is given, yet a push of the killed process may still
// sit in this server's queue when its restart asks. So asking (Fence) bars every other
// incarnation that pushed for that rank so far: their later pushes are refused (not taken). An
// incarnation first seen after the fence (the same process's next client after an elastic scale,
// worker_main.cc) is not barred. Incarnation 0 (a sender that does not stamp one) is never barred. It lives as long as the server process: a replacement server starts
// empty (and says so: Encode's first word), so the worker falls back to its heartbeat clock there.
// Memory: one int64 per (table, worker rank) that pushed.
//
// Thread-safety: none; the server calls it under its work lock.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <set>
#include <utility>
#include <vector>

#include "common/buffer.h"

namespace osprey::server {

class AppliedClocks {
 public:
  static constexpr int64_t kNone = -1;

  // A push of `clock` from (`worker`, `incarnation`) to `table` was taken.
  void Record(uint32_t table, int worker, uint64_t incarnation, int64_t clock);
  // `incarnation` of `worker` asks: every other incarnation that pushed for `worker` is barred.
  void Fence(int worker, uint64_t incarnation);
  // Whether pushes of (`worker`, `incarnation`) are refused (a process superseded by a restart).
  bool Barred(int worker, uint64_t incarnation) const;
  // The highest clock recorded for (table, worker); kNone when none.
  int64_t Of(uint32_t table, int worker) const;
  // The OP_APPLIED_CLOCKS reply values (proto/osprey.proto): (num_tables + 1) int64s, [0] =
  // `complete` (1 / 0), [1 + t] = Of(t, worker).
  Buffer Encode(int worker, size_t num_tables, bool complete) const;

 private:
  std::map<std::pair<uint32_t, int>, int64_t> high_;
  std::map<int, std::set<uint64_t>> pushed_by_;  // incarnations that pushed, by rank
  std::map<int, std::set<uint64_t>> barred_;
};

}  // namespace osprey::server
