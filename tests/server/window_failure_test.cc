// What pushers see when a merge window's apply fails (table_shard.h, "Acknowledgements and failed
// windows"), through a real Server over a FaultInjectingStore: under kOnApply no push of the
// failed window is ever acknowledged OK and each gets an error naming the table, the window's
// clock and the cause; under kOnMerge the pusher whose push closed the window gets the error and
// the others learn it at their next request; either way nothing of the window counts as applied.
#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "common/inproc_transport.h"
#include "server/native_store.h"
#include "server/server.h"
#include "tests/server/fault_injecting_store.h"
#include "tests/testing/cluster_fixture.h"

namespace osprey::server {
namespace {

using osprey::testing::RawPeer;
using osprey::testing::VecBuf;

class WindowFailureTest : public ::testing::Test {
 protected:
  // One server whose sparse table "emb" runs `mode` (ssp/async: windows of `per_window`).
  void Start(config::ConsistencyMode mode, int per_window, bool acks_after_apply) {
    tables_ = osprey::testing::TestTables();
    tables_[0].consistency.mode = mode;
    tables_[0].consistency.merge_max_pushes = per_window;
    auto store = std::make_unique<testing::FaultInjectingStore>(std::make_unique<NativeStore>());
    store_ = store.get();
    store_->set_acks_after_apply(acks_after_apply);
    server_ = std::make_unique<Server>(std::make_unique<InprocTransport>(hub_), std::move(store));
    server_->SetLiveWorkers({0, 1});  // bsp windows wait for both workers
    ASSERT_TRUE(server_->Listen("inproc://server-0").ok());
    map_ = osprey::testing::MakeShardMap({"inproc://server-0"}, tables_);
    ASSERT_TRUE(server_->Activate(0, map_, tables_).ok());
    for (int r = 0; r < 2; ++r) {
      peers_.push_back(std::make_unique<RawPeer>(std::make_unique<InprocTransport>(hub_),
                                                 "inproc://server-0"));
    }
  }
  void TearDown() override {
    peers_.clear();
    if (server_) server_->Stop();
  }
  void Push(int rank, int64_t clock, float g) {
    proto::Header h = Req(proto::OP_PUSH_SPARSE, rank, clock);
    h.set_value_bytes(4 * sizeof(float));
    peers_[rank]->Send(h, VecBuf<uint64_t>({7}), VecBuf<float>({g, g, g, g}));
  }
  void Pull(int rank, int64_t clock) {
    peers_[rank]->Send(Req(proto::OP_PULL_SPARSE, rank, clock), VecBuf<uint64_t>({7}), Buffer());
  }
  proto::Header Next(int rank) {
    proto::Header r;
    EXPECT_TRUE(peers_[rank]->Next(&r, nullptr)) << "no reply to worker " << rank;
    return r;
  }
  static void ExpectWindowError(const proto::Header& r, const std::string& window) {
    EXPECT_EQ(r.op(), proto::OP_ERROR);
    EXPECT_NE(r.error().find("table 'emb'"), std::string::npos) << r.error();
    EXPECT_NE(r.error().find(window), std::string::npos) << r.error();
    EXPECT_NE(r.error().find("failed to apply"), std::string::npos) << r.error();
    EXPECT_NE(r.error().find("injected: store write lost"), std::string::npos) << r.error();
  }

  proto::Header Req(proto::Op op, int rank, int64_t clock) {
    proto::Header h;
    h.set_op(op);
    h.set_table(0);
    h.set_request_id(++next_id_);
    h.set_epoch(1);
    h.set_worker_rank(rank);
    h.set_clock(clock);
    h.set_num_keys(1);
    return h;
  }

