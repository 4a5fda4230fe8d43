// Feature admission and eviction wired into the table shard (table_shard.cc, server/admission/
// row_lifecycle.h) over the real NativeStore: exact admission counts, pulls that create nothing,
// TTL by steps and by seconds (the shard's injected now_us), max_rows, and the admission sketch
// and rows' last updates surviving a checkpoint round trip through real Servers (in-process
// transport), old-format checkpoints still loading.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "common/placement.h"
#include "server/checkpoint.h"
#include "server/native_store.h"
#include "server/row_init.h"
#include "server/server.h"
#include "server/table_shard.h"
#include "tests/server/recording_replier.h"
#include "tests/testing/cluster_fixture.h"

namespace osprey::server {
namespace {

namespace fs = std::filesystem;
constexpr int kDim = 4;

config::TableConfig Table() {
  config::TableConfig t = osprey::testing::TestTables()[0];  // "emb", dim 4, sgd, async per push
  t.init.scale = 0.1f;
  return t;
}

class ShardHarness {
 public:
  explicit ShardHarness(const config::TableConfig& cfg) {
    proto::TableSpec ps;
    ps.set_name(cfg.name);
    ps.set_type(proto::TABLE_SPARSE);
    ps.set_dim(cfg.dim);
    auto created = TableShard::Create(0, ps, cfg, {}, 0, &store_, &counters_, &replier_);
    EXPECT_TRUE(created.ok()) << created.status().ToString();
    shard_ = std::move(*created);
  }
  Status Push(std::vector<uint64_t> keys, float g, int64_t now_us = 0) {
    std::vector<float> grad(keys.size() * kDim, g);
    proto::Header h;
    h.set_version(shard_->version());
    OSPREY_RETURN_IF_ERROR(
        shard_->Push(h, keys.data(), keys.size(),
                     Buffer::Copy(grad.data(), grad.size() * sizeof(float)), now_us));
    return shard_->Advance(now_us);
  }
  std::vector<float> Pull(uint64_t key) {
    proto::Header h;
    h.set_op(proto::OP_PULL_SPARSE);
    h.set_num_keys(1);
    Message m;
    m.keys = Buffer::Copy(&key, sizeof(key));
    EXPECT_TRUE(shard_->Pull(h, m, 0).ok());
    auto sent = replier_.sent();
    EXPECT_FALSE(sent.empty());
    const Buffer& v = sent.back().values;
    EXPECT_EQ(sent.back().header.op(), proto::OP_REPLY) << sent.back().header.error();
    return std::vector<float>(v.as<float>(), v.as<float>() + v.count<float>());
  }
  bool HasRow(uint64_t key) {
    bool has = false;
    EXPECT_TRUE(store_.VisitRows(0, &key, 1, RowAccess::kRead, [&](const RowBlock& b) {
      has = b.rows[0] != nullptr;
      return Status::OK();
    }).ok());
    return has;
  }
  NativeStore& store() { return store_; }
  ServerCounters& counters() { return counters_; }
  TableShard& shard() { return *shard_; }

