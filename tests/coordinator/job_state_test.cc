// JobState: the coordinator's rules, driven with a fake clock (no threads, no transport).
#include "coordinator/job_state.h"

#include <gtest/gtest.h>

#include <set>

#include "tests/coordinator/coordinator_test_util.h"

namespace osprey::coordinator {
namespace {

using testing::MakeHeartbeat;
using testing::ServerRequest;
using testing::TestJob;
using testing::WorkerRequest;
using Ms = std::chrono::milliseconds;

class JobStateTest : public ::testing::Test {
 protected:
  const Clock::time_point t0_ = Clock::now();
  uint64_t next_id_ = 1;

  ReplyAddress Addr() { return ReplyAddress{1, next_id_++}; }

  // Registers 1 server (pid 100) and `workers` workers (pids 200...), completing the rendezvous.
  void Rendezvous(JobState* s, int workers) {
    Outbox out;
    s->OnRegister(Addr(), ServerRequest(100), t0_, &out);
    for (int w = 0; w < workers; ++w) s->OnRegister(Addr(), WorkerRequest(200 + w), t0_, &out);
    ASSERT_TRUE(s->rendezvous_complete());
    ASSERT_EQ(out.size(), static_cast<size_t>(1 + workers));
  }
  static void ExpectOk(const Outbox& out, size_t i) {
    ASSERT_LT(i, out.size());
    EXPECT_TRUE(out[i].status.ok()) << out[i].status.ToString();
  }
};

TEST_F(JobStateTest, RanksFollowRequestsThenRegistrationOrder) {
  JobState s(TestJob(1, 3), 42, t0_);
  Outbox out;
  s.OnRegister(Addr(), WorkerRequest(201), t0_, &out);      // id 1 -> free rank 1
  s.OnRegister(Addr(), WorkerRequest(202, 0), t0_, &out);   // id 2 -> requested 0
  s.OnRegister(Addr(), ServerRequest(100), t0_, &out);      // id 3
  EXPECT_TRUE(out.empty()) << "replies must wait for the whole rendezvous";
  s.OnRegister(Addr(), WorkerRequest(203), t0_, &out);      // id 4 -> rank 2
  ASSERT_EQ(out.size(), 4u);
  std::map<uint64_t, int> rank_by_request;
  for (const OutgoingReply& r : out) {
    ASSERT_TRUE(r.status.ok()) << r.status.ToString();
    proto::RegisterReply reply;
    ASSERT_TRUE(reply.ParseFromArray(r.payload.data(), static_cast<int>(r.payload.size())));
    rank_by_request[r.to.request_id] = reply.rank();
    EXPECT_EQ(reply.session_id(), 42u);
    EXPECT_EQ(reply.shard_map().epoch(), 1u);
    ASSERT_EQ(reply.shard_map().server_endpoints_size(), 1);
    EXPECT_EQ(reply.shard_map().server_endpoints(0), "inproc://server-pid-100");
    ASSERT_EQ(reply.shard_map().tables_size(), 2);
    EXPECT_EQ(reply.shard_map().tables(1).type(), proto::TABLE_DENSE);
    EXPECT_EQ(reply.shard_map().tables(1).size(), 10u);
  }
  EXPECT_EQ(rank_by_request[1], 1);
  EXPECT_EQ(rank_by_request[2], 0);
  EXPECT_EQ(rank_by_request[3], 0);
  EXPECT_EQ(rank_by_request[4], 2);
}

TEST_F(JobStateTest, RefusesDuplicateRankExtraNodeAndServerWithoutEndpoint) {
  JobState s(TestJob(1, 2), 1, t0_);
  Outbox out;
  s.OnRegister(Addr(), WorkerRequest(201, 1), t0_, &out);
  s.OnRegister(Addr(), WorkerRequest(202, 1), t0_, &out);
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].status.code(), StatusCode::kAlreadyExists);
  EXPECT_NE(out[0].status.message().find("rank 1"), std::string::npos) << out[0].status.message();

  proto::RegisterRequest no_endpoint = ServerRequest(100);
  no_endpoint.clear_endpoint();
  out.clear();
  s.OnRegister(Addr(), no_endpoint, t0_, &out);
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].status.code(), StatusCode::kInvalidArgument);

  out.clear();
  s.OnRegister(Addr(), WorkerRequest(203, 7), t0_, &out);
  ASSERT_EQ(out.size(), 1u);
  EXPECT_NE(out[0].status.message().find("outside [0, 2)"), std::string::npos);

  out.clear();
  s.OnRegister(Addr(), WorkerRequest(204), t0_, &out);  // the second worker: fine
  s.OnRegister(Addr(), WorkerRequest(205), t0_, &out);  // a third worker: refused
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].status.code(), StatusCode::kResourceExhausted);
  EXPECT_NE(out[0].status.message().find("cluster.num_workers"), std::string::npos);
  EXPECT_FALSE(s.rendezvous_complete());
}

