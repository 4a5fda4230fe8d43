#include "common/codec/codec_math.h"
#include "common/codec/encoded.h"
#include "server/server.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "common/placement.h"
#include "server/sparse_table.h"
#include "tests/testing/cluster_fixture.h"

namespace osprey::server {
namespace {

using testing::InprocCluster;
using testing::RawPeer;
using testing::VecBuf;

proto::Header Req(proto::Op op, uint32_t table, uint64_t num_keys, uint64_t value_bytes) {
  proto::Header h;
  h.set_op(op);
  h.set_table(table);
  h.set_request_id(42);
  h.set_epoch(1);
  h.set_num_keys(num_keys);
  h.set_value_bytes(value_bytes);
  return h;
}

// Row of `key` after server-side init (same function as the server's).
std::vector<float> InitialRow(const config::TableConfig& cfg, uint64_t key) {
  SparseTable t(0, cfg.dim, cfg.init, *Optimizer::Make(cfg.optimizer));
  std::vector<float> w(cfg.dim);
  t.InitialWeights(key, w.data());
  return w;
}

class ServerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(cluster_.ActivateAll().ok());
    peer_ = std::make_unique<RawPeer>(cluster_.NewTransport(), "inproc://server-0");
  }
  // Sends and returns the reply header (fails the test on timeout).
  proto::Header Call(const proto::Header& h, Buffer keys, Buffer values, Buffer* out = nullptr) {
    peer_->Send(h, std::move(keys), std::move(values));
    proto::Header reply;
    EXPECT_TRUE(peer_->Next(&reply, out)) << "no reply";
    return reply;
  }
  std::vector<float> PullRow(uint64_t key) {
    Buffer out;
    proto::Header r = Call(Req(proto::OP_PULL_SPARSE, 0, 1, 0), VecBuf<uint64_t>({key}), Buffer(), &out);
    EXPECT_EQ(r.op(), proto::OP_REPLY) << r.error();
    return std::vector<float>(out.as<float>(), out.as<float>() + out.count<float>());
  }
  void ExpectError(const proto::Header& h, Buffer keys, Buffer values, const std::string& fragment) {
    proto::Header r = Call(h, std::move(keys), std::move(values));
    EXPECT_EQ(r.op(), proto::OP_ERROR);
    EXPECT_EQ(r.request_id(), h.request_id());
    EXPECT_NE(r.error().find(fragment), std::string::npos) << "error was: " << r.error();
  }

  InprocCluster cluster_{1};
  std::unique_ptr<RawPeer> peer_;
};

TEST_F(ServerTest, PullCreatesDeterministicRows) {
  std::vector<float> a = PullRow(77);
  ASSERT_EQ(a.size(), 4u);
  EXPECT_EQ(a, InitialRow(cluster_.tables()[0], 77));
  EXPECT_EQ(PullRow(77), a);
  EXPECT_NE(PullRow(78), a);
}

TEST_F(ServerTest, PushAppliesOptimizerAndBumpsVersion) {
  std::vector<float> before = PullRow(5);
  proto::Header r = Call(Req(proto::OP_PUSH_SPARSE, 0, 1, 16), VecBuf<uint64_t>({5}),
                         VecBuf<float>({1, 2, 3, 4}));
  ASSERT_EQ(r.op(), proto::OP_REPLY) << r.error();
  EXPECT_EQ(r.version(), 1u);
  std::vector<float> after = PullRow(5);
  for (int i = 0; i < 4; ++i) EXPECT_FLOAT_EQ(after[i], before[i] - 0.5f * (i + 1));
}

TEST_F(ServerTest, DenseInitFirstWriterWinsThenPushAndPull) {
  // 10 floats in chunks of 4: chunks 0,1,2 with 4,4,2 floats, all on server 0.
  std::vector<float> init(10);
  for (int i = 0; i < 10; ++i) init[i] = static_cast<float>(i);
  auto r = Call(Req(proto::OP_INIT_DENSE, 1, 3, 40), VecBuf<uint64_t>({0, 1, 2}), VecBuf(init));
  ASSERT_EQ(r.op(), proto::OP_REPLY) << r.error();
  r = Call(Req(proto::OP_INIT_DENSE, 1, 3, 40), VecBuf<uint64_t>({0, 1, 2}),
           VecBuf(std::vector<float>(10, 99.0f)));
  ASSERT_EQ(r.op(), proto::OP_REPLY);
  r = Call(Req(proto::OP_PUSH_DENSE, 1, 1, 8), VecBuf<uint64_t>({2}), VecBuf<float>({2, 4}));
  ASSERT_EQ(r.op(), proto::OP_REPLY) << r.error();
  Buffer out;
  r = Call(Req(proto::OP_PULL_DENSE, 1, 2, 0), VecBuf<uint64_t>({2, 0}), Buffer(), &out);
  ASSERT_EQ(r.op(), proto::OP_REPLY) << r.error();
  ASSERT_EQ(out.count<float>(), 6u);
  const float* v = out.as<float>();
  EXPECT_FLOAT_EQ(v[0], 8.0f - 1.0f);  // chunk 2 first, as requested: 8 - 0.5*2
  EXPECT_FLOAT_EQ(v[1], 9.0f - 2.0f);
  for (int i = 0; i < 4; ++i) EXPECT_FLOAT_EQ(v[2 + i], static_cast<float>(i));
}

