// HoldBudget: the requests a server holds unanswered -- pulls waiting for their clock, push acks
// waiting for their window's apply (write-through stores), requests that arrived before Activate
// -- counted per peer and in bytes, against limits.max_inflight_per_peer and limits.max_held_bytes
// (common/config/limits_config.h). A request beyond either is refused with ResourceExhausted
// naming the limit and its value, so a flood of held pulls from one peer costs a bounded amount
// of memory and leaves room for the other peers' requests.
//
// Every Admit that returned OK must be matched by one Release with the same peer and bytes (when
// the request is answered or dropped).
// Thread-safety: every method may be called from any thread (own mutex).
#pragma once

#include <cstdint>
#include <unordered_map>

#include "common/config/limits_config.h"
#include "common/mutex.h"
#include "common/status.h"
#include "common/thread_annotations.h"
#include "common/transport.h"

namespace osprey::server {

class HoldBudget {
 public:
  explicit HoldBudget(const config::LimitsConfig& limits) : limits_(limits) {}

  // Reserves one held request of `bytes` for `peer`, or ResourceExhausted (counted in refused()).
  Status Admit(PeerId peer, uint64_t bytes) EXCLUDES(mu_);
  // Whether Admit would succeed now (reserves nothing; not counted).
  Status Check(PeerId peer, uint64_t bytes) const EXCLUDES(mu_);
  void Release(PeerId peer, uint64_t bytes) EXCLUDES(mu_);

  uint64_t held_bytes() const EXCLUDES(mu_);
  uint64_t held_requests() const EXCLUDES(mu_);
  uint64_t held_by(PeerId peer) const EXCLUDES(mu_);
  uint64_t refused() const EXCLUDES(mu_);
  const config::LimitsConfig& limits() const { return limits_; }

 private:
  Status CheckLocked(PeerId peer, uint64_t bytes) const REQUIRES(mu_);

  const config::LimitsConfig limits_;
  mutable Mutex mu_;
  std::unordered_map<PeerId, uint64_t> per_peer_ GUARDED_BY(mu_);  // peers holding > 0 only
  uint64_t bytes_ GUARDED_BY(mu_) = 0;
  uint64_t requests_ GUARDED_BY(mu_) = 0;
  uint64_t refused_ GUARDED_BY(mu_) = 0;
};

}  // namespace osprey::server