TEST_F(JobStateTest, WorkersResolveDenseTableSizeAndConflictsAreRefused) {
  config::PsConfig job = TestJob(1, 2);
  job.tables[1].size = 0;  // the model's parameter count, which the workers know
  JobState s(job, 1, t0_);
  proto::RegisterRequest w0 = WorkerRequest(201);
  proto::TableSpec* t = w0.add_tables();
  t->set_name("mlp");
  t->set_size(77);
  proto::RegisterRequest w1 = w0;
  w1.set_pid(202);
  w1.mutable_tables(0)->set_size(78);
  Outbox out;
  s.OnRegister(Addr(), w0, t0_, &out);
  s.OnRegister(Addr(), w1, t0_, &out);
  ASSERT_EQ(out.size(), 1u);
  EXPECT_NE(out[0].status.message().find("77 floats but this worker needs 78"), std::string::npos)
      << out[0].status.message();
  out.clear();
  s.OnRegister(Addr(), WorkerRequest(203), t0_, &out);
  s.OnRegister(Addr(), ServerRequest(100), t0_, &out);
  ASSERT_EQ(out.size(), 3u);
  proto::RegisterReply reply;
  ASSERT_TRUE(reply.ParseFromArray(out[0].payload.data(), static_cast<int>(out[0].payload.size())));
  EXPECT_EQ(reply.shard_map().tables(1).size(), 77u);
}

TEST_F(JobStateTest, StartupTimeoutFailsNamingWhoIsMissing) {
  JobState s(TestJob(2, 2, 2000, 1000), 1, t0_);
  Outbox out;
  s.OnRegister(Addr(), ServerRequest(100), t0_, &out);
  s.Tick(t0_ + Ms(999), &out);
  EXPECT_FALSE(s.shutting_down());
  s.Tick(t0_ + Ms(1000), &out);
  ASSERT_TRUE(s.shutting_down());
  const std::string failure = s.Snapshot().failure();
  EXPECT_NE(failure.find("missing 1 of 2 servers and 2 of 2 workers"), std::string::npos)
      << failure;
  EXPECT_NE(failure.find("pid 100"), std::string::npos) << failure;
  ASSERT_EQ(out.size(), 1u) << "the waiting server is told";
  EXPECT_EQ(out[0].status.code(), StatusCode::kAborted);
  EXPECT_TRUE(s.over(t0_ + Ms(1000)));
  EXPECT_FALSE(s.result().ok());
}

TEST_F(JobStateTest, SnapshotCountsEachNodesHeartbeats) {
  JobState s(TestJob(1, 2), 1, t0_);
  Rendezvous(&s, 2);
  Outbox out;
  s.OnHeartbeat(Addr(), MakeHeartbeat(proto::ROLE_WORKER, 0, 3), t0_ + Ms(10), &out);
  s.OnHeartbeat(Addr(), MakeHeartbeat(proto::ROLE_WORKER, 0, 3), t0_ + Ms(20), &out);
  s.OnHeartbeat(Addr(), MakeHeartbeat(proto::ROLE_SERVER, 0), t0_ + Ms(20), &out);
  proto::ClusterState st = s.Snapshot();
  ASSERT_EQ(st.nodes_size(), 3);
  EXPECT_EQ(st.nodes(0).heartbeats(), 1u);  // server 0
  EXPECT_EQ(st.nodes(1).heartbeats(), 2u);  // worker 0
  EXPECT_EQ(st.nodes(2).heartbeats(), 0u);  // worker 1: none yet
}

