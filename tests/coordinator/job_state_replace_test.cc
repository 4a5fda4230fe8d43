// JobState's server failover rules (coordinator/job_state_replace.cc), driven with a fake clock.
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

constexpr int kHeartbeatMs = 500;
constexpr int kReplaceMs = 3000;

class JobStateReplaceTest : public ::testing::Test {
 protected:
  const Clock::time_point t0_ = Clock::now();
  uint64_t next_id_ = 1;

  ReplyAddress Addr() { return ReplyAddress{1, next_id_++}; }

  static config::PsConfig Job() {
    config::PsConfig job = TestJob(2, 1, kHeartbeatMs);
    job.cluster.server_replace_timeout_ms = kReplaceMs;
    return job;
  }
  static proto::RegisterRequest Server(int pid, int rank, uint64_t incarnation) {
    proto::RegisterRequest r = ServerRequest(pid, rank);
    r.set_incarnation(incarnation);
    return r;
  }
  // Servers 0 and 1 (pids 100, 101, incarnations 1000, 1001) and worker 0.
  void Rendezvous(JobState* s) {
    Outbox out;
    s->OnRegister(Addr(), Server(100, 0, 1000), t0_, &out);
    s->OnRegister(Addr(), Server(101, 1, 1001), t0_, &out);
    s->OnRegister(Addr(), WorkerRequest(200, 0), t0_, &out);
    ASSERT_TRUE(s->rendezvous_complete());
    ASSERT_EQ(out.size(), 3u);
  }
  // Heartbeats of every node but server 0, at `at`.
  void BeatOthers(JobState* s, Clock::time_point at) {
    Outbox out;
    s->OnHeartbeat(Addr(), MakeHeartbeat(proto::ROLE_SERVER, 1), at, &out);
    s->OnHeartbeat(Addr(), MakeHeartbeat(proto::ROLE_WORKER, 0), at, &out);
  }
  static proto::RegisterReply ParseReply(const OutgoingReply& r) {
    proto::RegisterReply reply;
    EXPECT_TRUE(reply.ParseFromArray(r.payload.data(), static_cast<int>(r.payload.size())));
    return reply;
  }
  static const proto::NodeState* ServerNode(const proto::ClusterState& st, int rank) {
    for (const proto::NodeState& n : st.nodes()) {
      if (n.role() == proto::ROLE_SERVER && n.rank() == rank) return &n;
    }
    return nullptr;
  }
};

TEST_F(JobStateReplaceTest, DeadServerWaitsForAReplacementWhichGetsTheNewEpoch) {
  JobState s(Job(), 77, t0_);
  Rendezvous(&s);
  Outbox out;
  proto::Heartbeat last = MakeHeartbeat(proto::ROLE_SERVER, 0, /*clock=*/40);
  last.set_samples(90);
  last.set_incarnation(1000);
  s.OnHeartbeat(Addr(), last, t0_ + Ms(100), &out);
  BeatOthers(&s, t0_ + Ms(400));
  s.Tick(t0_ + Ms(601), &out);  // server 0 silent for 501 ms: dead
  ASSERT_FALSE(s.Snapshot().nodes(0).alive());
  EXPECT_FALSE(s.shutting_down()) << "a dead server waits for its replacement";
  EXPECT_EQ(s.Snapshot().epoch(), 1u);

  out.clear();
  proto::RegisterRequest repl = Server(300, 0, 5000);
  repl.set_endpoint("tcp://10.0.0.9:7000");
  s.OnRegister(Addr(), repl, t0_ + Ms(900), &out);
  ASSERT_EQ(out.size(), 1u);
  ASSERT_TRUE(out[0].status.ok()) << out[0].status.ToString();
  proto::RegisterReply reply = ParseReply(out[0]);
  EXPECT_EQ(reply.rank(), 0);
  EXPECT_EQ(reply.session_id(), 77u);
  EXPECT_TRUE(reply.replaced());
  EXPECT_EQ(reply.replaced_steps(), 40u);
  EXPECT_EQ(reply.replaced_pushes(), 90u);
  EXPECT_EQ(reply.shard_map().epoch(), 2u);
  ASSERT_EQ(reply.shard_map().server_endpoints_size(), 2);
  EXPECT_EQ(reply.shard_map().server_endpoints(0), "tcp://10.0.0.9:7000");
  EXPECT_EQ(reply.shard_map().server_endpoints(1), "inproc://server-pid-101");

  proto::ClusterState st = s.Snapshot();
  EXPECT_EQ(st.epoch(), 2u);
  const proto::NodeState* n = ServerNode(st, 0);
  ASSERT_NE(n, nullptr);
  EXPECT_TRUE(n->alive());
  EXPECT_EQ(n->endpoint(), "tcp://10.0.0.9:7000");
  EXPECT_EQ(n->incarnation(), 5000u);
  EXPECT_EQ(n->replacements(), 1u);
  // The replacement heartbeats from now on; the job goes on past the replace timeout.
  for (int t = 1000; t <= 1000 + kReplaceMs + 1000; t += 300) {
    proto::Heartbeat hb = MakeHeartbeat(proto::ROLE_SERVER, 0);
    hb.set_incarnation(5000);
    out.clear();
    s.OnHeartbeat(Addr(), hb, t0_ + Ms(t), &out);
    ASSERT_TRUE(out[0].status.ok()) << out[0].status.ToString();
    BeatOthers(&s, t0_ + Ms(t));
    s.Tick(t0_ + Ms(t + 1), &out);
  }
  EXPECT_FALSE(s.shutting_down()) << s.Snapshot().failure();
}

