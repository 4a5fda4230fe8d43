// bsp checkpoint cuts across servers (in-process): periodic every_steps cuts and on-demand cuts at
// a chosen clock make every server save at the same clock, the files carry that clock, and the
// saved state is exactly the state after that many clocks, even when several windows become
// closable at once (the cut holds the later ones until the save). Expected weights are computed
// by hand from SGD (lr 0.5) on the mean of the workers' gradients.
#include <gtest/gtest.h>

#include <filesystem>

#include "common/placement.h"
#include "server/checkpoint.h"
#include "server/native_store.h"
#include "server/server.h"
#include "server/sparse_table.h"
#include "server/updater.h"
#include "tests/testing/cluster_fixture.h"

namespace osprey::server {
namespace {

namespace fs = std::filesystem;
using testing::InprocCluster;
using testing::RawPeer;
using testing::VecBuf;

constexpr float kLr = 0.5f;
constexpr int kServers = 2;

std::vector<config::TableConfig> BspTables() {
  auto t = testing::TestTables();
  for (auto& c : t) c.consistency.mode = config::ConsistencyMode::kBsp;
  return t;
}

float Grad(int worker, int64_t clock) { return 0.1f * (worker + 1) + 0.01f * clock; }

// A key of the sparse table owned by `server`.
uint64_t KeyOn(int server) {
  for (uint64_t k = 1;; ++k) {
    if (ServerForKey(0, k, kServers) == server) return k;
  }
}

class CutTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = ::testing::TempDir() + "/osprey-cut-" + std::to_string(::getpid());
    fs::remove_all(dir_);
    cluster_ = std::make_unique<InprocCluster>(kServers, BspTables());
    config::CheckpointConfig ck;
    ck.dir = dir_;  // on-demand cuts go to directories beneath it (op_auth.h)
    ck.every_steps = 2;
    for (int s = 0; s < kServers; ++s) {
      cluster_->server(s).SetLiveWorkers({0, 1});
      cluster_->server(s).SetCheckpointConfig(ck);
      keys_.push_back(KeyOn(s));
      for (int w = 0; w < 3; ++w) {  // workers 0, 1 and an admin connection (index 2)
        peers_[w].push_back(std::make_unique<RawPeer>(cluster_->NewTransport(),
                                                      "inproc://server-" + std::to_string(s)));
      }
    }
    ASSERT_TRUE(cluster_->ActivateAll().ok());
  }
  void TearDown() override { fs::remove_all(dir_); }

  // Worker `w` pushes clock c to every server (one key each) and waits for the replies.
  void Push(int w, int64_t c) {
    for (int s = 0; s < kServers; ++s) {
      proto::Header h;
      h.set_op(proto::OP_PUSH_SPARSE);
      h.set_epoch(1);
      h.set_worker_rank(w);
      h.set_clock(c);
      h.set_num_keys(1);
      h.set_value_bytes(4 * sizeof(float));
      peers_[w][s]->Send(h, VecBuf(std::vector<uint64_t>{keys_[s]}),
                         VecBuf(std::vector<float>(4, Grad(w, c))));
      proto::Header r;
      ASSERT_TRUE(peers_[w][s]->Next(&r, nullptr));
      ASSERT_EQ(r.op(), proto::OP_REPLY) << r.error();
    }
  }
  // Sends OP_CHECKPOINT for clock c (dir) to every server through the admin connections.
  void AskCut(int64_t c, const std::string& dir) {
    for (int s = 0; s < kServers; ++s) {
      proto::Header h;
      h.set_op(proto::OP_CHECKPOINT);
      h.set_clock(c);
      h.set_value_bytes(dir.size());
      peers_[2][s]->Send(h, Buffer(), Buffer::Copy(dir.data(), dir.size()));
    }
  }
  // The weight element 0 of keys_[s] after clocks 0..clocks-1 (`solo_from`: clocks from which
  // only worker 0 pushed).
  float Expected(int s, int64_t clocks, int64_t solo_from = 1 << 30) const {
    const config::TableConfig& cfg = cluster_->tables()[0];
    SparseTable t(0, cfg.dim, cfg.init, *Optimizer::Make(cfg.optimizer));
    std::vector<float> w(cfg.dim);
    t.InitialWeights(keys_[s], w.data());
    float x = w[0];
    for (int64_t c = 0; c < clocks; ++c) {
      float g = c >= solo_from ? Grad(0, c) : (Grad(0, c) + Grad(1, c)) * 0.5f;
      x -= kLr * g;
    }
    return x;
  }
  // Restores `dir` onto one fresh server and returns element 0 of each keys_[s].
  std::vector<float> Restored(const std::string& dir, RestoreInfo* info) {
    NativeStore store;
    CheckpointMeta now;
    now.num_servers = 1;
    for (size_t i = 0; i < cluster_->tables().size(); ++i) {
      StoreTableSpec spec;
      spec.id = static_cast<uint32_t>(i);
      spec.config = cluster_->tables()[i];
      if (spec.config.type == config::TableType::kDense) spec.owned_chunks = {0, 1, 2};
      spec.state = (*Updater::Make(spec.config.optimizer))->state_layout();
      EXPECT_TRUE(store.CreateTable(spec).ok());
      now.tables.push_back(cluster_->map().tables(static_cast<int>(i)));
      now.optimizers.push_back(OptimizerTypeName(spec.config.optimizer.type));
    }
    auto versions = RestoreCheckpoint(dir, now, &store, info);
    EXPECT_TRUE(versions.ok()) << versions.status().ToString();
    std::vector<float> out;
    for (uint64_t k : keys_) {
      std::vector<float> row(4);
      EXPECT_TRUE(store.PullRows(0, &k, 1, row.data()).ok());
      out.push_back(row[0]);
    }
    return out;
  }

