// JobState's bsp rollback rules (coordinator/job_state_rollback.cc), driven with a fake clock.
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

class JobStateRollbackTest : public testing::JobStateFixture {
 protected:

  static proto::RegisterRequest Server(int pid, int rank, uint64_t incarnation) {
    proto::RegisterRequest r = ServerRequest(pid, rank);
    r.set_incarnation(incarnation);
    return r;
  }
  // Three servers (incarnations 1000..1002) and one worker.
  void Rendezvous(JobState* s) {
    Outbox out;
    for (int r = 0; r < 3; ++r) s->OnRegister(Addr(), Server(100 + r, r, 1000 + r), t0_, &out);
    s->OnRegister(Addr(), WorkerRequest(200, 0), t0_, &out);
    ASSERT_TRUE(s->rendezvous_complete());
  }
  // Replaces server `rank` (asking for a rollback when `bsp`); returns the reply's generation.
  uint64_t Replace(JobState* s, int rank, uint64_t incarnation, bool bsp, Clock::time_point at) {
    Outbox out;
    proto::RegisterRequest r = Server(300 + rank, rank, incarnation);
    r.set_endpoint("tcp://10.0.0.9:700" + std::to_string(rank));
    r.set_bsp_rollback(bsp);
    s->OnRegister(Addr(), r, at, &out);
    EXPECT_EQ(out.size(), 1u);
    if (out.empty() || !out[0].status.ok()) return ~uint64_t{0};
    proto::RegisterReply reply;
    EXPECT_TRUE(reply.ParseFromArray(out[0].payload.data(), static_cast<int>(out[0].payload.size())));
    EXPECT_TRUE(reply.replaced());
    return reply.rollback_generation();
  }
  // A server's heartbeat acknowledging `generation` at `clock`; returns the state it gets back.
  proto::ClusterState Ack(JobState* s, int rank, uint64_t incarnation, uint64_t generation,
                          int64_t clock, Clock::time_point at) {
    Outbox out;
    proto::Heartbeat hb = MakeHeartbeat(proto::ROLE_SERVER, rank);
    hb.set_incarnation(incarnation);
    hb.set_rollback_acked(generation);
    hb.set_rollback_cut_clock(clock);
    s->OnHeartbeat(Addr(), hb, at, &out);
    EXPECT_FALSE(out.empty());
    return s->Snapshot();
  }
};

TEST_F(JobStateRollbackTest, NoRollbackUntilAReplacementAsks) {
  JobState s(TestJob(3, 1, 500), 7, t0_);
  Rendezvous(&s);
  EXPECT_EQ(s.Snapshot().rollback_generation(), 0u);
  // An async / redis replacement does not ask: nothing rolls back.
  EXPECT_EQ(Replace(&s, 1, 5001, /*bsp=*/false, t0_ + Ms(10)), 0u);
  EXPECT_EQ(s.Snapshot().rollback_generation(), 0u);
  EXPECT_FALSE(s.Snapshot().rollback_ready());
}

TEST_F(JobStateRollbackTest, ReadyOnceEveryServerRolledBackToTheReplacementsCut) {
  JobState s(TestJob(3, 1, 500), 7, t0_);
  Rendezvous(&s);
  const uint64_t g = Replace(&s, 1, 5001, /*bsp=*/true, t0_ + Ms(10));
  EXPECT_EQ(g, 1u);
  proto::ClusterState st = s.Snapshot();
  EXPECT_EQ(st.rollback_generation(), 1u);
  EXPECT_FALSE(st.rollback_clock_known()) << "the cut is the replacement's to find";
  EXPECT_FALSE(st.rollback_ready());

  // A heartbeat of an earlier generation (0) fixes nothing.
  st = Ack(&s, 0, 1000, 0, 99, t0_ + Ms(20));
  EXPECT_FALSE(st.rollback_clock_known());
  // The replacement restored cut 8: the job's cut.
  st = Ack(&s, 1, 5001, g, 8, t0_ + Ms(30));
  ASSERT_TRUE(st.rollback_clock_known());
  EXPECT_EQ(st.rollback_clock(), 8);
  EXPECT_FALSE(st.rollback_ready());
  st = Ack(&s, 0, 1000, g, 8, t0_ + Ms(40));
  EXPECT_FALSE(st.rollback_ready()) << "server 2 has not rolled back yet";
  st = Ack(&s, 2, 1002, g, 8, t0_ + Ms(50));
  EXPECT_TRUE(st.rollback_ready());
  EXPECT_EQ(st.rollback_clock(), 8);
  EXPECT_FALSE(s.shutting_down());
}