TEST_F(JobStateReplaceTest, NewIncarnationSupersedesALiveServerAtOnce) {
  JobState s(Job(), 1, t0_);
  Rendezvous(&s);
  Outbox out;
  s.OnRegister(Addr(), Server(300, 1, 6000), t0_ + Ms(100), &out);
  ASSERT_EQ(out.size(), 1u);
  ASSERT_TRUE(out[0].status.ok()) << out[0].status.ToString();
  EXPECT_EQ(ParseReply(out[0]).shard_map().epoch(), 2u);
  EXPECT_EQ(s.Snapshot().epoch(), 2u);
  // The old process (incarnation 1001) is told to exit; the new one is served.
  proto::Heartbeat old_hb = MakeHeartbeat(proto::ROLE_SERVER, 1);
  old_hb.set_incarnation(1001);
  out.clear();
  s.OnHeartbeat(Addr(), old_hb, t0_ + Ms(200), &out);
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].status.code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(out[0].status.message().find("has been replaced"), std::string::npos) << out[0].status.message();
  proto::Heartbeat new_hb = MakeHeartbeat(proto::ROLE_SERVER, 1);
  new_hb.set_incarnation(6000);
  out.clear();
  s.OnHeartbeat(Addr(), new_hb, t0_ + Ms(200), &out);
  ASSERT_TRUE(out[0].status.ok()) << out[0].status.ToString();
  // A second replacement bumps the epoch again.
  out.clear();
  s.OnRegister(Addr(), Server(301, 1, 6001), t0_ + Ms(300), &out);
  ASSERT_TRUE(out[0].status.ok()) << out[0].status.ToString();
  EXPECT_EQ(s.Snapshot().epoch(), 3u);
  EXPECT_EQ(ServerNode(s.Snapshot(), 1)->replacements(), 2u);
}

TEST_F(JobStateReplaceTest, NoReplacementInTimeFailsTheJobNamingTheServer) {
  JobState s(Job(), 1, t0_);
  Rendezvous(&s);
  Outbox out;
  for (int t = 300; t < 600 + kReplaceMs; t += 300) {
    BeatOthers(&s, t0_ + Ms(t));
    s.Tick(t0_ + Ms(t), &out);
  }
  // Marked dead at 600 (> 500 ms silent); the deadline is 600 + kReplaceMs.
  EXPECT_FALSE(s.shutting_down()) << s.Snapshot().failure();
  BeatOthers(&s, t0_ + Ms(700 + kReplaceMs));
  s.Tick(t0_ + Ms(700 + kReplaceMs), &out);
  ASSERT_TRUE(s.shutting_down());
  const std::string failure = s.Snapshot().failure();
  EXPECT_NE(failure.find("server 0 (pid 100) died and no replacement registered within 3000 ms"),
            std::string::npos) << failure;
  EXPECT_NE(failure.find("cluster.server_replace_timeout_ms"), std::string::npos) << failure;
  // Once shutting down, a replacement is refused.
  out.clear();
  s.OnRegister(Addr(), Server(300, 0, 5000), t0_ + Ms(800 + kReplaceMs), &out);
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].status.code(), StatusCode::kAborted);
}

TEST_F(JobStateReplaceTest, RefusesSameIncarnationBadRankAndNoEndpoint) {
  JobState s(Job(), 1, t0_);
  Rendezvous(&s);
  Outbox out;
  s.OnRegister(Addr(), Server(300, 0, 1000), t0_, &out);  // the rank's own incarnation again
  s.OnRegister(Addr(), Server(301, 2, 7000), t0_, &out);  // no server rank 2
  s.OnRegister(Addr(), Server(302, -1, 7001), t0_, &out);  // a replacement must name its rank
  proto::RegisterRequest no_endpoint = Server(303, 0, 7002);
  no_endpoint.clear_endpoint();
  s.OnRegister(Addr(), no_endpoint, t0_, &out);
  ASSERT_EQ(out.size(), 4u);
  for (size_t i = 0; i < 3; ++i) {
    EXPECT_EQ(out[i].status.code(), StatusCode::kFailedPrecondition) << i << ": " << out[i].status.ToString();
  }
  EXPECT_EQ(out[3].status.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(out[3].status.message().find("without the endpoint"), std::string::npos);
  EXPECT_EQ(s.Snapshot().epoch(), 1u) << "nothing was replaced";
}

TEST_F(JobStateReplaceTest, ZeroReplaceTimeoutKeepsTheOldRule) {
  config::PsConfig job = Job();
  job.cluster.server_replace_timeout_ms = 0;
  JobState s(job, 1, t0_);
  Rendezvous(&s);
  Outbox out;
  BeatOthers(&s, t0_ + Ms(400));
  s.Tick(t0_ + Ms(501), &out);
  ASSERT_TRUE(s.shutting_down());
  EXPECT_NE(s.Snapshot().failure().find("server 0 (pid 100) sent no heartbeat"), std::string::npos);
}

}  // namespace
}  // namespace osprey::coordinator