 private:
  NativeStore store_;
  ServerCounters counters_;
  testing::RecordingReplier replier_;
  std::unique_ptr<TableShard> shard_;
};

std::vector<float> InitialRow(const config::TableConfig& cfg, uint64_t key) {
  std::vector<float> w(kDim);
  InitialRowWeights(cfg.init, 0, key, kDim, w.data());
  return w;
}

TEST(AdmissionShardTest, KeyGetsARowOnlyAtItsNthPushAndEarlierGradientsAreDropped) {
  for (int per_window : {1, 2}) {  // applied on arrival; merged by row id in windows of 2
    SCOPED_TRACE(per_window);
    config::TableConfig cfg = Table();
    cfg.admission.min_count = 3;
    cfg.consistency.merge_max_pushes = per_window;
    ShardHarness h(cfg);
    const uint64_t k = 77, other = 5;
    const std::vector<float> init = InitialRow(cfg, k);
    ASSERT_TRUE(h.Push({k}, 1.0f).ok());
    ASSERT_TRUE(h.Push({k, other}, 1.0f).ok());
    EXPECT_FALSE(h.HasRow(k)) << "pushed N-1 = 2 times";
    EXPECT_EQ(h.counters().lifecycle.gradients_dropped.load(), 3u);
    EXPECT_EQ(h.counters().lifecycle.admitted.load(), 0u);
    // Its pull gets the initializer's row without creating it.
    EXPECT_EQ(h.Pull(k), init);
    EXPECT_FALSE(h.HasRow(k));
    EXPECT_EQ(h.store().num_rows(0), 0u);
    ASSERT_TRUE(h.Push({k}, 1.0f).ok());  // the 3rd sighting admits it
    if (per_window == 2) {
      ASSERT_TRUE(h.Push({}, 0.0f).ok());  // closes the window
    }
    EXPECT_TRUE(h.HasRow(k));
    EXPECT_EQ(h.counters().lifecycle.admitted.load(), 1u);
    EXPECT_EQ(h.store().num_rows(0), 1u);
    const std::vector<float> row = h.Pull(k);
    EXPECT_LT(row[0], init[0]) << "the admitting push's gradient was applied";
    ASSERT_TRUE(h.Push({k}, 1.0f).ok());  // admitted keys are not counted again
    EXPECT_EQ(h.counters().lifecycle.admitted.load(), 1u);
    EXPECT_EQ(h.counters().lifecycle.gradients_dropped.load(), 3u);
  }
}

TEST(AdmissionShardTest, TtlStepsDeletesRowsNotUpdatedForThatManyVersions) {
  config::TableConfig cfg = Table();
  cfg.eviction.ttl_steps = 2;
  ShardHarness h(cfg);
  ASSERT_TRUE(h.Push({1}, 1.0f).ok());  // version 1
  ASSERT_TRUE(h.Push({2}, 1.0f).ok());  // version 2
  EXPECT_TRUE(h.HasRow(1));
  EXPECT_EQ(h.Pull(1).size(), size_t{kDim});  // pulls do not update (nor create) rows
  ASSERT_TRUE(h.Push({2}, 1.0f).ok());  // version 3: row 1 not updated for 2 versions
  EXPECT_FALSE(h.HasRow(1));
  EXPECT_TRUE(h.HasRow(2));
  EXPECT_EQ(h.counters().lifecycle.evicted_ttl.load(), 1u);
  EXPECT_EQ(h.store().num_rows(0), 1u);
  EXPECT_EQ(h.Pull(1), InitialRow(cfg, 1)) << "an evicted row reads as new";
  ASSERT_TRUE(h.Push({1}, 1.0f).ok());  // and is created afresh by its next push
  EXPECT_TRUE(h.HasRow(1));
}

TEST(AdmissionShardTest, TtlSecondsOnTheShardsClock) {
  config::TableConfig cfg = Table();
  cfg.eviction.ttl_seconds = 10;
  ShardHarness h(cfg);
  ASSERT_TRUE(h.Push({1}, 1.0f, 1000000).ok());
  ASSERT_TRUE(h.Push({2}, 1.0f, 6000000).ok());
  ASSERT_TRUE(h.Push({3}, 1.0f, 10999999).ok());  // row 1 is 9.999999 s old
  EXPECT_TRUE(h.HasRow(1));
  ASSERT_TRUE(h.Push({3}, 1.0f, 11000000).ok());  // 10 s
  EXPECT_FALSE(h.HasRow(1));
  EXPECT_TRUE(h.HasRow(2));
  EXPECT_EQ(h.counters().lifecycle.evicted_ttl.load(), 1u);
}

TEST(AdmissionShardTest, MaxRowsEvictsTheLeastRecentlyUpdated) {
  config::TableConfig cfg = Table();
  cfg.eviction.max_rows = 2;
  ShardHarness h(cfg);
  ASSERT_TRUE(h.Push({1}, 1.0f).ok());
  ASSERT_TRUE(h.Push({2}, 1.0f).ok());
  ASSERT_TRUE(h.Push({3}, 1.0f).ok());  // 1 is the least recently updated
  EXPECT_FALSE(h.HasRow(1));
  ASSERT_TRUE(h.Push({2}, 1.0f).ok());  // 3 is now older than 2
  ASSERT_TRUE(h.Push({4}, 1.0f).ok());
  EXPECT_FALSE(h.HasRow(3));
  EXPECT_TRUE(h.HasRow(2));
  EXPECT_TRUE(h.HasRow(4));
  EXPECT_EQ(h.store().num_rows(0), 2u);
  EXPECT_EQ(h.counters().lifecycle.evicted_cap.load(), 2u);
  EXPECT_EQ(h.counters().lifecycle.evicted_ttl.load(), 0u);
}

TEST(AdmissionShardTest, WindowsOfSeveralPushesEvictByKeyAfterTheirApply) {
  // merge_max_pushes 2: windows merge by key (MergeBuffer), never by row id, since EraseRows
  // frees ids for reuse; admission and eviction together.
  config::TableConfig cfg = Table();
  cfg.consistency.merge_max_pushes = 2;
  cfg.admission.min_count = 2;
  cfg.eviction.max_rows = 2;
  ShardHarness h(cfg);
  for (uint64_t k : {1, 2, 3}) {  // windows 1 and 2: every key seen once, nothing admitted
    ASSERT_TRUE(h.Push({k}, 1.0f).ok());
  }
  ASSERT_TRUE(h.Push({}, 0.0f).ok());  // closes window 2 (key 3 and this empty push)
  EXPECT_EQ(h.store().num_rows(0), 0u);
  ASSERT_TRUE(h.Push({1, 2}, 1.0f).ok());
  EXPECT_FALSE(h.HasRow(1)) << "merged, not applied yet: a by-key window creates rows at apply";
  ASSERT_TRUE(h.Push({3}, 1.0f).ok());  // window 3 applies 1, 2, 3: one over the cap
  EXPECT_EQ(h.store().num_rows(0), 2u);
  EXPECT_EQ(h.counters().lifecycle.admitted.load(), 3u);
  EXPECT_EQ(h.counters().lifecycle.evicted_cap.load(), 1u);
  EXPECT_EQ(h.counters().lifecycle.gradients_dropped.load(), 3u);
}

TEST(AdmissionShardTest, StoreWithoutEraseRowsRefusesEviction) {
  class NoEraseStore : public NativeStore {
   public:
    Status EraseRows(uint32_t, const uint64_t*, size_t, size_t*) override {
      return Unimplemented("this store cannot delete rows (eviction)");
    }
  };
  NoEraseStore store;  // a NativeStore without EraseRows: what a store lacking it looks like
  config::TableConfig cfg = Table();
  cfg.eviction.max_rows = 10;
  proto::TableSpec ps;
  ps.set_name("emb");
  ps.set_type(proto::TABLE_SPARSE);
  ps.set_dim(kDim);
  ServerCounters counters;
  testing::RecordingReplier replier;
  auto created = TableShard::Create(0, ps, cfg, {}, 0, &store, &counters, &replier);
  ASSERT_FALSE(created.ok());
  EXPECT_NE(created.status().message().find("asks for eviction"), std::string::npos)
      << created.status().ToString();
}

// Through real Servers: admission min_count 3 and ttl_steps 3 on "emb", one server.
class AdmissionCheckpointTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = (fs::temp_directory_path() / ("osprey-adm-ckpt-" + std::to_string(getpid()))).string();
    fs::remove_all(dir_);
    tables_ = osprey::testing::TestTables();
    tables_[0].admission.min_count = 3;
    tables_[0].eviction.ttl_steps = 4;
  }
  void TearDown() override { fs::remove_all(dir_); }
  static void Push(osprey::testing::RawPeer* p, uint64_t key) {
    proto::Header h;
    h.set_op(proto::OP_PUSH_SPARSE);
    h.set_table(0);
    h.set_epoch(1);
    h.set_num_keys(1);
    h.set_value_bytes(kDim * sizeof(float));
    p->Send(h, osprey::testing::VecBuf<uint64_t>({key}),
            osprey::testing::VecBuf<float>({1, 1, 1, 1}));
    proto::Header r;
    ASSERT_TRUE(p->Next(&r, nullptr));
    ASSERT_EQ(r.op(), proto::OP_REPLY) << r.error();
  }
  std::string dir_;
  std::vector<config::TableConfig> tables_;
};

