// RollbackRunner: runs a server's bsp rollback (Server::RollBack, server_rollback.cc) off the
// heartbeat thread, which must keep beating while a large shard reloads. At most one at a time;
// a request for a generation already rolled back, or while one runs, is ignored (the next
// heartbeat reply asks again). A failed rollback sets failed(): the server must exit.
// Thread-safety: Request from the heartbeat thread; failed() from any.
#pragma once

#include <atomic>
#include <cstdint>
#include <thread>

#include "common/logging.h"
#include "osprey.pb.h"
#include "server/server.h"

namespace osprey::server {

class RollbackRunner {
 public:
  explicit RollbackRunner(Server* srv) : srv_(srv) {}
  ~RollbackRunner() {
    if (thread_.joinable()) thread_.join();
  }
  RollbackRunner(const RollbackRunner&) = delete;
  RollbackRunner& operator=(const RollbackRunner&) = delete;

  // From a ClusterState: starts the rollback it asks for, if any.
  void Request(const proto::ClusterState& st) {
    if (st.rollback_generation() <= srv_->rollback_acked() || !st.rollback_clock_known()) return;
    if (busy_.exchange(true)) return;
    if (thread_.joinable()) thread_.join();
    const uint64_t generation = st.rollback_generation();
    const int64_t clock = st.rollback_clock();
    thread_ = std::thread([this, generation, clock] {
      Status s = srv_->RollBack(generation, clock);
      if (!s.ok()) {
        OSPREY_LOG_ERROR("bsp rollback to clock {} (generation {}) failed: {}", clock, generation,
                         s.ToString());
        failed_.store(true);
      }
      busy_.store(false);
    });
  }
  bool failed() const { return failed_.load(); }

 private:
  Server* const srv_;
  std::atomic<bool> busy_{false};
  std::atomic<bool> failed_{false};
  std::thread thread_;
};

}  // namespace osprey::server
