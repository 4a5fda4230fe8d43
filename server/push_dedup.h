// PushDedup: the pushes a server already applied, by (table, worker rank, worker incarnation,
// request id), so a push re-sent after a server failover (the worker did not get its reply) is answered
// OK without being applied a second time.
//
// Window: per (table, worker rank) the last `window` request ids recorded (default 4096) and the highest
// id that fell out of it. An id in the window, or at or below the evicted mark, counts as seen:
// a client's request ids only grow and it re-sends only requests still unanswered, which are
// among its newest, so a push older than its last `window` pushes to this server is never new.
// A new incarnation of a worker rank (a restarted process: its ids start again at 1) forgets
// that rank's window. Memory: window * 16 bytes per (table, worker rank).
//
// Restore (the redis store): Restore(table, worker, incarnation, high) marks every id <= high
// seen (the per-(table, worker) mark persisted with the rows, server/redis/push_marks.h). Per
// table because a shard applies a table's pushes in arrival order, while another table's window
// may apply a later id first.
//
// Thread-safety: none; the server calls it under its work lock.
#pragma once

#include <cstddef>
#include <cstdint>
#include <deque>
#include <unordered_map>
#include <unordered_set>

namespace osprey::server {

class PushDedup {
 public:
  explicit PushDedup(size_t window = 4096) : window_(window == 0 ? 1 : window) {}

  // True when (worker, incarnation, id) was recorded (or is at/below the evicted mark). An
  // incarnation of 0 (a sender that does not stamp one) is never deduplicated.
  bool Seen(uint32_t table, int worker, uint64_t incarnation, uint64_t id) const;
  // Records an applied push.
  void Record(uint32_t table, int worker, uint64_t incarnation, uint64_t id);
  // Every id <= high of (worker, incarnation) counts as seen from now on.
  void Restore(uint32_t table, int worker, uint64_t incarnation, uint64_t high);
  // The highest id recorded for `worker` (0: none), and its incarnation.
  uint64_t High(uint32_t table, int worker, uint64_t* incarnation) const;

 private:
  struct PerWorker {
    uint64_t incarnation = 0;
    uint64_t evicted = 0;  // every id <= this is seen
    uint64_t high = 0;
    std::deque<uint64_t> order;
    std::unordered_set<uint64_t> ids;
  };
  PerWorker& For(uint32_t table, int worker, uint64_t incarnation);
  static uint64_t Key(uint32_t table, int worker) {
    return (static_cast<uint64_t>(table) << 32) | static_cast<uint32_t>(worker);
  }

  const size_t window_;
  std::unordered_map<uint64_t, PerWorker> workers_;  // by Key(table, worker)
};

}  // namespace osprey::server
