// JobState's recovery rules (coordinator restart, #12 item 3; job_state_recover.cc), driven with a
// fake clock: no threads, no transport.
#include <gtest/gtest.h>

#include "coordinator/job_state.h"
#include "tests/coordinator/coordinator_test_util.h"

namespace osprey::coordinator {
namespace {

using testing::MakeHeartbeat;
using testing::ServerRequest;
using testing::TestJob;
using testing::WorkerRequest;
using Ms = std::chrono::milliseconds;

constexpr uint64_t kSession = 0x42;
constexpr int kTimeoutMs = 2000;  // TestJob's heartbeat timeout: also the recovery timeout

class JobStateRecoverTest : public ::testing::Test {
 protected:
  const Clock::time_point t0_ = Clock::now();
  uint64_t next_id_ = 1;
  // 1 server, 2 workers, recovering since t0_.
  JobState state_{TestJob(1, 2, kTimeoutMs), /*session_id=*/0, t0_};

  void SetUp() override { state_.BeginRecovery(t0_); }

  ReplyAddress Addr() { return ReplyAddress{1, next_id_++}; }

  static proto::RegisterRequest Rejoin(proto::Role role, int rank, uint64_t session = kSession,
                                       uint64_t incarnation = 0) {
    proto::RegisterRequest r = role == proto::ROLE_SERVER ? ServerRequest(100 + rank, rank)
                                                          : WorkerRequest(200 + rank, rank);
    r.set_rejoin(true);
    r.set_session_id(session);
    r.set_incarnation(incarnation != 0 ? incarnation : 1000 + 10 * rank + role);
    r.set_shard_epoch(1);
    r.set_clock(50 + rank);
    return r;
  }
  // Sends `req` and returns the one reply it got (status and, when OK, the RegisterReply).
  Status Send(const proto::RegisterRequest& req, proto::RegisterReply* reply = nullptr,
              Clock::time_point at = {}) {
    Outbox out;
    state_.OnRegister(Addr(), req, at == Clock::time_point{} ? t0_ : at, &out);
    EXPECT_GE(out.size(), 1u);
    if (out.empty()) return Internal("no reply");
    if (reply != nullptr && out[0].status.ok()) {
      EXPECT_TRUE(reply->ParseFromArray(out[0].payload.data(), static_cast<int>(out[0].payload.size())));
    }
    return out[0].status;
  }
  const proto::NodeState* NodeOf(const proto::ClusterState& s, proto::Role role, int rank) {
    for (const proto::NodeState& n : s.nodes()) {
      if (n.role() == role && n.rank() == rank) return &n;
    }
    return nullptr;
  }
};

TEST_F(JobStateRecoverTest, AdoptsTheSessionAndCompletesWhenEveryNodeIsBack) {
  EXPECT_TRUE(state_.recovering());
  EXPECT_TRUE(state_.Snapshot().recovering());
  proto::RegisterRequest server = Rejoin(proto::ROLE_SERVER, 0);
  server.set_shard_epoch(3);
  proto::RegisterReply reply;
  ASSERT_TRUE(Send(server, &reply).ok());
  EXPECT_TRUE(reply.recovered());
  EXPECT_EQ(reply.session_id(), kSession);
  EXPECT_EQ(reply.rank(), 0);
  ASSERT_TRUE(Send(Rejoin(proto::ROLE_WORKER, 0)).ok());
  EXPECT_TRUE(state_.recovering()) << "worker 1 is not back yet";

  // A node not back yet is told to re-register; one that is back heartbeats as usual.
  Outbox out;
  state_.OnHeartbeat(Addr(), MakeHeartbeat(proto::ROLE_WORKER, 1), t0_, &out);
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].status.code(), StatusCode::kUnavailable);
  EXPECT_NE(out[0].status.message().find("re-register"), std::string::npos) << out[0].status.message();
  out.clear();
  state_.OnHeartbeat(Addr(), MakeHeartbeat(proto::ROLE_WORKER, 0, 60), t0_, &out);
  ASSERT_EQ(out.size(), 1u);
  EXPECT_TRUE(out[0].status.ok()) << out[0].status.ToString();

