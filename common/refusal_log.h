// RefusalLog: counts requests refused for who sent them (a role that may not make the request,
// a checkpoint directory outside the configured one) and logs only the first refusal of each
// kind, so a stranger cannot flood the log with them (ZeroMQ frames are cheap to send).
// Thread-safe (atomics only).
#pragma once

#include <atomic>
#include <cstdint>
#include <string>

#include "common/logging.h"
#include "common/status.h"
#include "common/transport.h"

namespace osprey {

class RefusalLog {
 public:
  // `kind` < 32 names the class of refusal (the caller's enum); `what` is the refused request.
  void Record(unsigned kind, PeerId peer, PeerRole role, const Status& why) {
    total_.fetch_add(1, std::memory_order_relaxed);
    const uint32_t bit = 1u << (kind & 31);
    if ((logged_.fetch_or(bit) & bit) == 0) {
      OSPREY_LOG_WARN("refused a request from peer {} (role {}): {}; further refusals of this "
                      "kind are counted, not logged", peer, PeerRoleName(role), why.message());
    }
  }
  uint64_t total() const { return total_.load(std::memory_order_relaxed); }

 private:
  std::atomic<uint64_t> total_{0};
  std::atomic<uint32_t> logged_{0};
};

}  // namespace osprey