TEST_F(JobStateTest, SilentWorkerIsMarkedDeadOnceAndJobGoesOn) {
  JobState s(TestJob(1, 2, 500), 1, t0_);
  Rendezvous(&s, 2);
  Outbox out;
  s.OnHeartbeat(Addr(), MakeHeartbeat(proto::ROLE_SERVER, 0), t0_ + Ms(400), &out);
  s.OnHeartbeat(Addr(), MakeHeartbeat(proto::ROLE_WORKER, 0, 5), t0_ + Ms(400), &out);
  s.Tick(t0_ + Ms(501), &out);  // worker 1 silent since the rendezvous
  proto::ClusterState st = s.Snapshot();
  ASSERT_EQ(st.nodes_size(), 3);
  EXPECT_TRUE(st.nodes(1).alive());
  EXPECT_EQ(st.nodes(1).clock(), 5);
  EXPECT_FALSE(st.nodes(2).alive());
  EXPECT_FALSE(s.shutting_down()) << "a dead worker does not fail the job";
  EXPECT_TRUE(st.failure().empty());

  out.clear();
  s.OnHeartbeat(Addr(), MakeHeartbeat(proto::ROLE_WORKER, 1), t0_ + Ms(600), &out);
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].status.code(), StatusCode::kFailedPrecondition) << "a dead node stays dead";

  proto::WorkerReport report;
  report.set_rank(0);
  s.OnReport(Addr(), report, t0_ + Ms(700), &out);
  EXPECT_TRUE(s.Snapshot().done()) << "every LIVE worker reported";
  EXPECT_TRUE(s.result().ok());
  EXPECT_FALSE(s.over(t0_ + Ms(700))) << "the server has not been told yet";
  out.clear();
  s.OnHeartbeat(Addr(), MakeHeartbeat(proto::ROLE_SERVER, 0), t0_ + Ms(750), &out);
  proto::ClusterState told;
  ASSERT_TRUE(told.ParseFromArray(out[0].payload.data(), static_cast<int>(out[0].payload.size())));
  EXPECT_TRUE(told.shutting_down());
  EXPECT_TRUE(s.over(t0_ + Ms(750)));
}

TEST_F(JobStateTest, DeadServerFailsTheJob) {
  JobState s(TestJob(1, 1, 500), 1, t0_);
  Rendezvous(&s, 1);
  Outbox out;
  s.OnHeartbeat(Addr(), MakeHeartbeat(proto::ROLE_WORKER, 0), t0_ + Ms(400), &out);
  s.Tick(t0_ + Ms(501), &out);
  ASSERT_TRUE(s.shutting_down());
  const std::string failure = s.Snapshot().failure();
  EXPECT_NE(failure.find("server 0 (pid 100) sent no heartbeat for 500 ms"), std::string::npos)
      << failure;
  EXPECT_EQ(s.result().code(), StatusCode::kAborted);
  EXPECT_FALSE(s.over(t0_ + Ms(502))) << "the live worker must hear about it first";
  EXPECT_TRUE(s.over(t0_ + Ms(501 + 500))) << "... or the grace period ends";
}

TEST_F(JobStateTest, ReportedWorkerMayStopHeartbeating) {
  JobState s(TestJob(1, 2, 500), 1, t0_);
  Rendezvous(&s, 2);
  Outbox out;
  proto::WorkerReport report;
  report.set_rank(1);
  s.OnReport(Addr(), report, t0_ + Ms(100), &out);
  s.OnHeartbeat(Addr(), MakeHeartbeat(proto::ROLE_SERVER, 0), t0_ + Ms(450), &out);
  s.OnHeartbeat(Addr(), MakeHeartbeat(proto::ROLE_WORKER, 0), t0_ + Ms(450), &out);
  s.Tick(t0_ + Ms(800), &out);
  EXPECT_TRUE(s.Snapshot().nodes(2).alive());
  EXPECT_FALSE(s.Snapshot().done());
}

TEST_F(JobStateTest, BarrierWaitsForEveryLiveWorkerAndADeathReleasesIt) {
  JobState s(TestJob(1, 3, 500), 1, t0_);
  Rendezvous(&s, 3);
  Outbox out;
  proto::BarrierRequest b;
  b.set_name("epoch-1");
  b.set_role(proto::ROLE_WORKER);
  for (int rank : {0, 1}) {
    b.set_rank(rank);
    s.OnBarrier(Addr(), b, t0_ + Ms(10), &out);
  }
  EXPECT_TRUE(out.empty());
  for (int rank : {0, 1}) {
    s.OnHeartbeat(Addr(), MakeHeartbeat(proto::ROLE_WORKER, rank), t0_ + Ms(400), &out);
  }
  s.OnHeartbeat(Addr(), MakeHeartbeat(proto::ROLE_SERVER, 0), t0_ + Ms(400), &out);
  out.clear();
  s.Tick(t0_ + Ms(501), &out);  // worker 2 dies
  ASSERT_EQ(out.size(), 2u);
  ExpectOk(out, 0);
  ExpectOk(out, 1);
  std::set<uint64_t> released{out[0].to.request_id, out[1].to.request_id};
  EXPECT_EQ(released.size(), 2u);

  out.clear();  // the barrier can be used again, by the two live workers
  b.set_rank(0);
  s.OnBarrier(Addr(), b, t0_ + Ms(510), &out);
  EXPECT_TRUE(out.empty());
  b.set_rank(1);
  s.OnBarrier(Addr(), b, t0_ + Ms(510), &out);
  EXPECT_EQ(out.size(), 2u);
}