  ASSERT_TRUE(Send(Rejoin(proto::ROLE_WORKER, 1), &reply).ok());
  EXPECT_FALSE(state_.recovering());
  proto::ClusterState s = state_.Snapshot();
  EXPECT_FALSE(s.recovering());
  EXPECT_EQ(s.epoch(), 3u) << "the newest epoch a node saw";
  EXPECT_EQ(reply.shard_map().server_endpoints(0), "inproc://server-pid-100");
  for (const proto::NodeState& n : s.nodes()) EXPECT_TRUE(n.alive()) << n.role() << " " << n.rank();
  EXPECT_EQ(NodeOf(s, proto::ROLE_WORKER, 0)->clock(), 60);
  EXPECT_EQ(NodeOf(s, proto::ROLE_WORKER, 1)->clock(), 51);
}

TEST_F(JobStateRecoverTest, RefusesAnotherSessionAFreshRegistrationAndAnotherIncarnation) {
  ASSERT_TRUE(Send(Rejoin(proto::ROLE_WORKER, 0)).ok());
  Status other = Send(Rejoin(proto::ROLE_WORKER, 1, /*session=*/0x43));
  EXPECT_EQ(other.code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(other.message().find("session 43"), std::string::npos) << other.message();
  EXPECT_NE(other.message().find("session 42"), std::string::npos) << other.message();

  Status fresh = Send(WorkerRequest(300));
  EXPECT_EQ(fresh.code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(fresh.message().find("--recover"), std::string::npos) << fresh.message();

  Status no_session = Send(Rejoin(proto::ROLE_WORKER, 1, /*session=*/0));
  EXPECT_EQ(no_session.code(), StatusCode::kInvalidArgument);
  Status bad_rank = Send(Rejoin(proto::ROLE_WORKER, 2));
  EXPECT_EQ(bad_rank.code(), StatusCode::kInvalidArgument);

  // The same process again (its reply was lost): answered again. Another process: refused.
  EXPECT_TRUE(Send(Rejoin(proto::ROLE_WORKER, 0)).ok());
  Status replaced = Send(Rejoin(proto::ROLE_WORKER, 0, kSession, /*incarnation=*/777));
  EXPECT_EQ(replaced.code(), StatusCode::kAlreadyExists) << replaced.ToString();
  EXPECT_TRUE(state_.recovering());
}

TEST_F(JobStateRecoverTest, MissingNodeIsMarkedDeadAfterTheTimeoutAndTheOthersGetAFreshGrace) {
  ASSERT_TRUE(Send(Rejoin(proto::ROLE_SERVER, 0)).ok());
  ASSERT_TRUE(Send(Rejoin(proto::ROLE_WORKER, 0)).ok());
  Outbox out;
  state_.Tick(t0_ + Ms(kTimeoutMs - 1), &out);
  EXPECT_TRUE(state_.recovering());
  // Nothing heartbeats during the recovery (the nodes re-registered at t0_).
  const Clock::time_point done = t0_ + Ms(kTimeoutMs);
  state_.Tick(done, &out);
  EXPECT_FALSE(state_.recovering());
  proto::ClusterState s = state_.Snapshot();
  EXPECT_FALSE(NodeOf(s, proto::ROLE_WORKER, 1)->alive()) << "never came back";
  EXPECT_TRUE(NodeOf(s, proto::ROLE_WORKER, 0)->alive());
  EXPECT_FALSE(s.shutting_down()) << "a dead worker does not fail the job";
  // A full heartbeat timeout counted from the end of the recovery, not from t0_.
  state_.Tick(done + Ms(kTimeoutMs - 1), &out);
  s = state_.Snapshot();
  EXPECT_TRUE(NodeOf(s, proto::ROLE_SERVER, 0)->alive());
  EXPECT_TRUE(NodeOf(s, proto::ROLE_WORKER, 0)->alive());
  EXPECT_FALSE(s.shutting_down());
  state_.Tick(done + Ms(kTimeoutMs + 1), &out);
  EXPECT_TRUE(state_.Snapshot().shutting_down()) << "the silent server is dead: the job fails";
}

TEST_F(JobStateRecoverTest, ServerThatNeverComesBackFailsTheJob) {
  ASSERT_TRUE(Send(Rejoin(proto::ROLE_WORKER, 0)).ok());
  ASSERT_TRUE(Send(Rejoin(proto::ROLE_WORKER, 1)).ok());
  Outbox out;
  state_.Tick(t0_ + Ms(kTimeoutMs), &out);
  proto::ClusterState s = state_.Snapshot();
  EXPECT_TRUE(s.shutting_down());
  EXPECT_NE(s.failure().find("server 0"), std::string::npos) << s.failure();
}

TEST_F(JobStateRecoverTest, ReportsAndDeathsCarriedByTheNodesAreRebuilt) {
  // Worker 1 reported (and exited) before the restart; the server's last state says so.
  proto::RegisterRequest server = Rejoin(proto::ROLE_SERVER, 0);
  proto::ClusterState* last = server.mutable_last_state();
  last->set_epoch(2);
  proto::WorkerReport* r = last->add_reports();
  r->set_rank(1);
  r->set_steps(400);
  proto::NodeState* w1 = last->add_nodes();
  w1->set_role(proto::ROLE_WORKER);
  w1->set_rank(1);
  w1->set_alive(true);
  w1->set_clock(400);
  ASSERT_TRUE(Send(server).ok());
  ASSERT_TRUE(Send(Rejoin(proto::ROLE_WORKER, 0)).ok());
  EXPECT_FALSE(state_.recovering()) << "a worker that reported is not waited for";
  proto::ClusterState s = state_.Snapshot();
  EXPECT_EQ(s.epoch(), 2u);
  ASSERT_EQ(s.reports_size(), 1);
  EXPECT_EQ(s.reports(0).steps(), 400u);
  EXPECT_TRUE(NodeOf(s, proto::ROLE_WORKER, 1)->alive());
  EXPECT_EQ(NodeOf(s, proto::ROLE_WORKER, 1)->clock(), 400);
  EXPECT_FALSE(s.done());
  // Worker 0's report ends the job as usual.
  proto::WorkerReport mine;
  mine.set_rank(0);
  Outbox out;
  state_.OnReport(Addr(), mine, t0_, &out);
  s = state_.Snapshot();
  EXPECT_TRUE(s.done());
  EXPECT_EQ(s.reports_size(), 2);
  EXPECT_TRUE(state_.result().ok()) << state_.result().ToString();
}

TEST_F(JobStateRecoverTest, DeadNodeInTheCarriedStateIsNotWaitedFor) {
  proto::RegisterRequest server = Rejoin(proto::ROLE_SERVER, 0);
  proto::NodeState* w1 = server.mutable_last_state()->add_nodes();
  w1->set_role(proto::ROLE_WORKER);
  w1->set_rank(1);
  w1->set_alive(false);
  ASSERT_TRUE(Send(server).ok());
  ASSERT_TRUE(Send(Rejoin(proto::ROLE_WORKER, 0)).ok());
  EXPECT_FALSE(state_.recovering());
  const proto::ClusterState s = state_.Snapshot();
  EXPECT_FALSE(NodeOf(s, proto::ROLE_WORKER, 1)->alive());
}

TEST_F(JobStateRecoverTest, EpochNeverGoesBack) {
  proto::RegisterRequest server = Rejoin(proto::ROLE_SERVER, 0);
  server.set_shard_epoch(5);
  ASSERT_TRUE(Send(server).ok());
  proto::RegisterRequest w0 = Rejoin(proto::ROLE_WORKER, 0);
  w0.set_shard_epoch(2);
  w0.mutable_last_state()->set_epoch(4);
  proto::RegisterReply reply;
  ASSERT_TRUE(Send(w0, &reply).ok());
  EXPECT_EQ(reply.shard_map().epoch(), 5u);
  EXPECT_EQ(state_.Snapshot().epoch(), 5u);
}

TEST_F(JobStateRecoverTest, BarriersHoldUntilRecoveredAndAReSentArrivalIsNotSuperseded) {
  ASSERT_TRUE(Send(Rejoin(proto::ROLE_SERVER, 0)).ok());
  ASSERT_TRUE(Send(Rejoin(proto::ROLE_WORKER, 0)).ok());
  proto::BarrierRequest b;
  b.set_name("train-done");
  b.set_role(proto::ROLE_WORKER);
  b.set_rank(0);
  const ReplyAddress w0_at{7, 99};
  Outbox out;
  state_.OnBarrier(w0_at, b, t0_, &out);
  state_.OnBarrier(w0_at, b, t0_, &out);  // the same request re-sent
  EXPECT_TRUE(out.empty()) << "held; a re-sent arrival is not a newer one";
  ASSERT_TRUE(Send(Rejoin(proto::ROLE_WORKER, 1)).ok());
  EXPECT_FALSE(state_.recovering());
  EXPECT_EQ(state_.barrier_waiters(), 1u);
  b.set_rank(1);
  state_.OnBarrier(ReplyAddress{8, 5}, b, t0_, &out);
  ASSERT_EQ(out.size(), 2u);
  for (const OutgoingReply& r : out) EXPECT_TRUE(r.status.ok()) << r.status.ToString();
}

TEST(JobStateRejoinLiveTest, LiveCoordinatorAnswersARejoinAsANoOpAndRefusesAnotherSession) {
  const Clock::time_point t0 = Clock::now();
  JobState s(TestJob(1, 1), kSession, t0);
  Outbox out;
  s.OnRegister(ReplyAddress{1, 1}, ServerRequest(100), t0, &out);
  s.OnRegister(ReplyAddress{1, 2}, WorkerRequest(200), t0, &out);
  ASSERT_TRUE(s.rendezvous_complete());
  out.clear();
  proto::RegisterRequest again = WorkerRequest(200, 0);
  again.set_rejoin(true);
  again.set_session_id(kSession);
  s.OnRegister(ReplyAddress{1, 3}, again, t0 + Ms(1500), &out);
  ASSERT_EQ(out.size(), 1u);
  ASSERT_TRUE(out[0].status.ok()) << out[0].status.ToString();
  proto::RegisterReply reply;
  ASSERT_TRUE(reply.ParseFromArray(out[0].payload.data(), static_cast<int>(out[0].payload.size())));
  EXPECT_FALSE(reply.recovered()) << "this coordinator never lost the worker";
  // The re-registration counts as a sign of life (the server, silent since t0, is dead by now).
  s.Tick(t0 + Ms(2500), &out);
  const proto::ClusterState after = s.Snapshot();
  for (const proto::NodeState& n : after.nodes()) {
    EXPECT_EQ(n.alive(), n.role() == proto::ROLE_WORKER) << n.role();
  }
  again.set_session_id(0x99);
  out.clear();
  s.OnRegister(ReplyAddress{1, 4}, again, t0, &out);
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].status.code(), StatusCode::kFailedPrecondition);
}

TEST(JobStateRejoinLiveTest, CoordinatorWithoutRecoverRefusesARejoinClearly) {
  JobState s(TestJob(1, 1), kSession, Clock::now());
  proto::RegisterRequest again = WorkerRequest(200, 0);
  again.set_rejoin(true);
  again.set_session_id(kSession);
  Outbox out;
  s.OnRegister(ReplyAddress{1, 1}, again, Clock::now(), &out);
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].status.code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(out[0].status.message().find("not started with --recover"), std::string::npos)
      << out[0].status.message();
}

}  // namespace
}  // namespace osprey::coordinator