TEST_F(ServerTest, MalformedRequestsGetErrorsAndServerKeepsServing) {
  std::vector<float> before = PullRow(9);
  // Garbage header bytes.
  peer_->Send(Buffer::Copy("\xff\xff\xff", 3), Buffer(), Buffer());
  proto::Header r;
  ASSERT_TRUE(peer_->Next(&r, nullptr));
  EXPECT_EQ(r.op(), proto::OP_ERROR);
  EXPECT_NE(r.error().find("malformed header"), std::string::npos) << r.error();
  // Wrong protocol version.
  proto::Header h = Req(proto::OP_PULL_SPARSE, 0, 1, 0);
  h.set_protocol_version(7);
  ExpectError(h, VecBuf<uint64_t>({9}), Buffer(), "protocol version 7");
  // Unknown op and unknown table.
  ExpectError(Req(static_cast<proto::Op>(55), 0, 1, 0), VecBuf<uint64_t>({9}), Buffer(), "not a server request");
  ExpectError(Req(proto::OP_PULL_SPARSE, 9, 1, 0), VecBuf<uint64_t>({9}), Buffer(), "table id 9 does not exist");
  // Table type mismatch.
  ExpectError(Req(proto::OP_PULL_DENSE, 0, 1, 0), VecBuf<uint64_t>({0}), Buffer(), "is sparse");
  // Keys frame disagrees with num_keys (truncated).
  ExpectError(Req(proto::OP_PULL_SPARSE, 0, 3, 0), VecBuf<uint64_t>({9, 10}), Buffer(), "num_keys is 3");
  // Values frame too short / header value_bytes disagreeing.
  ExpectError(Req(proto::OP_PUSH_SPARSE, 0, 1, 16), VecBuf<uint64_t>({9}), VecBuf<float>({1, 2}), "values frame has 8 bytes");
  ExpectError(Req(proto::OP_PUSH_SPARSE, 0, 1, 12), VecBuf<uint64_t>({9}), VecBuf<float>({1, 2, 3, 4}), "header says 12");
  // Oversized values frame.
  ExpectError(Req(proto::OP_PUSH_SPARSE, 0, 1, 400), VecBuf<uint64_t>({9}), VecBuf(std::vector<float>(100)), "need 16");
  // Stale epoch.
  h = Req(proto::OP_PULL_SPARSE, 0, 1, 0);
  h.set_epoch(5);
  ExpectError(h, VecBuf<uint64_t>({9}), Buffer(), "epoch 5 is not the current epoch 1");
  // A compressed push whose frame does not match its header.
  h = Req(proto::OP_PUSH_SPARSE, 0, 1, 16);
  h.set_codec(proto::CODEC_TOPK);
  ExpectError(h, VecBuf<uint64_t>({9}), VecBuf<float>({1, 2, 3, 4}), "compressed push");
  // Non-finite gradient: refused naming table and key; nothing of the push applied.
  float nan = std::numeric_limits<float>::quiet_NaN();
  ExpectError(Req(proto::OP_PUSH_SPARSE, 0, 2, 32), VecBuf<uint64_t>({9, 10}),
              VecBuf<float>({1, 1, 1, 1, 0, nan, 0, 0}), "table 'emb': non-finite gradient at key 10");
  // Dense chunk out of range.
  ExpectError(Req(proto::OP_PULL_DENSE, 1, 1, 0), VecBuf<uint64_t>({3}), Buffer(), "chunk 3 does not exist");
  EXPECT_EQ(PullRow(9), before) << "a rejected request changed a row";
  EXPECT_EQ(cluster_.server(0).stats().bad_requests, 13u);
}

