// JobState's rejoin rules (coordinator/job_state_rejoin.cc): a worker registering after the
// rendezvous with its rank takes the rank over, dead or still believed alive. Fake clock, no
// threads, no transport.
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

class JobStateRejoinTest : public ::testing::Test {
 protected:
  const Clock::time_point t0_ = Clock::now();
  uint64_t next_id_ = 1;
  JobState s_{TestJob(1, 2), 7, t0_};  // heartbeat timeout 2000 ms

  ReplyAddress Addr() { return ReplyAddress{1, next_id_++}; }

  static proto::RegisterRequest Worker(int pid, int rank, uint64_t incarnation) {
    proto::RegisterRequest r = WorkerRequest(pid, rank);
    r.set_incarnation(incarnation);
    return r;
  }
  static proto::Heartbeat Beat(int rank, int64_t clock, uint64_t incarnation) {
    proto::Heartbeat h = MakeHeartbeat(proto::ROLE_WORKER, rank, clock);
    h.set_incarnation(incarnation);
    return h;
  }
  void SetUp() override {
    Outbox out;
    s_.OnRegister(Addr(), ServerRequest(100), t0_, &out);
    s_.OnRegister(Addr(), Worker(200, 0, 11), t0_, &out);
    s_.OnRegister(Addr(), Worker(201, 1, 12), t0_, &out);
    ASSERT_TRUE(s_.rendezvous_complete());
  }
  // Registers (role worker, rank) as a new process; returns the single reply.
  OutgoingReply Rejoin(const proto::RegisterRequest& req, Clock::time_point now) {
    Outbox out;
    s_.OnRegister(Addr(), req, now, &out);
    EXPECT_EQ(out.size(), 1u);
    return out.empty() ? OutgoingReply{} : out[0];
  }
  static proto::RegisterReply Parse(const OutgoingReply& r) {
    proto::RegisterReply reply;
    EXPECT_TRUE(reply.ParseFromArray(r.payload.data(), static_cast<int>(r.payload.size())));
    return reply;
  }
  const proto::NodeState& WorkerState(int rank) {
    snapshot_ = s_.Snapshot();
    for (const proto::NodeState& n : snapshot_.nodes()) {
      if (n.role() == proto::ROLE_WORKER && n.rank() == rank) return n;
    }
    ADD_FAILURE() << "no worker " << rank;
    return snapshot_.nodes(0);
  }
  proto::ClusterState snapshot_;
};

TEST_F(JobStateRejoinTest, DeadWorkerRejoinsAtItsClockAndIsWaitedForAgain) {
  Outbox out;
  s_.OnHeartbeat(Addr(), Beat(1, 7, 12), t0_ + Ms(100), &out);
  s_.OnHeartbeat(Addr(), MakeHeartbeat(proto::ROLE_SERVER, 0), t0_ + Ms(2000), &out);
  s_.OnHeartbeat(Addr(), Beat(0, 20, 11), t0_ + Ms(2000), &out);
  s_.Tick(t0_ + Ms(2200), &out);
  ASSERT_FALSE(WorkerState(1).alive());
  ASSERT_FALSE(s_.shutting_down());

  OutgoingReply r = Rejoin(Worker(301, 1, 99), t0_ + Ms(2300));
  ASSERT_TRUE(r.status.ok()) << r.status.ToString();
  proto::RegisterReply reply = Parse(r);
  EXPECT_EQ(reply.rank(), 1);
  EXPECT_TRUE(reply.rejoined());
  EXPECT_EQ(reply.resume_clock(), 7);
  EXPECT_EQ(reply.session_id(), 7u);
  EXPECT_EQ(reply.shard_map().server_endpoints_size(), 1);
  EXPECT_TRUE(WorkerState(1).alive());
  EXPECT_EQ(WorkerState(1).rejoins(), 1u);
  EXPECT_EQ(WorkerState(1).clock(), 7) << "the clock never goes back";

  // The barrier waits for the revived rank again.
  proto::BarrierRequest b;
  b.set_name("train-done");
  b.set_role(proto::ROLE_WORKER);
  b.set_rank(0);
  out.clear();
  s_.OnBarrier(Addr(), b, t0_ + Ms(2400), &out);
  EXPECT_TRUE(out.empty()) << "released without the rejoined worker";
  b.set_rank(1);
  s_.OnBarrier(Addr(), b, t0_ + Ms(2400), &out);
  EXPECT_EQ(out.size(), 2u);

  // ... and so does "every live worker reported".
  proto::WorkerReport rep;
  rep.set_rank(0);
  out.clear();
  s_.OnReport(Addr(), rep, t0_ + Ms(2500), &out);
  EXPECT_FALSE(s_.Snapshot().done());
  rep.set_rank(1);
  s_.OnReport(Addr(), rep, t0_ + Ms(2500), &out);
  EXPECT_TRUE(s_.Snapshot().done());
  EXPECT_TRUE(s_.result().ok()) << s_.result().ToString();
}

