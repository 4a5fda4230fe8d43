// LogLimiter: decides which bad-request warnings are written, so a peer that floods a server
// with bad frames cannot flood its log: at most one line per (peer, kind) per interval (1 s by
// default); the line that is written says how many of that key were suppressed since the last
// one. Totals are kept by the caller's counters, not here.
//
// The clock is the caller's (`now_us`, any monotonic microseconds), so tests drive it. Memory is
// bounded: past max_keys distinct keys, keys idle for longer than an interval are forgotten
// (their suppressed counts are lost from the log, never from the counters), and when every key
// is recent a new key is suppressed and counted in overflow_suppressed().
// Thread-safety: none; the caller serializes (Server holds a mutex around it).
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <utility>

namespace osprey::server {

class LogLimiter {
 public:
  explicit LogLimiter(int64_t interval_us = 1000000, size_t max_keys = 4096)
      : interval_us_(interval_us), max_keys_(max_keys) {}

  // True when a line for (peer, kind) should be written at now_us; *suppressed is then the number
  // of calls for that key that returned false since its last written line (0 on false).
  bool Admit(int64_t peer, int kind, int64_t now_us, uint64_t* suppressed);

  size_t num_keys() const { return keys_.size(); }
  uint64_t overflow_suppressed() const { return overflow_; }

 private:
  struct Entry {
    int64_t last_us = 0;
    uint64_t suppressed = 0;
  };
  void Prune(int64_t now_us);

  const int64_t interval_us_;
  const size_t max_keys_;
  std::map<std::pair<int64_t, int>, Entry> keys_;
  uint64_t overflow_ = 0;
};

}  // namespace osprey::server
