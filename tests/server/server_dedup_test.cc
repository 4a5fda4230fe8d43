// A real Server (inproc transport) drops a re-sent push (same worker rank, worker incarnation and
// request id; server/push_dedup.h): it is acknowledged OK and not applied again.
#include <gtest/gtest.h>

#include "server/server.h"
#include "tests/testing/cluster_fixture.h"

namespace osprey::server {
namespace {

using testing::InprocCluster;
using testing::RawPeer;
using testing::VecBuf;

proto::Header Push(uint64_t request_id, uint64_t incarnation) {
  proto::Header h;
  h.set_op(proto::OP_PUSH_SPARSE);
  h.set_table(0);
  h.set_request_id(request_id);
  h.set_epoch(1);
  h.set_worker_rank(0);
  h.set_worker_incarnation(incarnation);
  h.set_num_keys(1);
  h.set_value_bytes(16);
  return h;
}

class ServerDedupTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(cluster_.ActivateAll().ok());
    peer_ = std::make_unique<RawPeer>(cluster_.NewTransport(), "inproc://server-0");
  }
  proto::Header Call(const proto::Header& h) {
    peer_->Send(h, VecBuf<uint64_t>({5}), VecBuf<float>({1, 2, 3, 4}));
    proto::Header reply;
    EXPECT_TRUE(peer_->Next(&reply, nullptr)) << "no reply";
    return reply;
  }
  InprocCluster cluster_{1};
  std::unique_ptr<RawPeer> peer_;
};

TEST_F(ServerDedupTest, ResentPushIsAcknowledgedButNotAppliedTwice) {
  proto::Header r = Call(Push(7, 1234));
  ASSERT_EQ(r.op(), proto::OP_REPLY) << r.error();
  EXPECT_EQ(r.version(), 1u);
  r = Call(Push(7, 1234));  // the re-send
  ASSERT_EQ(r.op(), proto::OP_REPLY) << r.error();
  EXPECT_EQ(r.request_id(), 7u);
  EXPECT_EQ(r.version(), 1u) << "the re-sent push was applied again";
  ServerStatsSnapshot st = cluster_.server(0).stats();
  EXPECT_EQ(st.pushes_applied, 1u);
  EXPECT_EQ(st.pushes_deduplicated, 1u);
  // A new request id, or the same id from a restarted worker (new incarnation), is applied.
  EXPECT_EQ(Call(Push(8, 1234)).version(), 2u);
  EXPECT_EQ(Call(Push(7, 999)).version(), 3u);
  // Without an incarnation (a sender that does not stamp one) nothing is deduplicated.
  EXPECT_EQ(Call(Push(9, 0)).version(), 4u);
  EXPECT_EQ(Call(Push(9, 0)).version(), 5u);
  EXPECT_EQ(cluster_.server(0).stats().pushes_deduplicated, 1u);
}

}  // namespace
}  // namespace osprey::server
