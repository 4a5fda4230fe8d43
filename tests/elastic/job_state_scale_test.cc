// JobState's scale step (coordinator/job_state_scale.cc) with a fake clock: a joining server, a
// SCALE_REQUEST, the workers' pauses, the old servers' transfers and the replies each causes.
#include <gtest/gtest.h>

#include "coordinator/job_state.h"
#include "tests/coordinator/coordinator_test_util.h"

namespace osprey::coordinator {
namespace {

using testing::ServerRequest;
using testing::TestJob;
using testing::WorkerRequest;

class JobStateScaleTest : public ::testing::Test {
 protected:
  const Clock::time_point t0_ = Clock::now();
  uint64_t next_id_ = 1;
  ReplyAddress Addr() { return ReplyAddress{1, next_id_++}; }

  static proto::ScaleRequest Req(proto::ScaleKind kind, int rank, int64_t clock = 0, int servers = 0) {
    proto::ScaleRequest r;
    r.set_kind(kind);
    r.set_rank(rank);
    r.set_clock(clock);
    r.set_servers(servers);
    r.set_rows_sent(10);
    return r;
  }
  template <typename M>
  static M Parse(const OutgoingReply& r) {
    M m;
    EXPECT_TRUE(r.status.ok()) << r.status.ToString();
    EXPECT_TRUE(m.ParseFromArray(r.payload.data(), static_cast<int>(r.payload.size())));
    return m;
  }
  static const OutgoingReply* To(const Outbox& out, uint64_t id) {
    for (const OutgoingReply& r : out) {
      if (r.to.request_id == id) return &r;
    }
    return nullptr;
  }
};

TEST_F(JobStateScaleTest, GrowOneServerThenShrinkBack) {
  JobState s(TestJob(2, 2), 7, t0_);
  Outbox out;
  s.OnRegister(Addr(), ServerRequest(100), t0_, &out);
  s.OnRegister(Addr(), ServerRequest(101), t0_, &out);
  s.OnRegister(Addr(), WorkerRequest(200), t0_, &out);
  s.OnRegister(Addr(), WorkerRequest(201), t0_, &out);
  ASSERT_TRUE(s.rendezvous_complete());
  out.clear();

  proto::RegisterRequest join = ServerRequest(102);
  join.set_joining(true);
  const ReplyAddress join_addr = Addr();
  s.OnRegister(join_addr, join, t0_, &out);
  EXPECT_TRUE(out.empty()) << "a joiner waits for a scale step";
  const ReplyAddress requester = Addr();
  s.OnScale(requester, Req(proto::SCALE_REQUEST, 0, 0, 3), t0_, &out);
  EXPECT_TRUE(out.empty());
  EXPECT_EQ(s.Snapshot().scale().phase(), proto::SCALE_PAUSING);

  const ReplyAddress p0 = Addr(), p1 = Addr();
  s.OnScale(p0, Req(proto::SCALE_PAUSE, 0, 5), t0_, &out);
  s.OnScale(p1, Req(proto::SCALE_PAUSE, 1, 5), t0_, &out);
  ASSERT_EQ(out.size(), 1u) << "the joiner learns its rank and the new map";
  proto::RegisterReply reg = Parse<proto::RegisterReply>(out[0]);
  EXPECT_EQ(out[0].to.request_id, join_addr.request_id);
  EXPECT_EQ(reg.rank(), 2);
  EXPECT_EQ(reg.shard_map().epoch(), 2u);
  ASSERT_EQ(reg.shard_map().server_endpoints_size(), 3);
  proto::ClusterState st = s.Snapshot();
  EXPECT_EQ(st.scale().phase(), proto::SCALE_TRANSFERRING);
  EXPECT_EQ(st.scale().target().epoch(), 2u);
  EXPECT_EQ(st.epoch(), 1u) << "not committed before the transfer";
  out.clear();

  const ReplyAddress d0 = Addr(), d1 = Addr();
  s.OnScale(d0, Req(proto::SCALE_DONE, 0), t0_, &out);
  EXPECT_TRUE(out.empty());
  s.OnScale(d1, Req(proto::SCALE_DONE, 1), t0_, &out);
  ASSERT_EQ(out.size(), 5u);  // two transfers, two pauses, the requester
  EXPECT_EQ(Parse<proto::ScaleReply>(*To(out, p0.request_id)).shard_map().epoch(), 2u);
  EXPECT_FALSE(Parse<proto::ScaleReply>(*To(out, d0.request_id)).removed());
  proto::ScaleReply result = Parse<proto::ScaleReply>(*To(out, requester.request_id));
  EXPECT_EQ(result.rows_moved(), 20u);
  EXPECT_EQ(result.clock(), 5);
  st = s.Snapshot();
  EXPECT_EQ(st.epoch(), 2u);
  EXPECT_EQ(st.num_servers(), 3);
  EXPECT_EQ(st.scale().phase(), proto::SCALE_IDLE);
  out.clear();

  // 3 -> 2: no joiner needed; server 2 is told it is removed, and is forgotten.
  s.OnScale(Addr(), Req(proto::SCALE_REQUEST, 0, 0, 2), t0_, &out);
  s.OnScale(Addr(), Req(proto::SCALE_PAUSE, 0, 9), t0_, &out);
  s.OnScale(Addr(), Req(proto::SCALE_PAUSE, 1, 9), t0_, &out);
  EXPECT_EQ(s.Snapshot().scale().target().server_endpoints_size(), 2);
  const ReplyAddress d2 = Addr();
  s.OnScale(Addr(), Req(proto::SCALE_DONE, 0), t0_, &out);
  s.OnScale(Addr(), Req(proto::SCALE_DONE, 1), t0_, &out);
  s.OnScale(d2, Req(proto::SCALE_DONE, 2), t0_, &out);
  EXPECT_TRUE(Parse<proto::ScaleReply>(*To(out, d2.request_id)).removed());
  st = s.Snapshot();
  EXPECT_EQ(st.num_servers(), 2);
  int servers = 0;
  for (const auto& n : st.nodes()) servers += n.role() == proto::ROLE_SERVER ? 1 : 0;
  EXPECT_EQ(servers, 2);
}

TEST_F(JobStateScaleTest, RefusesAnEvictingJobAndAJoinBeforeTheRendezvous) {
  config::PsConfig evicting = TestJob(1, 1);
  evicting.tables[0].eviction.ttl_steps = 100;  // its row ages are not moved by a scale step
  JobState s(evicting, 1, t0_);
  Outbox out;
  proto::RegisterRequest join = ServerRequest(102);
  join.set_joining(true);
  s.OnRegister(Addr(), join, t0_, &out);
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].status.code(), StatusCode::kFailedPrecondition) << out[0].status.ToString();
  s.OnRegister(Addr(), ServerRequest(100), t0_, &out);
  s.OnRegister(Addr(), WorkerRequest(200), t0_, &out);
  out.clear();
  s.OnScale(Addr(), Req(proto::SCALE_REQUEST, 0, 0, 2), t0_, &out);
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].status.code(), StatusCode::kUnimplemented);
  EXPECT_NE(out[0].status.message().find("admission / eviction"), std::string::npos) << out[0].status.message();
}

