// Coordinator + CoordinatorClient over the in-process transport: every client runs in its own
// thread, as servers and workers do.
#include "coordinator/coordinator.h"

#include <gtest/gtest.h>

#include <atomic>
#include <future>
#include <set>
#include <thread>
#include <vector>

#include "coordinator/coordinator_client.h"
#include "proto/wire.h"
#include "tests/coordinator/coordinator_test_util.h"

namespace osprey::coordinator {
namespace {

using testing::CoordinatorHarness;
using testing::Eventually;
using testing::MakeHeartbeat;
using testing::ServerRequest;
using testing::TestJob;
using testing::WorkerRequest;
using Ms = std::chrono::milliseconds;

constexpr int kTimeoutMs = 5000;

// Registers every node in its own thread; returns the replies in request order.
std::vector<StatusOr<proto::RegisterReply>> RegisterAll(
    std::vector<std::unique_ptr<CoordinatorClient>>& clients,
    const std::vector<proto::RegisterRequest>& requests) {
  std::vector<std::future<StatusOr<proto::RegisterReply>>> futures;
  for (size_t i = 0; i < requests.size(); ++i) {
    futures.push_back(std::async(std::launch::async, [&, i] {
      return clients[i]->Register(requests[i], kTimeoutMs);
    }));
  }
  std::vector<StatusOr<proto::RegisterReply>> replies;
  for (auto& f : futures) replies.push_back(f.get());
  return replies;
}

// A cluster of registered clients: servers first, then workers.
struct Registered {
  std::vector<std::unique_ptr<CoordinatorClient>> clients;
  std::vector<StatusOr<proto::RegisterReply>> replies;
};

Registered RegisterCluster(CoordinatorHarness& h, int servers, int workers) {
  Registered r;
  std::vector<proto::RegisterRequest> requests;
  for (int i = 0; i < servers; ++i) requests.push_back(ServerRequest(100 + i));
  for (int i = 0; i < workers; ++i) requests.push_back(WorkerRequest(200 + i));
  for (size_t i = 0; i < requests.size(); ++i) r.clients.push_back(h.NewClient());
  r.replies = RegisterAll(r.clients, requests);
  return r;
}

// Heartbeats for (role, rank) until the client is stopped.
void Beat(CoordinatorClient& c, proto::Role role, int rank,
          std::function<void(const proto::ClusterState&)> on_state = nullptr) {
  HeartbeatOptions o;
  o.interval_ms = 20;
  o.timeout_ms = 2000;
  o.fill = [role, rank] { return MakeHeartbeat(role, rank); };
  o.on_state = std::move(on_state);
  ASSERT_TRUE(c.StartHeartbeats(std::move(o)).ok());
}

TEST(CoordinatorTest, RendezvousAssignsUniqueRanksAndTheSameShardMap) {
  CoordinatorHarness h(TestJob(2, 3));
  Registered r = RegisterCluster(h, 2, 3);
  std::set<int> server_ranks, worker_ranks;
  std::set<std::string> maps;
  std::set<uint64_t> sessions;
  for (size_t i = 0; i < r.replies.size(); ++i) {
    ASSERT_TRUE(r.replies[i].ok()) << r.replies[i].status().ToString();
    const proto::RegisterReply& reply = *r.replies[i];
    (i < 2 ? server_ranks : worker_ranks).insert(reply.rank());
    maps.insert(reply.shard_map().SerializeAsString());
    sessions.insert(reply.session_id());
    EXPECT_EQ(reply.num_servers(), 2);
    EXPECT_EQ(reply.num_workers(), 3);
  }
  EXPECT_EQ(server_ranks, (std::set<int>{0, 1}));
  EXPECT_EQ(worker_ranks, (std::set<int>{0, 1, 2}));
  EXPECT_EQ(maps.size(), 1u) << "every node must get the same shard map";
  EXPECT_EQ(sessions.size(), 1u);
  const proto::ShardMap& map = r.replies[0]->shard_map();
  EXPECT_EQ(map.epoch(), 1u);
  ASSERT_EQ(map.server_endpoints_size(), 2);
  // Server endpoints are indexed by server rank.
  for (int i = 0; i < 2; ++i) {
    EXPECT_EQ(map.server_endpoints(r.replies[i]->rank()), ServerRequest(100 + i).endpoint());
  }
  ASSERT_EQ(map.tables_size(), 2);
  EXPECT_EQ(map.tables(0).name(), "emb");
  EXPECT_EQ(map.tables(0).type(), proto::TABLE_SPARSE);
  EXPECT_EQ(map.tables(0).dim(), 4u);
  EXPECT_EQ(map.tables(1).id(), 1u);
  EXPECT_EQ(map.tables(1).chunk_floats(), 4u);
}

TEST(CoordinatorTest, RegistrationAfterTheRendezvousIsRefused) {
  CoordinatorHarness h(TestJob(1, 1));
  Registered r = RegisterCluster(h, 1, 1);
  ASSERT_TRUE(r.replies[0].ok() && r.replies[1].ok());
  auto extra = h.NewClient()->Register(WorkerRequest(999), kTimeoutMs);
  ASSERT_FALSE(extra.ok());
  EXPECT_EQ(extra.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(extra.status().message().find("already complete"), std::string::npos)
      << extra.status().message();
}

TEST(CoordinatorTest, StartupTimeoutFailsNamingTheMissingNodes) {
  CoordinatorHarness h(TestJob(1, 2, 2000, 300));
  auto server = h.NewClient();
  auto reply = server->Register(ServerRequest(100), kTimeoutMs);
  ASSERT_FALSE(reply.ok());
  EXPECT_EQ(reply.status().code(), StatusCode::kAborted);
  Status result = h.coordinator().WaitFor(Ms(kTimeoutMs));
  EXPECT_EQ(result.code(), StatusCode::kAborted);
  EXPECT_NE(result.message().find("missing 0 of 1 servers and 2 of 2 workers"), std::string::npos)
      << result.message();
  EXPECT_NE(reply.status().message().find("startup_timeout_ms"), std::string::npos);
}

TEST(CoordinatorTest, BarrierReleasesOnlyWhenEveryWorkerArrived) {
  CoordinatorHarness h(TestJob(1, 3));
  Registered r = RegisterCluster(h, 1, 3);
  std::vector<std::future<Status>> waits;
  for (int w = 0; w < 2; ++w) {
    const int rank = r.replies[1 + w]->rank();
    waits.push_back(std::async(std::launch::async, [&, w, rank] {
      return r.clients[1 + w]->Barrier("ready", proto::ROLE_WORKER, rank, kTimeoutMs);
    }));
  }
  EXPECT_EQ(waits[0].wait_for(Ms(200)), std::future_status::timeout) << "released too early";
  Status last = r.clients[3]->Barrier("ready", proto::ROLE_WORKER, r.replies[3]->rank(),
                                      kTimeoutMs);
  EXPECT_TRUE(last.ok()) << last.ToString();
  for (auto& w : waits) EXPECT_TRUE(w.get().ok());
}

TEST(CoordinatorTest, BarrierReleasesWhenAWaitedForWorkerDies) {
  CoordinatorHarness h(TestJob(1, 2, 300));
  Registered r = RegisterCluster(h, 1, 2);
  Beat(*r.clients[0], proto::ROLE_SERVER, 0);
  const int rank = r.replies[1]->rank();
  Beat(*r.clients[1], proto::ROLE_WORKER, rank);
  // The other worker never heartbeats and never arrives.
  const auto start = std::chrono::steady_clock::now();
  Status st = r.clients[1]->Barrier("ready", proto::ROLE_WORKER, rank, kTimeoutMs);
  EXPECT_TRUE(st.ok()) << st.ToString();
  EXPECT_GE(std::chrono::steady_clock::now() - start, Ms(250));
  proto::ClusterState state = h.coordinator().State();
  EXPECT_FALSE(state.nodes(2 - rank).alive());
}

TEST(CoordinatorTest, SilentWorkerIsMarkedDeadAndTheJobContinues) {
  CoordinatorHarness h(TestJob(1, 2, 300));
  Registered r = RegisterCluster(h, 1, 2);
  Beat(*r.clients[0], proto::ROLE_SERVER, 0);
  const int live = r.replies[1]->rank();
  Beat(*r.clients[1], proto::ROLE_WORKER, live);
  bool saw_dead = false;
  ASSERT_TRUE(Eventually([&] { return !h.coordinator().State().nodes(1 + (1 - live)).alive(); },
                         Ms(2000)));
  EXPECT_EQ(h.coordinator().WaitFor(Ms(100)).code(), StatusCode::kDeadlineExceeded)
      << "the job must go on without the dead worker";
  auto state = r.clients[1]->GetState(kTimeoutMs);
  ASSERT_TRUE(state.ok());
  for (const proto::NodeState& n : state->nodes()) {
    if (n.role() == proto::ROLE_WORKER && n.rank() != live) saw_dead = !n.alive();
  }
  EXPECT_TRUE(saw_dead) << "the dead worker must be visible in the ClusterState";
  proto::WorkerReport report;
  report.set_rank(live);
  ASSERT_TRUE(r.clients[1]->Report(report, kTimeoutMs).ok());
  EXPECT_TRUE(h.coordinator().WaitFor(Ms(kTimeoutMs)).ok());
}

TEST(CoordinatorTest, DeadServerFailsTheJob) {
  CoordinatorHarness h(TestJob(2, 1, 300));
  Registered r = RegisterCluster(h, 2, 1);
  Beat(*r.clients[0], proto::ROLE_SERVER, r.replies[0]->rank());
  Beat(*r.clients[2], proto::ROLE_WORKER, 0);
  // Server clients[1] stays silent.
  Status result = h.coordinator().WaitFor(Ms(kTimeoutMs));
  EXPECT_EQ(result.code(), StatusCode::kAborted);
  EXPECT_NE(result.message().find("server " + std::to_string(r.replies[1]->rank()) +
                                  " (pid 101) sent no heartbeat"), std::string::npos)
      << result.message();
  proto::ClusterState state = h.coordinator().State();
  EXPECT_TRUE(state.shutting_down());
  EXPECT_FALSE(state.done());
}

TEST(CoordinatorTest, ReportsMakeTheJobDoneAndServersSeeShuttingDown) {
  CoordinatorHarness h(TestJob(1, 2));
  Registered r = RegisterCluster(h, 1, 2);
  std::atomic<bool> server_told{false};
  Beat(*r.clients[0], proto::ROLE_SERVER, 0,
       [&](const proto::ClusterState& s) { server_told = server_told || s.shutting_down(); });
  for (int w = 0; w < 2; ++w) {
    proto::WorkerReport report;
    report.set_rank(r.replies[1 + w]->rank());
    report.set_steps(10 + w);
    ASSERT_TRUE(r.clients[1 + w]->Report(report, kTimeoutMs).ok());
  }
  EXPECT_TRUE(h.coordinator().WaitFor(Ms(kTimeoutMs)).ok());
  EXPECT_TRUE(Eventually([&] { return server_told.load(); }, Ms(kTimeoutMs)));
  proto::ClusterState state = h.coordinator().State();
  EXPECT_TRUE(state.done());
  EXPECT_TRUE(state.shutting_down());
  EXPECT_EQ(state.reports_size(), 2);
}

TEST(CoordinatorTest, ServerReportIsKeptAndTheJobWaitsForIt) {
  CoordinatorHarness h(TestJob(1, 1));
  std::vector<std::unique_ptr<CoordinatorClient>> clients;
  clients.push_back(h.NewClient());
  clients.push_back(h.NewClient());
  proto::RegisterRequest server = ServerRequest(100);
  server.set_sends_server_report(true);
  auto replies = RegisterAll(clients, {server, WorkerRequest(200)});
  ASSERT_TRUE(replies[0].ok() && replies[1].ok());
  std::atomic<bool> told{false};
  Beat(*clients[0], proto::ROLE_SERVER, 0,
       [&](const proto::ClusterState& s) { told = told || s.shutting_down(); });
  proto::WorkerReport report;
  report.set_rank(0);
  ASSERT_TRUE(clients[1]->Report(report, kTimeoutMs).ok());
  ASSERT_TRUE(Eventually([&] { return told.load(); }, Ms(kTimeoutMs)));
  EXPECT_EQ(h.coordinator().WaitFor(Ms(200)).code(), StatusCode::kDeadlineExceeded)
      << "the server promised its report";
  proto::ServerReport stats;
  stats.set_rank(0);
  stats.set_decoded_pushes(12);
  stats.mutable_stats()->set_pulls_held(3);
  ASSERT_TRUE(clients[0]->ReportServer(stats, kTimeoutMs).ok());
  EXPECT_TRUE(h.coordinator().WaitFor(Ms(kTimeoutMs)).ok());
  proto::ClusterState state = h.coordinator().State();
  ASSERT_EQ(state.server_reports_size(), 1);
  EXPECT_EQ(state.server_reports(0).decoded_pushes(), 12u);
  EXPECT_EQ(state.server_reports(0).stats().pulls_held(), 3u);
}

TEST(CoordinatorTest, ShutdownRequestEndsTheJobWithTheReason) {
  CoordinatorHarness h(TestJob(1, 1));
  auto launcher = h.NewClient();
  ASSERT_TRUE(launcher->RequestShutdown("stopped by the test", kTimeoutMs).ok());
  Status result = h.coordinator().WaitFor(Ms(kTimeoutMs));
  EXPECT_EQ(result.message(), "stopped by the test");
}

TEST(CoordinatorTest, MalformedMessagesGetErrorsAndTheCoordinatorKeepsServing) {
  CoordinatorHarness h(TestJob(1, 1));
  osprey::testing::RawPeer peer(h.NewTransport(), CoordinatorHarness::kEndpoint);
  proto::Header reply;
  const uint8_t garbage[] = {0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01};
  peer.Send(Buffer::Copy(garbage, sizeof(garbage)), Buffer(), Buffer());
  ASSERT_TRUE(peer.Next(&reply, nullptr));
  EXPECT_EQ(reply.op(), proto::OP_ERROR);
  EXPECT_EQ(reply.status_code(), static_cast<int>(StatusCode::kInvalidArgument));

  proto::Header h_bad;
  h_bad.set_protocol_version(7);
  h_bad.set_op(proto::OP_CLUSTER_STATE);
  h_bad.set_request_id(77);
  peer.Send(SerializeMessage(h_bad), Buffer(), Buffer());
  ASSERT_TRUE(peer.Next(&reply, nullptr));
  EXPECT_EQ(reply.op(), proto::OP_ERROR);
  EXPECT_EQ(reply.request_id(), 77u) << "the error must be matchable to the request";
  EXPECT_NE(reply.error().find("protocol version 7"), std::string::npos) << reply.error();

  proto::Header h_op;
  h_op.set_protocol_version(proto::PROTOCOL_VERSION_CURRENT);
  h_op.set_op(static_cast<proto::Op>(99));
  h_op.set_request_id(78);
  peer.Send(h_op, Buffer(), Buffer());
  ASSERT_TRUE(peer.Next(&reply, nullptr));
  EXPECT_EQ(reply.op(), proto::OP_ERROR);
  EXPECT_EQ(reply.status_code(), static_cast<int>(StatusCode::kUnimplemented));
  EXPECT_NE(reply.error().find("op 99"), std::string::npos);

  proto::Header h_body = h_op;
  h_body.set_op(proto::OP_REGISTER);
  h_body.set_request_id(79);
  peer.Send(h_body, Buffer(), Buffer::Copy(garbage, sizeof(garbage)));
  ASSERT_TRUE(peer.Next(&reply, nullptr));
  EXPECT_EQ(reply.op(), proto::OP_ERROR);
  EXPECT_NE(reply.error().find("OP_REGISTER"), std::string::npos) << reply.error();

  h_body.set_op(proto::OP_HEARTBEAT);
  peer.Send(h_body, osprey::testing::VecBuf(std::vector<uint64_t>{1, 2}), Buffer());
  ASSERT_TRUE(peer.Next(&reply, nullptr));
  EXPECT_EQ(reply.op(), proto::OP_ERROR);
  EXPECT_NE(reply.error().find("no keys"), std::string::npos) << reply.error();

  h_body.set_op(proto::OP_CLUSTER_STATE);  // no body, but keys are refused all the same
  peer.Send(h_body, osprey::testing::VecBuf(std::vector<uint64_t>{3}), Buffer());
  ASSERT_TRUE(peer.Next(&reply, nullptr));
  EXPECT_EQ(reply.op(), proto::OP_ERROR);

  EXPECT_EQ(h.coordinator().bad_requests(), 6u);
  auto state = h.NewClient()->GetState(kTimeoutMs);
  ASSERT_TRUE(state.ok()) << "the coordinator must keep serving: " << state.status().ToString();
  EXPECT_EQ(state->num_workers(), 1);
}

TEST(CoordinatorClientTest, TimeoutNamesTheOpAndTheEndpoint) {
  auto hub = std::make_shared<InprocHub>();
  auto client = CoordinatorClient::Create(std::make_unique<InprocTransport>(hub),
                                          "inproc://nobody-home");
  ASSERT_TRUE(client.ok());
  auto state = (*client)->GetState(100);
  ASSERT_FALSE(state.ok());
  EXPECT_EQ(state.status().code(), StatusCode::kDeadlineExceeded);
  EXPECT_NE(state.status().message().find("OP_CLUSTER_STATE"), std::string::npos);
  EXPECT_NE(state.status().message().find("inproc://nobody-home"), std::string::npos);
}

TEST(CoordinatorClientTest, ServerReportToAGoneCoordinatorIsABoundedWait) {
  auto hub = std::make_shared<InprocHub>();
  auto client = CoordinatorClient::Create(std::make_unique<InprocTransport>(hub),
                                          "inproc://nobody-home");
  ASSERT_TRUE(client.ok());
  const auto start = std::chrono::steady_clock::now();
  Status st = (*client)->ReportServer(proto::ServerReport(), 100);
  EXPECT_LT(std::chrono::steady_clock::now() - start, Ms(2000));
  EXPECT_EQ(st.code(), StatusCode::kDeadlineExceeded) << st.ToString();
  EXPECT_NE(st.message().find("OP_SERVER_REPORT"), std::string::npos) << st.ToString();
}

TEST(CoordinatorClientTest, HeartbeatsReportACoordinatorThatWentAway) {
  auto h = std::make_unique<CoordinatorHarness>(TestJob(1, 1));
  Registered r = RegisterCluster(*h, 1, 1);
  std::promise<Status> lost;
  HeartbeatOptions o;
  o.interval_ms = 20;
  o.timeout_ms = 300;
  o.fill = [] { return MakeHeartbeat(proto::ROLE_SERVER, 0); };
  o.on_lost = [&](const Status& why) { lost.set_value(why); };
  ASSERT_TRUE(r.clients[0]->StartHeartbeats(std::move(o)).ok());
  std::this_thread::sleep_for(Ms(100));
  EXPECT_TRUE(r.clients[0]->heartbeat_status().ok());
  h->coordinator().Stop();  // the coordinator process "dies"
  auto future = lost.get_future();
  ASSERT_EQ(future.wait_for(Ms(3000)), std::future_status::ready) << "a node must not hang";
  Status why = future.get();
  EXPECT_EQ(why.code(), StatusCode::kDeadlineExceeded) << why.ToString();
  EXPECT_EQ(r.clients[0]->heartbeat_status().code(), StatusCode::kDeadlineExceeded);
}

TEST(CoordinatorClientTest, HeartbeatRefusalForADeadNodeIsReported) {
  CoordinatorHarness h(TestJob(1, 2, 200));
  Registered r = RegisterCluster(h, 1, 2);
  Beat(*r.clients[0], proto::ROLE_SERVER, 0);
  Beat(*r.clients[1], proto::ROLE_WORKER, r.replies[1]->rank());
  const int silent = r.replies[2]->rank();
  ASSERT_TRUE(Eventually([&] { return !h.coordinator().State().nodes(1 + silent).alive(); },
                         Ms(2000)));
  std::promise<Status> lost;
  HeartbeatOptions o;
  o.fill = [silent] { return MakeHeartbeat(proto::ROLE_WORKER, silent); };
  o.on_lost = [&](const Status& why) { lost.set_value(why); };
  ASSERT_TRUE(r.clients[2]->StartHeartbeats(std::move(o)).ok());
  auto future = lost.get_future();
  ASSERT_EQ(future.wait_for(Ms(3000)), std::future_status::ready);
  EXPECT_NE(future.get().message().find("marked dead"), std::string::npos);
}

}  // namespace
}  // namespace osprey::coordinator