// A sparse pull may ask for its rows as fp16 or bf16: the reply carries the fp32 rows cast (and
// says so in its header); any other codec on a pull, or a count that is not keys x dim, is refused.
TEST_F(ServerTest, SparsePullCastsRowsOnRequest) {
  const std::vector<uint64_t> keys = {11, 12, 13};
  std::vector<float> fp32;
  for (uint64_t k : keys) {
    std::vector<float> row = PullRow(k);
    fp32.insert(fp32.end(), row.begin(), row.end());
  }
  for (auto [codec_id, type] : {std::pair{proto::CODEC_FP16, codec::ValueType::kFp16},
                                std::pair{proto::CODEC_BF16, codec::ValueType::kBf16}}) {
    proto::Header h = Req(proto::OP_PULL_SPARSE, 0, keys.size(), 0);
    h.set_codec(codec_id);
    h.set_codec_value_type(static_cast<uint32_t>(type));
    h.set_codec_count(keys.size() * 4);
    Buffer out;
    proto::Header r = Call(h, VecBuf<uint64_t>(keys), Buffer(), &out);
    ASSERT_EQ(r.op(), proto::OP_REPLY) << r.error();
    EXPECT_EQ(r.codec(), codec_id);
    EXPECT_EQ(r.codec_count(), fp32.size());
    ASSERT_EQ(out.size(), fp32.size() * 2);
    const uint16_t* bits = reinterpret_cast<const uint16_t*>(out.data());
    for (size_t i = 0; i < fp32.size(); ++i) {
      const uint16_t want = type == codec::ValueType::kFp16 ? codec::FloatToHalfBits(fp32[i])
                                                            : codec::FloatToBf16Bits(fp32[i]);
      EXPECT_EQ(bits[i], want) << "value " << i;
    }
  }
  proto::Header topk = Req(proto::OP_PULL_SPARSE, 0, 1, 0);
  topk.set_codec(proto::CODEC_TOPK);
  ExpectError(topk, VecBuf<uint64_t>({11}), Buffer(), "may ask for its rows as fp16 or bf16 only");
  proto::Header mismatched = Req(proto::OP_PULL_SPARSE, 0, 1, 0);
  mismatched.set_codec(proto::CODEC_FP16);
  mismatched.set_codec_value_type(static_cast<uint32_t>(codec::ValueType::kBf16));
  mismatched.set_codec_count(4);
  ExpectError(mismatched, VecBuf<uint64_t>({11}), Buffer(), "fp16 or bf16 only");
  proto::Header miscounted = Req(proto::OP_PULL_SPARSE, 0, 1, 0);
  miscounted.set_codec(proto::CODEC_BF16);
  miscounted.set_codec_value_type(static_cast<uint32_t>(codec::ValueType::kBf16));
  miscounted.set_codec_count(5);
  ExpectError(miscounted, VecBuf<uint64_t>({11}), Buffer(), "codec_count 5 is not the 1 keys x dim 4");
  proto::Header dense = Req(proto::OP_PULL_DENSE, 1, 1, 0);
  dense.set_codec(proto::CODEC_BF16);
  ExpectError(dense, VecBuf<uint64_t>({0}), Buffer(), "only pushes and sparse pulls");
}

TEST(ServerOwnershipTest, KeyOfAnotherServerIsRefused) {
  InprocCluster cluster(2);
  ASSERT_TRUE(cluster.ActivateAll().ok());
  RawPeer peer(cluster.NewTransport(), "inproc://server-0");
  uint64_t foreign = 0;
  while (ServerForKey(0, foreign, 2) != 1) ++foreign;
  peer.Send(Req(proto::OP_PULL_SPARSE, 0, 1, 0), VecBuf<uint64_t>({foreign}), Buffer());
  proto::Header r;
  ASSERT_TRUE(peer.Next(&r, nullptr));
  EXPECT_EQ(r.op(), proto::OP_ERROR);
  EXPECT_NE(r.error().find("belongs to server 1"), std::string::npos) << r.error();
}

TEST(ServerActivationTest, RequestsBeforeActivateAreHeldThenServed) {
  InprocCluster cluster(1);
  RawPeer peer(cluster.NewTransport(), "inproc://server-0");
  peer.Send(Req(proto::OP_PULL_SPARSE, 0, 1, 0), VecBuf<uint64_t>({1}), Buffer());
  // Activate only once the server holds the request (it arrived before the shard map did).
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  while (cluster.server(0).num_early_requests() == 0 && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::yield();
  }
  ASSERT_EQ(cluster.server(0).num_early_requests(), 1u);
  ASSERT_TRUE(cluster.ActivateAll().ok());
  EXPECT_EQ(cluster.server(0).num_early_requests(), 0u);
  proto::Header r;
  Buffer out;
  ASSERT_TRUE(peer.Next(&r, &out));
  EXPECT_EQ(r.op(), proto::OP_REPLY) << r.error();
  EXPECT_EQ(out.size(), 16u);
}

TEST(ServerActivationTest, MismatchedShardMapIsRefused) {
  InprocCluster cluster(1);
  auto tables = cluster.tables();
  tables.pop_back();
  Status s = cluster.server(0).Activate(0, cluster.map(), tables);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(cluster.server(0).Activate(3, cluster.map(), cluster.tables()).code(),
            StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace osprey::server
