// ScaleAgent: osprey-server's part of a scale step (osprey scale; coordinator/scale_protocol.h).
// When a heartbeat reply shows the step transferring to a new map, the agent reshards the server
// (Server::Reshard: moved records go to their new owners through a fresh RowSender) on its own
// thread, so heartbeats go on meanwhile, and reports to the coordinator (SCALE_DONE, with the
// error if it failed). A server the new map leaves out is told so in the reply: removed() then
// turns true and the main exits (its rows are with the other servers by then).
//
// Part of the osprey-server binary (it talks to the coordinator; the server library does not).
// Threading: OnState on the heartbeat thread; removed() / leaving() from any thread; WaitDone
// from the main thread (not the heartbeat thread); the destructor joins.
#pragma once

#include <atomic>
#include <functional>
#include <memory>
#include <thread>

#include "common/status.h"
#include "common/transport.h"
#include "coordinator/coordinator_client.h"
#include "server/server.h"

namespace osprey::server {

class ScaleAgent {
 public:
  using MakeDialer = std::function<StatusOr<std::unique_ptr<Transport>>()>;
  // All borrowed and outlive the agent. `timeout_ms`: for moving the rows and for the reply.
  ScaleAgent(Server* server, coordinator::CoordinatorClient* coord, MakeDialer make_dialer,
             int timeout_ms);
  ~ScaleAgent();

  void OnState(const proto::ClusterState& state);
  bool removed() const { return removed_.load(); }
  // True from the moment a transfer for a map without this server began: the coordinator may
  // then forget this server (its heartbeats fail) before the reply that says so arrives, so the
  // main waits for the transfer (WaitDone) before it treats a lost coordinator as a failure.
  bool leaving() const { return leaving_.load(); }
  void WaitDone() {
    if (thread_.joinable()) thread_.join();
  }

 private:
  void Transfer(proto::ShardMap target);

  Server* const server_;
  coordinator::CoordinatorClient* const coord_;
  const MakeDialer make_dialer_;
  const int timeout_ms_;
  std::atomic<uint64_t> started_epoch_{0};  // the target epoch a transfer was started for
  std::atomic<bool> removed_{false};
  std::atomic<bool> leaving_{false};
  std::thread thread_;
};

}  // namespace osprey::server
