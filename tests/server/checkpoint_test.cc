// Checkpoints through real Servers (in-process transport): bit-exact round trip of weights and
// optimizer state, restore onto another server count, and refusal of truncated, bit-flipped,
// wrong-version and incomplete checkpoints.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <map>

#include "common/placement.h"
#include "server/checkpoint.h"
#include "server/crc32c.h"
#include "server/server.h"
#include "tests/testing/cluster_fixture.h"

namespace osprey::server {
namespace {

namespace fs = std::filesystem;
using testing::InprocCluster;
using testing::RawPeer;
using testing::VecBuf;

// Adam on the sparse table so a row carries state (m, v, step count) that must survive.
std::vector<config::TableConfig> Tables() {
  auto t = testing::TestTables();
  t[0].optimizer.type = OptimizerType::kAdam;
  t[0].optimizer.lr = 0.01f;
  t[1].optimizer.type = OptimizerType::kAdagrad;
  return t;
}

proto::Header Req(proto::Op op, uint32_t table, uint64_t num_keys, uint64_t value_bytes) {
  proto::Header h;
  h.set_op(op);
  h.set_table(table);
  h.set_epoch(1);
  h.set_num_keys(num_keys);
  h.set_value_bytes(value_bytes);
  return h;
}

// Talks to every server of a cluster, routing keys like the client does.
class Router {
 public:
  explicit Router(InprocCluster* c) : n_(c->map().server_endpoints_size()) {
    for (int i = 0; i < n_; ++i) {
      peers_.push_back(std::make_unique<RawPeer>(c->NewTransport(), "inproc://server-" + std::to_string(i)));
    }
  }
  proto::Header Call(int server, const proto::Header& h, Buffer keys, Buffer values,
                     Buffer* out = nullptr) {
    peers_[server]->Send(h, std::move(keys), std::move(values));
    proto::Header r;
    EXPECT_TRUE(peers_[server]->Next(&r, out)) << "no reply";
    EXPECT_EQ(r.op(), proto::OP_REPLY) << r.error();
    return r;
  }
  std::vector<float> Row(uint64_t key) {
    Buffer out;
    Call(ServerForKey(0, key, n_), Req(proto::OP_PULL_SPARSE, 0, 1, 0), VecBuf<uint64_t>({key}),
         Buffer(), &out);
    return std::vector<float>(out.as<float>(), out.as<float>() + out.count<float>());
  }
  void PushRow(uint64_t key, std::vector<float> g) {
    Call(ServerForKey(0, key, n_), Req(proto::OP_PUSH_SPARSE, 0, 1, 16), VecBuf<uint64_t>({key}),
         VecBuf(std::move(g)));
  }
  std::vector<float> Dense() {  // 10 floats, chunks 0..2
    std::vector<float> all;
    for (uint64_t c = 0; c < 3; ++c) {
      Buffer out;
      Call(ServerForChunk(1, c, n_), Req(proto::OP_PULL_DENSE, 1, 1, 0), VecBuf<uint64_t>({c}),
           Buffer(), &out);
      all.insert(all.end(), out.as<float>(), out.as<float>() + out.count<float>());
    }
    return all;
  }
  void InitAndPushDense() {
    const size_t widths[3] = {4, 4, 2};
    for (uint64_t c = 0; c < 3; ++c) {
      std::vector<float> v(widths[c], 1.0f + c), g(widths[c], 0.5f - c);
      int s = ServerForChunk(1, c, n_);
      Call(s, Req(proto::OP_INIT_DENSE, 1, 1, v.size() * 4), VecBuf<uint64_t>({c}), VecBuf(v));
      Call(s, Req(proto::OP_PUSH_DENSE, 1, 1, g.size() * 4), VecBuf<uint64_t>({c}), VecBuf(g));
    }
  }