  std::shared_ptr<InprocHub> hub_ = std::make_shared<InprocHub>();
  std::vector<config::TableConfig> tables_;
  proto::ShardMap map_;
  testing::FaultInjectingStore* store_ = nullptr;
  std::unique_ptr<Server> server_;
  std::vector<std::unique_ptr<RawPeer>> peers_;
  uint64_t next_id_ = 0;
};

TEST_F(WindowFailureTest, OnApplyAcksOnlyAfterTheWindowIsApplied) {
  Start(config::ConsistencyMode::kBsp, 1, /*acks_after_apply=*/true);
  Push(0, 0, 1.0f);
  Push(1, 0, 3.0f);  // closes the window of clock 0
  // Worker 0's first reply is its ack, and it already carries the applied version: it was not
  // sent when the push was merged (that reply would say version 0).
  proto::Header r0 = Next(0);
  EXPECT_EQ(r0.op(), proto::OP_REPLY) << r0.error();
  EXPECT_EQ(r0.version(), 1u);
  proto::Header r1 = Next(1);
  EXPECT_EQ(r1.op(), proto::OP_REPLY) << r1.error();
  EXPECT_EQ(r1.version(), 1u);
  EXPECT_EQ(server_->stats().pushes_applied, 2u);
}

TEST_F(WindowFailureTest, OnApplyFailedWindowAcksAreErrorsNamingTableClockAndCause) {
  Start(config::ConsistencyMode::kBsp, 1, /*acks_after_apply=*/true);
  store_->FailWrites(0, Unavailable("injected: store write lost"));
  Push(0, 0, 1.0f);
  Push(1, 0, 3.0f);
  // Neither pusher ever sees OK for the window of clock 0.
  ExpectWindowError(Next(0), "merge window of clock 0");
  ExpectWindowError(Next(1), "merge window of clock 0");
  EXPECT_EQ(store_->failed_writes(), 1);
  EXPECT_EQ(server_->stats().pushes_applied, 0u);
  EXPECT_EQ(server_->stats().windows_applied, 0u);
  // The table refuses what follows, with the same error; the store is not written again.
  Pull(0, 1);
  ExpectWindowError(Next(0), "merge window of clock 0");
  Push(1, 1, 2.0f);
  ExpectWindowError(Next(1), "merge window of clock 0");
  EXPECT_EQ(store_->failed_writes(), 1);
}

TEST_F(WindowFailureTest, OnApplyHeldPullsOfAFailedTableGetTheError) {
  Start(config::ConsistencyMode::kBsp, 1, /*acks_after_apply=*/true);
  store_->FailSync(Unavailable("injected: store write lost"));
  Push(0, 0, 1.0f);
  Pull(0, 1);        // held: clock 0 is not closed
  Push(1, 0, 3.0f);  // closes it; Sync fails
  ExpectWindowError(Next(0), "merge window of clock 0");  // the push's ack
  ExpectWindowError(Next(0), "merge window of clock 0");  // the held pull
  ExpectWindowError(Next(1), "merge window of clock 0");
}

TEST_F(WindowFailureTest, OnMergeTheClosingPusherGetsTheErrorAndTheOthersAtTheirNextRequest) {
  Start(config::ConsistencyMode::kAsync, 2, /*acks_after_apply=*/false);
  store_->FailWrites(0, Unavailable("injected: store write lost"));
  Push(0, 0, 1.0f);
  proto::Header merged = Next(0);  // kOnMerge: acknowledged as merged, not as applied
  EXPECT_EQ(merged.op(), proto::OP_REPLY) << merged.error();
  EXPECT_EQ(merged.version(), 0u);
  Push(1, 0, 3.0f);  // closes the window: its apply fails
  ExpectWindowError(Next(1), "merge window 1");
  Pull(0, 0);  // worker 0 learns it before it can train on weights without its update
  ExpectWindowError(Next(0), "merge window 1");
  EXPECT_EQ(server_->stats().pushes_applied, 0u);
}

TEST_F(WindowFailureTest, AppliedOnArrivalPushGetsTheErrorItself) {
  Start(config::ConsistencyMode::kAsync, 1, /*acks_after_apply=*/false);
  store_->FailWrites(0, Unavailable("injected: store write lost"));
  Push(0, 0, 1.0f);
  ExpectWindowError(Next(0), "merge window 1");
  EXPECT_EQ(server_->stats().pushes_applied, 0u);
}

}  // namespace
}  // namespace osprey::server