TEST_F(JobStateTest, ShutdownRequestFailsWithTheReason) {
  JobState s(TestJob(1, 1), 1, t0_);
  Rendezvous(&s, 1);
  Outbox out;
  s.OnShutdown(Addr(), "operator pressed stop", t0_, &out);
  ASSERT_EQ(out.size(), 1u);
  ExpectOk(out, 0);
  EXPECT_TRUE(s.Snapshot().shutting_down());
  EXPECT_EQ(s.result().message(), "operator pressed stop");
}

// A server that registered with sends_server_report keeps the job from being over until its
// ServerReport arrived (or the grace period ended); the report is kept in the state.
TEST_F(JobStateTest, KeepsServerReportsAndWaitsForThem) {
  JobState s(TestJob(2, 1, 500), 1, t0_);
  Outbox out;
  for (int pid : {100, 101}) {
    proto::RegisterRequest req = ServerRequest(pid, pid - 100);
    req.set_sends_server_report(true);
    s.OnRegister(Addr(), req, t0_, &out);
  }
  s.OnRegister(Addr(), WorkerRequest(200), t0_, &out);
  ASSERT_TRUE(s.rendezvous_complete());
  proto::WorkerReport report;
  report.set_rank(0);
  s.OnReport(Addr(), report, t0_ + Ms(100), &out);
  ASSERT_TRUE(s.Snapshot().done());
  for (int rank : {0, 1}) {
    s.OnHeartbeat(Addr(), MakeHeartbeat(proto::ROLE_SERVER, rank), t0_ + Ms(150), &out);
  }
  EXPECT_FALSE(s.over(t0_ + Ms(150))) << "both servers were told but none reported yet";

  proto::ServerReport r0;
  r0.set_rank(0);
  r0.mutable_stats()->set_windows_applied(40);
  r0.mutable_stats()->add_staleness_histogram(7);
  r0.set_decode_seconds(0.25);
  out.clear();
  s.OnServerReport(Addr(), r0, t0_ + Ms(160), &out);
  ASSERT_EQ(out.size(), 1u);
  ExpectOk(out, 0);
  EXPECT_FALSE(s.over(t0_ + Ms(160))) << "server 1 has not reported";

  proto::ServerReport r1;
  r1.set_rank(1);
  r1.mutable_stats()->set_windows_applied(41);
  s.OnServerReport(Addr(), r1, t0_ + Ms(170), &out);
  EXPECT_TRUE(s.over(t0_ + Ms(170)));
  EXPECT_TRUE(s.result().ok());
  proto::ClusterState st = s.Snapshot();
  ASSERT_EQ(st.server_reports_size(), 2);
  EXPECT_EQ(st.server_reports(0).rank(), 0);
  EXPECT_EQ(st.server_reports(0).stats().windows_applied(), 40u);
  EXPECT_EQ(st.server_reports(0).stats().staleness_histogram(0), 7u);
  EXPECT_DOUBLE_EQ(st.server_reports(0).decode_seconds(), 0.25);
  EXPECT_EQ(st.server_reports(1).stats().windows_applied(), 41u);

  out.clear();
  r1.set_rank(5);
  s.OnServerReport(Addr(), r1, t0_ + Ms(180), &out);
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].status.code(), StatusCode::kNotFound) << out[0].status.ToString();
}