TEST_F(AdmissionCheckpointTest, SketchAndLastUpdatesSurviveARoundTrip) {
  // Every push is one version (async, applied per push; a push whose rows were all dropped too).
  {
    osprey::testing::InprocCluster c(1, tables_);
    ASSERT_TRUE(c.ActivateAll().ok());
    osprey::testing::RawPeer p(c.NewTransport(), "inproc://server-0");
    Push(&p, 9);  // v1, v2: key 9 seen twice, one short of admission
    Push(&p, 9);
    for (int i = 0; i < 3; ++i) Push(&p, 1);  // v3..v5: row 1 created at v5
    for (int i = 0; i < 3; ++i) Push(&p, 2);  // v6..v8: row 2 created at v8
    ServerStatsSnapshot st = c.server(0).stats();
    EXPECT_EQ(st.rows_admitted, 2u);
    EXPECT_EQ(st.gradients_not_admitted, 6u);
    EXPECT_EQ(st.rows_evicted_ttl, 0u);
    auto path = c.server(0).Checkpoint(dir_);
    ASSERT_TRUE(path.ok()) << path.status().ToString();
    c.server(0).Stop();
  }
  osprey::testing::InprocCluster c(1, tables_);
  c.server(0).SetRestoreDir(dir_);
  ASSERT_TRUE(c.ActivateAll().ok());
  EXPECT_EQ(c.server(0).restored_versions()[0], 8u);
  osprey::testing::RawPeer p(c.NewTransport(), "inproc://server-0");
  Push(&p, 9);  // v9: the restored sketch counts 2, so this third sighting admits key 9
  ServerStatsSnapshot st = c.server(0).stats();
  EXPECT_EQ(st.rows_admitted, 1u) << "the sketch was not restored";
  EXPECT_EQ(st.gradients_not_admitted, 0u);
  // ttl_steps 4: v9 is 4 versions after row 1's last update (v5), if that came back with it.
  EXPECT_EQ(st.rows_evicted_ttl, 1u) << "row 1's last update was not restored";
  for (int i = 0; i < 3; ++i) Push(&p, 9);  // v12: 4 after row 2's (v8)
  EXPECT_EQ(c.server(0).stats().rows_evicted_ttl, 2u);
  c.server(0).Stop();
}