  std::string dir_;
  std::unique_ptr<InprocCluster> cluster_;
  std::vector<uint64_t> keys_;
  std::vector<std::unique_ptr<RawPeer>> peers_[3];
};

TEST_F(CutTest, PeriodicCutsSaveEveryServerAtTheSameClock) {
  for (int64_t c = 0; c < 5; ++c) {
    Push(0, c);
    Push(1, c);
  }
  // Clocks 0..4 closed; cuts at 2 and 4 were taken, the files hold the one at 4.
  RestoreInfo info;
  std::vector<float> got = Restored(dir_, &info);
  EXPECT_EQ(info.files, kServers);
  EXPECT_EQ(info.min_clock, 4);
  EXPECT_EQ(info.max_clock, 4);
  for (int s = 0; s < kServers; ++s) {
    EXPECT_FLOAT_EQ(got[s], Expected(s, 4)) << "server " << s;
    EXPECT_NE(got[s], Expected(s, 5));
  }
}

TEST_F(CutTest, OnDemandCutWaitsForItsClockAndRefusesAPassedOne) {
  for (int64_t c = 0; c < 5; ++c) {
    Push(0, c);
    Push(1, c);
  }
  // A clock already closed is refused at once.
  AskCut(3, dir_ + "/late");
  for (int s = 0; s < kServers; ++s) {
    proto::Header r;
    ASSERT_TRUE(peers_[2][s]->Next(&r, nullptr));
    EXPECT_EQ(r.op(), proto::OP_ERROR);
    EXPECT_NE(r.error().find("already closed 5 clocks"), std::string::npos) << r.error();
  }
  const std::string dir = dir_ + "/ondemand";
  AskCut(7, dir);
  Push(0, 5);
  Push(1, 5);
  EXPECT_FALSE(fs::exists(CheckpointPath(dir, 0, kServers))) << "cut taken before clock 7";
  Push(0, 6);
  Push(1, 6);  // closes clock 6: done = 7, the cut is taken on every server
  for (int s = 0; s < kServers; ++s) {
    proto::Header r;
    Buffer path;
    ASSERT_TRUE(peers_[2][s]->Next(&r, &path));
    ASSERT_EQ(r.op(), proto::OP_REPLY) << r.error();
    EXPECT_EQ(std::string(reinterpret_cast<const char*>(path.data()), path.size()),
              CheckpointPath(dir, s, kServers));
  }
  RestoreInfo info;
  std::vector<float> got = Restored(dir, &info);
  EXPECT_EQ(info.min_clock, 7);
  EXPECT_EQ(info.max_clock, 7);
  for (int s = 0; s < kServers; ++s) EXPECT_FLOAT_EQ(got[s], Expected(s, 7)) << "server " << s;
}

TEST_F(CutTest, CutHoldsLaterWindowsThatCloseTogether) {
  for (int64_t c = 0; c < 7; ++c) {
    Push(0, c);
    Push(1, c);
  }
  // Worker 0 runs ahead by three clocks (7, 8, 9); worker 1 then dies: windows 7, 8 and 9 become
  // closable at once. A cut at 8 must save after clock 7, not after 9.
  const std::string dir = dir_ + "/hold";
  AskCut(8, dir);
  for (int64_t c = 7; c < 10; ++c) Push(0, c);
  for (int s = 0; s < kServers; ++s) cluster_->server(s).SetLiveWorkers({0});
  for (int s = 0; s < kServers; ++s) {
    proto::Header r;
    ASSERT_TRUE(peers_[2][s]->Next(&r, nullptr));
    ASSERT_EQ(r.op(), proto::OP_REPLY) << r.error();
  }
  RestoreInfo info;
  std::vector<float> got = Restored(dir, &info);
  EXPECT_EQ(info.min_clock, 8);
  EXPECT_EQ(info.max_clock, 8);
  for (int s = 0; s < kServers; ++s) {
    EXPECT_FLOAT_EQ(got[s], Expected(s, 8, 7)) << "server " << s;
  }
  // The periodic cuts went on: 8 (same instant), then 10 once the held windows 8, 9 closed.
  got = Restored(dir_, &info);
  EXPECT_EQ(info.min_clock, 10);
  EXPECT_EQ(info.max_clock, 10);
  for (int s = 0; s < kServers; ++s) EXPECT_FLOAT_EQ(got[s], Expected(s, 10, 7));
  // The held windows were applied after the save: the live state is at clock 10.
  proto::Header h;
  h.set_op(proto::OP_PULL_SPARSE);
  h.set_epoch(1);
  h.set_num_keys(1);
  peers_[2][0]->Send(h, VecBuf(std::vector<uint64_t>{keys_[0]}), Buffer());
  proto::Header r;
  Buffer v;
  ASSERT_TRUE(peers_[2][0]->Next(&r, &v));
  ASSERT_EQ(r.op(), proto::OP_REPLY) << r.error();
  EXPECT_FLOAT_EQ(v.as<float>()[0], Expected(0, 10, 7));
}

}  // namespace
}  // namespace osprey::server