TEST_F(JobStateRollbackTest, AServerAtAnotherClockFailsTheJob) {
  JobState s(TestJob(3, 1, 500), 7, t0_);
  Rendezvous(&s);
  const uint64_t g = Replace(&s, 2, 5002, true, t0_ + Ms(10));
  Ack(&s, 2, 5002, g, 6, t0_ + Ms(20));
  proto::ClusterState st = Ack(&s, 0, 1000, g, 9, t0_ + Ms(30));
  EXPECT_TRUE(s.shutting_down());
  EXPECT_NE(st.failure().find("rolled back to clock 9, the cut is clock 6"), std::string::npos)
      << st.failure();
  EXPECT_FALSE(st.rollback_ready());
}

TEST_F(JobStateRollbackTest, ASecondReplacementStartsTheNextGeneration) {
  JobState s(TestJob(3, 1, 500), 7, t0_);
  Rendezvous(&s);
  const uint64_t g1 = Replace(&s, 1, 5001, true, t0_ + Ms(10));
  Ack(&s, 1, 5001, g1, 8, t0_ + Ms(20));
  Ack(&s, 0, 1000, g1, 8, t0_ + Ms(30));
  // Server 2 is replaced before it rolled back: generation 2, the cut to be found again.
  const uint64_t g2 = Replace(&s, 2, 5002, true, t0_ + Ms(40));
  EXPECT_EQ(g2, g1 + 1);
  proto::ClusterState st = s.Snapshot();
  EXPECT_FALSE(st.rollback_clock_known());
  // Late acknowledgements of generation 1 count for nothing.
  st = Ack(&s, 0, 1000, g1, 8, t0_ + Ms(50));
  EXPECT_FALSE(st.rollback_clock_known());
  for (auto [rank, inc] : {std::pair<int, uint64_t>{2, 5002}, {0, 1000}, {1, 5001}}) {
    st = Ack(&s, rank, inc, g2, 4, t0_ + Ms(60));
  }
  EXPECT_TRUE(st.rollback_ready());
  EXPECT_EQ(st.rollback_clock(), 4);
}

TEST_F(JobStateRollbackTest, ADeadServerDoesNotHoldTheRollback) {
  config::PsConfig job = TestJob(3, 1, 500);
  job.cluster.server_replace_timeout_ms = 60000;  // the dead server waits for its replacement
  JobState s(job, 7, t0_);
  Rendezvous(&s);
  const uint64_t g = Replace(&s, 1, 5001, true, t0_ + Ms(10));
  Outbox out;
  // Heartbeats of everyone but server 2 until it is marked dead.
  for (int t = 100; t <= 700; t += 100) {
    Ack(&s, 0, 1000, 0, 0, t0_ + Ms(t));
    Ack(&s, 1, 5001, 0, 0, t0_ + Ms(t));
    s.OnHeartbeat(Addr(), MakeHeartbeat(proto::ROLE_WORKER, 0), t0_ + Ms(t), &out);
  }
  s.Tick(t0_ + Ms(701), &out);
  ASSERT_FALSE(s.Snapshot().nodes(2).alive());
  Ack(&s, 1, 5001, g, 3, t0_ + Ms(710));
  proto::ClusterState st = Ack(&s, 0, 1000, g, 3, t0_ + Ms(720));
  EXPECT_TRUE(st.rollback_ready()) << "a dead server rolls back when it is replaced";
  EXPECT_FALSE(s.shutting_down());
}

}  // namespace
}  // namespace osprey::coordinator