TEST_F(JobStateScaleTest, AbandonedStepReleasesPausedWorkersWithTheOldMap) {
  const config::PsConfig job = TestJob(1, 2, /*heartbeat_timeout_ms=*/100000000);
  JobState s(job, 1, t0_);
  Outbox out;
  s.OnRegister(Addr(), ServerRequest(100), t0_, &out);
  s.OnRegister(Addr(), WorkerRequest(200), t0_, &out);
  s.OnRegister(Addr(), WorkerRequest(201), t0_, &out);
  out.clear();
  const ReplyAddress requester = Addr(), p0 = Addr();
  s.OnScale(requester, Req(proto::SCALE_REQUEST, 0, 0, 2), t0_, &out);
  s.OnScale(p0, Req(proto::SCALE_REQUEST, 0, 0, 2), t0_, &out);
  ASSERT_EQ(out.size(), 1u) << "one step at a time";
  EXPECT_EQ(out[0].status.code(), StatusCode::kFailedPrecondition);
  out.clear();
  // The joiner never comes: after startup_timeout_ms the step is abandoned.
  s.Tick(t0_ + std::chrono::milliseconds(job.cluster.startup_timeout_ms + 1), &out);
  const OutgoingReply* r = To(out, requester.request_id);
  ASSERT_NE(r, nullptr);
  EXPECT_EQ(r->status.code(), StatusCode::kAborted);
  EXPECT_NE(r->status.message().find("joining servers"), std::string::npos) << r->status.message();
  EXPECT_EQ(s.Snapshot().scale().phase(), proto::SCALE_IDLE);

  // A step in progress when the job shuts down is abandoned: its requester is answered at once.
  const ReplyAddress again = Addr();
  s.OnScale(again, Req(proto::SCALE_REQUEST, 0, 0, 2), t0_, &out);
  out.clear();
  s.OnShutdown(Addr(), "test", t0_, &out);
  r = To(out, again.request_id);
  ASSERT_NE(r, nullptr);
  EXPECT_EQ(r->status.code(), StatusCode::kAborted);
}

}  // namespace
}  // namespace osprey::coordinator