 private:
  int n_;
  std::vector<std::unique_ptr<RawPeer>> peers_;
};

constexpr uint64_t kKeys = 40;

void Train(Router* r) {
  r->InitAndPushDense();
  for (int step = 0; step < 3; ++step) {
    for (uint64_t k = 0; k < kKeys; ++k) {
      float f = 0.1f * static_cast<float>(k + 1) * static_cast<float>(step + 1);
      r->PushRow(k, {f, -f, 2 * f, 0.5f});
    }
  }
}

std::map<uint64_t, std::vector<float>> Rows(Router* r) {
  std::map<uint64_t, std::vector<float>> rows;
  for (uint64_t k = 0; k < kKeys; ++k) rows[k] = r->Row(k);
  return rows;
}

class CheckpointTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = (fs::temp_directory_path() /
            ("osprey-ckpt-" + std::to_string(getpid()) + "-" +
             ::testing::UnitTest::GetInstance()->current_test_info()->name()))
               .string();
    fs::remove_all(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  // Trains on `servers` servers, checkpoints each, returns the rows and dense values after one
  // more step applied to the trained state (which also exercises the optimizer state).
  void MakeCheckpoint(int servers) {
    InprocCluster c(servers, Tables());
    ASSERT_TRUE(c.ActivateAll().ok());
    Router r(&c);
    Train(&r);
    for (int i = 0; i < servers; ++i) {
      auto path = c.server(i).Checkpoint(dir_);
      ASSERT_TRUE(path.ok()) << path.status().ToString();
      EXPECT_TRUE(fs::exists(*path));
    }
    rows_ = Rows(&r);
    dense_ = r.Dense();
    r.PushRow(3, {1, 1, 1, 1});
    next_row3_ = r.Row(3);
  }
  // Restores onto `servers` servers; returns Activate's status of the first failing server.
  Status Restore(InprocCluster* c) {
    for (int i = 0; i < c->map().server_endpoints_size(); ++i) c->server(i).SetRestoreDir(dir_);
    return c->ActivateAll();
  }
  void ExpectSameState(InprocCluster* c) {
    Router r(c);
    auto rows = Rows(&r);
    for (uint64_t k = 0; k < kKeys; ++k) {
      ASSERT_EQ(rows[k].size(), rows_[k].size());
      EXPECT_EQ(0, std::memcmp(rows[k].data(), rows_[k].data(), rows[k].size() * 4)) << "key " << k;
    }
    std::vector<float> dense = r.Dense();
    ASSERT_EQ(dense.size(), dense_.size());
    EXPECT_EQ(0, std::memcmp(dense.data(), dense_.data(), dense.size() * 4));
    r.PushRow(3, {1, 1, 1, 1});  // Adam's m, v and step count were restored too
    std::vector<float> next = r.Row(3);
    EXPECT_EQ(0, std::memcmp(next.data(), next_row3_.data(), next.size() * 4));
  }
  std::string File(int rank, int n) const { return CheckpointPath(dir_, rank, n); }

  std::string dir_;
  std::map<uint64_t, std::vector<float>> rows_;
  std::vector<float> dense_, next_row3_;
};

TEST(Crc32cTest, KnownVector) { EXPECT_EQ(Crc32c(0, "123456789", 9), 0xE3069283u); }

TEST_F(CheckpointTest, RoundTripIsBitExact) {
  MakeCheckpoint(1);
  InprocCluster c(1, Tables());
  ASSERT_TRUE(Restore(&c).ok());
  ExpectSameState(&c);
}

TEST_F(CheckpointTest, RestoresOnMoreAndFewerServers) {
  MakeCheckpoint(2);
  {
    InprocCluster c(3, Tables());
    Status s = Restore(&c);
    ASSERT_TRUE(s.ok()) << s.ToString();
    ExpectSameState(&c);
  }
  InprocCluster c(1, Tables());
  Status s = Restore(&c);
  ASSERT_TRUE(s.ok()) << s.ToString();
  ExpectSameState(&c);
}

TEST_F(CheckpointTest, OnDemandControlOpWritesTheFile) {
  InprocCluster c(1, Tables());
  config::CheckpointConfig cfg;
  cfg.dir = dir_;  // a request may name only this directory or one beneath it
  c.server(0).SetCheckpointConfig(cfg);
  ASSERT_TRUE(c.ActivateAll().ok());
  RawPeer peer(c.NewTransport(), "inproc://server-0");
  proto::Header h;
  h.set_op(proto::OP_CHECKPOINT);
  peer.Send(h, Buffer(), Buffer::Copy(dir_.data(), dir_.size()));
  proto::Header r;
  Buffer out;
  ASSERT_TRUE(peer.Next(&r, &out));
  ASSERT_EQ(r.op(), proto::OP_REPLY) << r.error();
  EXPECT_EQ(std::string(reinterpret_cast<const char*>(out.data()), out.size()), File(0, 1));
  EXPECT_TRUE(fs::exists(File(0, 1)));
}

TEST_F(CheckpointTest, EveryStepsWritesPeriodically) {
  InprocCluster c(1, Tables());
  config::CheckpointConfig cfg;
  cfg.dir = dir_;
  cfg.every_steps = 2;
  c.server(0).SetCheckpointConfig(cfg);
  ASSERT_TRUE(c.ActivateAll().ok());
  Router r(&c);
  r.PushRow(1, {1, 1, 1, 1});
  EXPECT_FALSE(fs::exists(File(0, 1))) << "written after 1 step";
  r.PushRow(1, {1, 1, 1, 1});
  EXPECT_TRUE(fs::exists(File(0, 1))) << "not written after 2 steps";
}

void Corrupt(const std::string& path, const std::function<void(std::string*)>& change) {
  std::ifstream in(path, std::ios::binary);
  std::string b((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  in.close();
  change(&b);
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(b.data(), static_cast<std::streamsize>(b.size()));
}

void ExpectRefused(Status s, StatusCode code, const std::string& fragment) {
  EXPECT_EQ(s.code(), code) << s.ToString();
  EXPECT_NE(s.message().find(fragment), std::string::npos) << s.ToString();
}

TEST_F(CheckpointTest, TruncatedFileIsRefused) {
  MakeCheckpoint(2);
  Corrupt(File(1, 2), [](std::string* b) { b->resize(b->size() - 30); });
  InprocCluster c(1, Tables());
  ExpectRefused(Restore(&c), StatusCode::kDataLoss, "truncated");
}

TEST_F(CheckpointTest, BitFlipIsRefused) {
  MakeCheckpoint(1);
  Corrupt(File(0, 1), [](std::string* b) { (*b)[b->size() / 2] ^= 0x10; });
  InprocCluster c(1, Tables());
  ExpectRefused(Restore(&c), StatusCode::kDataLoss, "checksum mismatch");
}

TEST_F(CheckpointTest, WrongFormatVersionIsRefused) {
  MakeCheckpoint(1);
  Corrupt(File(0, 1), [](std::string* b) { (*b)[8] = 7; });
  InprocCluster c(1, Tables());
  ExpectRefused(Restore(&c), StatusCode::kFailedPrecondition, "format version 7");
}

TEST_F(CheckpointTest, MissingFileAndOtherTablesAreRefused) {
  MakeCheckpoint(2);
  {
    auto other = Tables();
    other[0].dim = 8;
    InprocCluster c(1, other);
    ExpectRefused(Restore(&c), StatusCode::kFailedPrecondition, "differs");
  }
  fs::remove(File(1, 2));
  InprocCluster c(1, Tables());
  ExpectRefused(Restore(&c), StatusCode::kFailedPrecondition, "lacks");
}

}  // namespace
}  // namespace osprey::server
