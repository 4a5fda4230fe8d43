// Helpers for the coordinator tests: a job config of a given shape, registration requests, and a
// Coordinator on an InprocHub with clients connected to it.
#pragma once

#include <chrono>
#include <memory>
#include <string>

#include <gtest/gtest.h>

#include "common/config/cluster_config.h"
#include "common/inproc_transport.h"
#include "coordinator/coordinator.h"
#include "coordinator/coordinator_client.h"
#include "osprey.pb.h"
#include "tests/testing/cluster_fixture.h"

namespace osprey::coordinator::testing {

inline config::PsConfig TestJob(int servers, int workers, int heartbeat_timeout_ms = 2000,
                                 int startup_timeout_ms = 10000) {
  config::PsConfig job;
  job.cluster.num_servers = servers;
  job.cluster.num_workers = workers;
  job.cluster.heartbeat_interval_ms = 50;
  job.cluster.heartbeat_timeout_ms = heartbeat_timeout_ms;
  job.cluster.startup_timeout_ms = startup_timeout_ms;
  job.cluster.server_replace_timeout_ms = 0;  // a dead server fails at once (replace tests set it)
  job.tables = osprey::testing::TestTables();
  return job;
}

inline proto::RegisterRequest ServerRequest(int pid, int requested_rank = -1) {
  proto::RegisterRequest r;
  r.set_role(proto::ROLE_SERVER);
  r.set_endpoint("inproc://server-pid-" + std::to_string(pid));
  r.set_host("test-host");
  r.set_pid(pid);
  r.set_requested_rank(requested_rank);
  return r;
}

inline proto::RegisterRequest WorkerRequest(int pid, int requested_rank = -1) {
  proto::RegisterRequest r;
  r.set_role(proto::ROLE_WORKER);
  r.set_host("test-host");
  r.set_pid(pid);
  r.set_requested_rank(requested_rank);
  return r;
}

inline proto::Heartbeat MakeHeartbeat(proto::Role role, int rank, int64_t clock = 0) {
  proto::Heartbeat h;
  h.set_role(role);
  h.set_rank(rank);
  h.set_clock(clock);
  return h;
}

// A started Coordinator at inproc://coordinator and a factory for clients of it.
// Base of the JobState tests driven with a fake clock: the start time and fresh reply addresses.
class JobStateFixture : public ::testing::Test {
 protected:
  const Clock::time_point t0_ = Clock::now();
  uint64_t next_id_ = 1;
  ReplyAddress Addr() { return ReplyAddress{1, next_id_++}; }
};

class CoordinatorHarness {
 public:
  static constexpr char kEndpoint[] = "inproc://coordinator";

  explicit CoordinatorHarness(const config::PsConfig& job)
      : hub_(std::make_shared<InprocHub>()),
        coordinator_(job, std::make_unique<InprocTransport>(hub_)) {
    StatusOr<std::string> bound = coordinator_.Start(kEndpoint);
    if (!bound.ok()) throw std::runtime_error(bound.status().ToString());
  }

  std::unique_ptr<CoordinatorClient> NewClient() {
    auto client = CoordinatorClient::Create(std::make_unique<InprocTransport>(hub_), kEndpoint);
    if (!client.ok()) throw std::runtime_error(client.status().ToString());
    return std::move(client).value();
  }
  std::unique_ptr<Transport> NewTransport() { return std::make_unique<InprocTransport>(hub_); }

  Coordinator& coordinator() { return coordinator_; }

 private:
  std::shared_ptr<InprocHub> hub_;
  Coordinator coordinator_;
};

// Polls `pred` every 10 ms for up to `timeout`; true once it holds.
template <typename Pred>
bool Eventually(Pred pred, std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (std::chrono::steady_clock::now() < deadline) {
    if (pred()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return pred();
}

}  // namespace osprey::coordinator::testing
