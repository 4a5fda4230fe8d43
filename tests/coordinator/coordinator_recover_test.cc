// Coordinator restart over real ZeroMQ sockets in one process: CoordinatorClients (one server, two
// workers, as the mains use them) register with a Coordinator on a loopback TCP port; the
// Coordinator is destroyed (its ROUTER socket closes, as when its process is killed) and a new one
// with SetRecover(true) listens on the same endpoint. The clients' DEALERs reconnect on their own;
// the test checks that they re-register, that a barrier arrival waiting at the old coordinator and
// a report sent while no coordinator ran are re-sent and answered, and that the job completes.
// (The same with real processes and kill -9: tests/integration/coordinator_restart_test.cc.)
#include <gtest/gtest.h>

#include <future>
#include <memory>
#include <thread>
#include <vector>

#include "common/zmq_transport.h"
#include "coordinator/coordinator.h"
#include "coordinator/coordinator_client.h"
#include "tests/coordinator/coordinator_test_util.h"
#include "tests/testing/free_port.h"
#include "tests/testing/wait.h"

namespace osprey::coordinator {
namespace {

using testing::ServerRequest;
using testing::TestJob;
using testing::WorkerRequest;
using Ms = std::chrono::milliseconds;

std::unique_ptr<Coordinator> StartCoordinator(const config::PsConfig& job, const std::string& endpoint,
                                              bool recover) {
  auto c = std::make_unique<Coordinator>(job, std::make_unique<ZmqTransport>(TransportOptions{}));
  c->SetRecover(recover);
  StatusOr<std::string> bound = c->Start(endpoint);
  EXPECT_TRUE(bound.ok()) << bound.status().ToString();
  return c;
}

TEST(CoordinatorRecoverTest, WaitingBarrierAndReportSentDuringTheOutageAreReSent) {
  const config::PsConfig job = TestJob(1, 2, /*heartbeat_timeout_ms=*/2000);
  const std::string endpoint = "tcp://127.0.0.1:" + std::to_string(osprey::testing::FreePort());
  std::unique_ptr<Coordinator> coord = StartCoordinator(job, endpoint, false);

  std::vector<std::unique_ptr<CoordinatorClient>> nodes;
  std::vector<proto::RegisterRequest> requests = {ServerRequest(100, 0), WorkerRequest(200, 0),
                                                  WorkerRequest(201, 1)};
  for (size_t i = 0; i < requests.size(); ++i) {
    auto c = CoordinatorClient::Create(std::make_unique<ZmqTransport>(TransportOptions{}), endpoint);
    ASSERT_TRUE(c.ok()) << c.status().ToString();
    nodes.push_back(std::move(c).value());
  }
  std::vector<std::future<StatusOr<proto::RegisterReply>>> regs;
  for (size_t i = 0; i < nodes.size(); ++i) {
    regs.push_back(std::async(std::launch::async, [&, i] { return nodes[i]->Register(requests[i], 5000); }));
  }
  uint64_t session = 0;
  for (auto& r : regs) {
    StatusOr<proto::RegisterReply> reply = r.get();
    ASSERT_TRUE(reply.ok()) << reply.status().ToString();
    session = reply->session_id();
  }
  for (size_t i = 0; i < nodes.size(); ++i) {
    HeartbeatOptions hb;
    hb.interval_ms = 50;
    hb.timeout_ms = 2000;
    hb.outage_ms = 20000;
    const proto::Role role = i == 0 ? proto::ROLE_SERVER : proto::ROLE_WORKER;
    const int rank = i == 0 ? 0 : static_cast<int>(i) - 1;
    hb.fill = [role, rank] { return testing::MakeHeartbeat(role, rank, 7); };
    ASSERT_TRUE(nodes[i]->StartHeartbeats(hb).ok());
  }

  // Worker 0 waits at a barrier for worker 1.
  auto barrier = std::async(std::launch::async, [&] {
    return nodes[1]->Barrier("train-done", proto::ROLE_WORKER, 0, 20000);
  });
  ASSERT_TRUE(osprey::testing::WaitUntil([&] { return coord->barrier_waiters() == 1; }));
  coord.reset();  // the coordinator goes away with the barrier's waiter

  // Worker 1 reports while no coordinator runs.
  proto::WorkerReport report;
  report.set_rank(1);
  report.set_steps(7);
  auto reported = std::async(std::launch::async, [&] { return nodes[2]->Report(report, 20000); });
  std::this_thread::sleep_for(Ms(200));  // the outage (the nodes notice it meanwhile)
  EXPECT_EQ(barrier.wait_for(Ms(0)), std::future_status::timeout) << "the barrier must wait";

  coord = StartCoordinator(job, endpoint, /*recover=*/true);
  ASSERT_TRUE(osprey::testing::WaitUntil([&] { return !coord->State().recovering(); }, Ms(10000)))
      << "the nodes did not re-register";
  EXPECT_EQ(coord->State().epoch(), 1u);
  Status st = reported.get();
  EXPECT_TRUE(st.ok()) << "the report sent during the outage: " << st.ToString();
  // Worker 1 reported, so the barrier no longer waits for it: worker 0's re-sent arrival returns.
  ASSERT_EQ(barrier.wait_for(Ms(10000)), std::future_status::ready);
  st = barrier.get();
  EXPECT_TRUE(st.ok()) << "the barrier arrival that waited at the old coordinator: " << st.ToString();
  for (auto& n : nodes) {
    // The coordinator counts a node back when its request arrives; the client counts its rejoin
    // when the reply does, a moment later.
    EXPECT_TRUE(osprey::testing::WaitUntil([&] { return n->rejoins() >= 1u; }, Ms(10000)))
        << "a node did not see its re-registration answered";
    EXPECT_TRUE(n->heartbeat_status().ok()) << n->heartbeat_status().ToString();
  }

  report.set_rank(0);
  ASSERT_TRUE(nodes[1]->Report(report, 5000).ok());
  proto::ClusterState state = coord->State();
  EXPECT_TRUE(state.done());
  EXPECT_EQ(state.reports_size(), 2);
  for (const proto::NodeState& n : state.nodes()) EXPECT_TRUE(n.alive()) << n.role() << " " << n.rank();

  // A node of another session is refused by the recovered coordinator.
  auto rogue = CoordinatorClient::Create(std::make_unique<ZmqTransport>(TransportOptions{}), endpoint);
  ASSERT_TRUE(rogue.ok());
  proto::RegisterRequest other = WorkerRequest(300, 1);
  other.set_rejoin(true);
  other.set_session_id(session ^ 1);
  StatusOr<proto::RegisterReply> refused = (*rogue)->Register(other, 5000);
  EXPECT_EQ(refused.status().code(), StatusCode::kFailedPrecondition) << refused.status().ToString();
  for (auto& n : nodes) n->Stop();
}

}  // namespace
}  // namespace osprey::coordinator