TEST_F(JobStateRejoinTest, LiveWorkerIsSupersededAtOnceAndItsOldProcessRefused) {
  Outbox out;
  s_.OnHeartbeat(Addr(), Beat(1, 5, 12), t0_ + Ms(100), &out);
  proto::BarrierRequest b;
  b.set_name("train-done");
  b.set_role(proto::ROLE_WORKER);
  b.set_rank(1);
  s_.OnBarrier(Addr(), b, t0_ + Ms(150), &out);  // the old process waits, then is killed

  OutgoingReply r = Rejoin(Worker(301, 1, 99), t0_ + Ms(200));
  ASSERT_TRUE(r.status.ok()) << r.status.ToString();
  EXPECT_EQ(Parse(r).resume_clock(), 5);
  EXPECT_EQ(WorkerState(1).rejoins(), 1u);

  out.clear();
  s_.OnHeartbeat(Addr(), Beat(1, 6, 12), t0_ + Ms(250), &out);
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].status.code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(out[0].status.message().find("superseded"), std::string::npos) << out[0].status.message();
  EXPECT_EQ(WorkerState(1).clock(), 5) << "a superseded heartbeat must not move the clock";
  out.clear();
  s_.OnHeartbeat(Addr(), Beat(1, 6, 99), t0_ + Ms(250), &out);
  ASSERT_EQ(out.size(), 1u);
  EXPECT_TRUE(out[0].status.ok());
  EXPECT_EQ(WorkerState(1).clock(), 6);

  // The old process's barrier wait was dropped: worker 0 alone does not release it.
  b.set_rank(0);
  out.clear();
  s_.OnBarrier(Addr(), b, t0_ + Ms(300), &out);
  EXPECT_TRUE(out.empty());
  b.set_rank(1);
  s_.OnBarrier(Addr(), b, t0_ + Ms(300), &out);
  ASSERT_EQ(out.size(), 2u);
  for (const OutgoingReply& o : out) EXPECT_TRUE(o.status.ok()) << o.status.ToString();
}

TEST_F(JobStateRejoinTest, RetriedRegistrationOfTheSameProcessChangesNothing) {
  OutgoingReply first = Rejoin(Worker(301, 1, 99), t0_ + Ms(100));
  OutgoingReply again = Rejoin(Worker(301, 1, 99), t0_ + Ms(150));
  ASSERT_TRUE(first.status.ok() && again.status.ok());
  EXPECT_EQ(Parse(again).rank(), 1);
  EXPECT_EQ(WorkerState(1).rejoins(), 1u);
}

TEST_F(JobStateRejoinTest, RefusesWithoutARankAfterTheReportAndWhenShuttingDown) {
  OutgoingReply r = Rejoin(Worker(301, -1, 99), t0_ + Ms(100));
  EXPECT_EQ(r.status.code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(r.status.message().find("--rank R"), std::string::npos) << r.status.message();

  Outbox out;
  proto::WorkerReport rep;
  rep.set_rank(1);
  s_.OnReport(Addr(), rep, t0_ + Ms(100), &out);
  r = Rejoin(Worker(302, 1, 98), t0_ + Ms(150));
  EXPECT_EQ(r.status.code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(r.status.message().find("already sent its final report"), std::string::npos)
      << r.status.message();

  s_.OnShutdown(Addr(), "test over", t0_ + Ms(200), &out);
  r = Rejoin(Worker(303, 0, 97), t0_ + Ms(250));
  EXPECT_EQ(r.status.code(), StatusCode::kAborted);
}

}  // namespace
}  // namespace osprey::coordinator