TEST_F(AdmissionCheckpointTest, RestoreOntoAnotherServerCountSumsTheSketches) {
  const uint64_t keys[2] = {11, 12};
  {
    osprey::testing::InprocCluster c(2, tables_);
    ASSERT_TRUE(c.ActivateAll().ok());
    std::vector<std::unique_ptr<osprey::testing::RawPeer>> peers;
    for (int i = 0; i < 2; ++i) {
      peers.push_back(std::make_unique<osprey::testing::RawPeer>(
          c.NewTransport(), "inproc://server-" + std::to_string(i)));
    }
    for (uint64_t k : keys) {  // each seen twice on its own server
      for (int i = 0; i < 2; ++i) Push(peers[ServerForKey(0, k, 2)].get(), k);
    }
    for (int i = 0; i < 2; ++i) ASSERT_TRUE(c.server(i).Checkpoint(dir_).ok());
    for (int i = 0; i < 2; ++i) c.server(i).Stop();
  }
  osprey::testing::InprocCluster c(1, tables_);
  c.server(0).SetRestoreDir(dir_);
  ASSERT_TRUE(c.ActivateAll().ok());
  osprey::testing::RawPeer p(c.NewTransport(), "inproc://server-0");
  for (uint64_t k : keys) Push(&p, k);  // the third sighting of each, wherever it was counted
  EXPECT_EQ(c.server(0).stats().rows_admitted, 2u);
  EXPECT_EQ(c.server(0).stats().gradients_not_admitted, 0u);
  c.server(0).Stop();
}

TEST_F(AdmissionCheckpointTest, CorruptStateBlockIsRefusedWithNothingRestored) {
  {
    osprey::testing::InprocCluster c(1, tables_);
    ASSERT_TRUE(c.ActivateAll().ok());
    osprey::testing::RawPeer p(c.NewTransport(), "inproc://server-0");
    Push(&p, 9);
    ASSERT_TRUE(c.server(0).Checkpoint(dir_).ok());
    c.server(0).Stop();
  }
  const std::string file = CheckpointPath(dir_, 0, 1);
  std::string bytes;
  {
    std::ifstream in(file, std::ios::binary);
    bytes.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  }
  const size_t at = bytes.find("SIDE");
  ASSERT_NE(at, std::string::npos) << "no state block written";
  bytes[at + 40] ^= 0x10;  // inside the payload (the sketch's counters)
  std::ofstream(file, std::ios::binary | std::ios::trunc) << bytes;
  osprey::testing::InprocCluster c(1, tables_);
  c.server(0).SetRestoreDir(dir_);
  Status s = c.ActivateAll();
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.code(), StatusCode::kDataLoss) << s.ToString();
  EXPECT_NE(s.message().find("state block checksum mismatch"), std::string::npos) << s.ToString();
}

TEST_F(AdmissionCheckpointTest, FormatOneCheckpointsStillLoad) {
  {
    osprey::testing::InprocCluster c(1, osprey::testing::TestTables());
    ASSERT_TRUE(c.ActivateAll().ok());
    osprey::testing::RawPeer p(c.NewTransport(), "inproc://server-0");
    Push(&p, 4);
    ASSERT_TRUE(c.server(0).Checkpoint(dir_).ok());
    c.server(0).Stop();
  }
  // A file without state blocks is format 1 byte for byte but for its version field (bytes
  // 8..11, outside every checksum).
  const std::string file = CheckpointPath(dir_, 0, 1);
  std::fstream f(file, std::ios::in | std::ios::out | std::ios::binary);
  const uint32_t one = 1;
  f.seekp(8);
  f.write(reinterpret_cast<const char*>(&one), 4);
  f.close();
  osprey::testing::InprocCluster c(1, tables_);  // now with admission and eviction
  c.server(0).SetRestoreDir(dir_);
  ASSERT_TRUE(c.ActivateAll().ok());
  EXPECT_EQ(c.server(0).restored_versions()[0], 1u);
  c.server(0).Stop();
}

}  // namespace
}  // namespace osprey::server
