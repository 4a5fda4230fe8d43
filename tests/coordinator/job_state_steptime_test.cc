// JobState's median step time (job_state_steptime.cc), the adaptive per-node ratio's target:
// over the live workers that reported one, carried by every heartbeat reply.
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

class JobStateStepTimeTest : public testing::JobStateFixture {
 protected:

  void Rendezvous(JobState* s, int workers) {
    Outbox out;
    s->OnRegister(Addr(), ServerRequest(100), t0_, &out);
    for (int w = 0; w < workers; ++w) s->OnRegister(Addr(), WorkerRequest(200 + w, w), t0_, &out);
    ASSERT_TRUE(s->rendezvous_complete());
  }
  // Worker `rank`'s heartbeat with `seconds` of own step time at t0 + ms; returns the reply.
  // `clock` is the worker's step, `exempt` its Heartbeat.barrier_exempt.
  proto::ClusterState Beat(JobState* s, int rank, double seconds, int ms, int64_t clock = 1,
                           bool exempt = false) {
    Outbox out;
    proto::Heartbeat hb = MakeHeartbeat(proto::ROLE_WORKER, rank, clock);
    hb.set_step_seconds(seconds);
    hb.set_density(0.05);
    hb.set_barrier_exempt(exempt);
    s->OnHeartbeat(Addr(), hb, t0_ + Ms(ms), &out);
    proto::ClusterState st;
    EXPECT_EQ(out.size(), 1u);
    if (out.size() == 1) {
      EXPECT_TRUE(out[0].status.ok()) << out[0].status.ToString();
      EXPECT_TRUE(st.ParseFromArray(out[0].payload.data(), static_cast<int>(out[0].payload.size())));
    }
    return st;
  }
};

TEST_F(JobStateStepTimeTest, MedianOverWorkersThatReportedNeedsTwo) {
  JobState s(TestJob(1, 4), 1, t0_);
  Rendezvous(&s, 4);
  EXPECT_EQ(Beat(&s, 0, 0.010, 10).median_step_seconds(), 0) << "one worker has no one to be slower than";
  EXPECT_DOUBLE_EQ(Beat(&s, 1, 0.030, 10).median_step_seconds(), 0.020);  // even count: the middle two
  EXPECT_DOUBLE_EQ(Beat(&s, 2, 0.100, 10).median_step_seconds(), 0.030);  // odd count: the middle one
  EXPECT_DOUBLE_EQ(Beat(&s, 3, 0, 10).median_step_seconds(), 0.030) << "0: no step time yet, not counted";
  const proto::ClusterState st = s.Snapshot();
  EXPECT_DOUBLE_EQ(st.median_step_seconds(), 0.030);
  ASSERT_EQ(st.nodes_size(), 5);
  EXPECT_DOUBLE_EQ(st.nodes(3).step_seconds(), 0.100);  // worker 2 (after the server)
  EXPECT_DOUBLE_EQ(st.nodes(3).density(), 0.05);
}

TEST_F(JobStateStepTimeTest, DeadWorkersLeaveTheMedian) {
  JobState s(TestJob(1, 3, 500), 1, t0_);
  Rendezvous(&s, 3);
  Outbox out;
  Beat(&s, 0, 0.010, 400);
  Beat(&s, 1, 0.020, 400);
  EXPECT_DOUBLE_EQ(Beat(&s, 2, 0.900, 100).median_step_seconds(), 0.020);
  s.OnHeartbeat(Addr(), MakeHeartbeat(proto::ROLE_SERVER, 0), t0_ + Ms(400), &out);
  s.Tick(t0_ + Ms(700), &out);  // worker 2 silent for 600 ms > 500: dead
  EXPECT_DOUBLE_EQ(s.Snapshot().median_step_seconds(), 0.015);
}

// adaptive_ratio.async_barrier: the barrier clock is where the live workers holding the barrier
// are, once one left it; the node states say who left.
TEST_F(JobStateStepTimeTest, BarrierClockIsTheSlowestWorkerStillHoldingTheBarrier) {
  JobState s(TestJob(1, 3, 500), 1, t0_);
  Rendezvous(&s, 3);
  Beat(&s, 0, 0.010, 100, /*clock=*/40);
  Beat(&s, 1, 0.011, 100, /*clock=*/38);
  EXPECT_EQ(Beat(&s, 2, 0.050, 100, /*clock=*/12).barrier_clock(), -1) << "nobody left the barrier";
  proto::ClusterState st = Beat(&s, 2, 0.050, 150, /*clock=*/13, /*exempt=*/true);
  EXPECT_EQ(st.barrier_clock(), 38) << "the slowest of workers 0 and 1, not worker 2's 13";
  ASSERT_EQ(st.nodes_size(), 4);
  EXPECT_TRUE(st.nodes(3).barrier_exempt());
  EXPECT_FALSE(st.nodes(2).barrier_exempt());
  EXPECT_EQ(Beat(&s, 1, 0.011, 200, /*clock=*/41).barrier_clock(), 40);
  // Everybody out: nobody holds the barrier, so there is no clock to catch up with.
  Beat(&s, 0, 0.010, 250, 42, true);
  EXPECT_EQ(Beat(&s, 1, 0.011, 250, 42, true).barrier_clock(), -1);
  // Back in: the barrier clock is gone once nobody is out.
  Beat(&s, 0, 0.010, 300, 43, false);
  Beat(&s, 1, 0.011, 300, 43, false);
  EXPECT_EQ(Beat(&s, 2, 0.050, 300, 43, false).barrier_clock(), -1);
}

TEST_F(JobStateStepTimeTest, ADeadWorkerNeitherHoldsNorLeavesTheBarrier) {
  JobState s(TestJob(1, 3, 500), 1, t0_);
  Rendezvous(&s, 3);
  Outbox out;
  Beat(&s, 0, 0.010, 400, /*clock=*/50);
  Beat(&s, 1, 0.050, 400, /*clock=*/20, /*exempt=*/true);
  EXPECT_EQ(Beat(&s, 2, 0.010, 100, /*clock=*/5).barrier_clock(), 5);
  s.OnHeartbeat(Addr(), MakeHeartbeat(proto::ROLE_SERVER, 0), t0_ + Ms(400), &out);
  s.Tick(t0_ + Ms(700), &out);  // worker 2 silent for 600 ms > 500: dead
  EXPECT_EQ(s.Snapshot().barrier_clock(), 50) << "worker 2's clock 5 no longer counts";
}

}  // namespace
}  // namespace osprey::coordinator