TEST_F(JobStateTest, ServerThatNeverReportsIsWaitedForOnlyTheGracePeriod) {
  JobState s(TestJob(1, 1, 500), 1, t0_);
  Outbox out;
  proto::RegisterRequest req = ServerRequest(100);
  req.set_sends_server_report(true);
  s.OnRegister(Addr(), req, t0_, &out);
  s.OnRegister(Addr(), WorkerRequest(200), t0_, &out);
  proto::WorkerReport report;
  report.set_rank(0);
  s.OnReport(Addr(), report, t0_ + Ms(100), &out);
  s.OnHeartbeat(Addr(), MakeHeartbeat(proto::ROLE_SERVER, 0), t0_ + Ms(150), &out);
  EXPECT_FALSE(s.over(t0_ + Ms(599)));
  EXPECT_TRUE(s.over(t0_ + Ms(600))) << "the grace period (heartbeat_timeout_ms) bounds the wait";
  EXPECT_TRUE(s.result().ok());
  EXPECT_EQ(s.Snapshot().server_reports_size(), 0);
}

}  // namespace
}  // namespace osprey::coordinator

namespace osprey::coordinator {
namespace {

// NCCL host groups: workers on the same host get local ranks by worker rank, and OP_HOST_GROUP
// hands local rank 0's id to every worker of that host (also to those who asked first).
TEST(JobStateHostGroupTest, LocalRanksAndIdExchange) {
  const Clock::time_point t0 = Clock::now();
  JobState s(testing::TestJob(1, 3), 7, t0);
  Outbox out;
  uint64_t id = 1;
  s.OnRegister(ReplyAddress{1, id++}, testing::ServerRequest(100), t0, &out);
  for (int w = 0; w < 3; ++w) {
    proto::RegisterRequest r = testing::WorkerRequest(200 + w, w);
    r.set_host(w == 1 ? "b" : "a");  // ranks 0 and 2 on host a, rank 1 alone on b
    s.OnRegister(ReplyAddress{1, id++}, r, t0, &out);
  }
  ASSERT_EQ(out.size(), 4u);
  std::map<int, std::pair<int, int>> local;  // rank -> (local rank, local size)
  for (size_t i = 1; i < out.size(); ++i) {
    proto::RegisterReply reply;
    ASSERT_TRUE(reply.ParseFromArray(out[i].payload.data(), static_cast<int>(out[i].payload.size())));
    local[reply.rank()] = {reply.local_rank(), reply.local_size()};
  }
  EXPECT_EQ(local[0], std::make_pair(0, 2));
  EXPECT_EQ(local[2], std::make_pair(1, 2));
  EXPECT_EQ(local[1], std::make_pair(0, 1));

  auto request = [](int rank, const std::string& nccl_id) {
    proto::HostGroupRequest r;
    r.set_rank(rank);
    r.set_nccl_id(nccl_id);
    return r;
  };
  out.clear();
  s.OnHostGroup(ReplyAddress{2, 50}, request(2, ""), &out);  // local rank 1 asks first: waits
  EXPECT_TRUE(out.empty());
  s.OnHostGroup(ReplyAddress{3, 51}, request(0, ""), &out);  // local rank 0 without an id
  ASSERT_EQ(out.size(), 1u);
  EXPECT_NE(out[0].status.message().find("must send the NCCL unique id"), std::string::npos);
  out.clear();
  s.OnHostGroup(ReplyAddress{3, 52}, request(0, "ID-A"), &out);  // answers both
  ASSERT_EQ(out.size(), 2u);
  for (const OutgoingReply& r : out) {
    ASSERT_TRUE(r.status.ok()) << r.status.ToString();
    proto::HostGroupReply reply;
    ASSERT_TRUE(reply.ParseFromArray(r.payload.data(), static_cast<int>(r.payload.size())));
    EXPECT_EQ(reply.nccl_id(), "ID-A");
    EXPECT_EQ(reply.local_size(), 2);
    EXPECT_EQ(reply.local_rank(), r.to.request_id == 50 ? 1 : 0);
  }
  out.clear();
  s.OnHostGroup(ReplyAddress{4, 53}, request(2, "X"), &out);  // only local rank 0 sends an id
  ASSERT_EQ(out.size(), 1u);
  EXPECT_NE(out[0].status.message().find("only local rank 0"), std::string::npos);
  out.clear();
  s.OnHostGroup(ReplyAddress{4, 54}, request(9, ""), &out);  // not a worker
  ASSERT_EQ(out.size(), 1u);
  EXPECT_FALSE(out[0].status.ok());
  out.clear();
  s.OnHostGroup(ReplyAddress{4, 55}, request(1, std::string(1025, 'x')), &out);  // oversized id
  ASSERT_EQ(out.size(), 1u);
  EXPECT_NE(out[0].status.message().find("1025 bytes (at most 1024)"), std::string::npos)
      << out[0].status.ToString();
}

}  // namespace
}  // namespace osprey::coordinator
