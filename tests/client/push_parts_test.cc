// Push parts (worker/client/push_parts.h): where a push is cut, and a split push through real
// in-process servers lands exactly as the whole push would -- one push counted, the same weights
// -- while a push with a non-finite value goes whole and is rejected whole.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <vector>

#include "common/codec/codec_math.h"
#include "common/codec/row_cast.h"
#include "tests/testing/cluster_fixture.h"
#include "proto/wire.h"
#include "tests/testing/observed_transport.h"
#include "worker/client/client.h"
#include "worker/client/push_encoder.h"
#include "worker/client/push_parts.h"

namespace osprey::worker {
namespace {

using testing::InprocCluster;
using testing::ObservedTransport;
using testing::SentFrame;

constexpr float kLr = 0.5f;
constexpr size_t kDim = 4;             // sparse rows of 16 bytes
constexpr size_t kDenseFloats = 4096;  // 16 chunks of 256 floats (1 KiB)

std::vector<config::TableConfig> Tables() {
  config::TableConfig sparse;
  sparse.name = "emb";
  sparse.type = config::TableType::kSparse;
  sparse.dim = kDim;
  sparse.optimizer.lr = kLr;
  config::TableConfig dense;
  dense.name = "mlp";
  dense.type = config::TableType::kDense;
  dense.size = kDenseFloats;
  dense.chunk_floats = 256;
  dense.optimizer.lr = kLr;
  return {sparse, dense};
}

TEST(PartStartsTest, UniformRowsAreCutIntoWholePartsAndTheRemainderJoinsTheLast) {
  // 1000 rows of 16 bytes, parts of >= 1024 bytes: 64 rows each, 15 parts, the last 104 rows.
  std::vector<size_t> s = UniformPartStarts(1000, kDim, 1024, kMaxClientPushParts);
  ASSERT_EQ(s.size(), 15u);
  for (size_t p = 0; p < s.size(); ++p) EXPECT_EQ(s[p], p * 64);
  // Too small for two parts, a single key, or parts off: one message.
  EXPECT_EQ(UniformPartStarts(100, kDim, 1024, 16), std::vector<size_t>{0});  // 1600 bytes
  EXPECT_EQ(UniformPartStarts(1, 1 << 20, 1024, 16), std::vector<size_t>{0});
  EXPECT_EQ(UniformPartStarts(1000, kDim, 0, 16), std::vector<size_t>{0});
  // Never more than max_parts: the parts grow instead.
  s = UniformPartStarts(1000000, 16, 1024, 16);
  EXPECT_EQ(s.size(), 16u);
  EXPECT_EQ(s[1], 62500u);
}

TEST(PartStartsTest, ChunksAreCutAtChunkBoundariesWithNoSmallLastPart) {
  // Chunks of 1024 bytes and a last one of 400: cuts before chunks 1, 2, 3; chunk 4 is too small
  // to be a part of its own and rides with chunk 3.
  EXPECT_EQ(PartStarts({256, 256, 256, 256, 100}, 1024, 16), (std::vector<size_t>{0, 1, 2, 3}));
  // Parts of two chunks.
  EXPECT_EQ(PartStarts({256, 256, 256, 256, 256, 256}, 2048, 16), (std::vector<size_t>{0, 2, 4}));
  EXPECT_EQ(PartStarts({256, 256, 256}, 2048, 16), std::vector<size_t>{0});  // 3 KiB < 2 parts
  EXPECT_EQ(PartStarts({1 << 20}, 1024, 16), std::vector<size_t>{0});       // one chunk
}

TEST(PartStartsTest, AllFiniteFloatsFindsAnyNonFiniteValue) {
  std::vector<float> g(10000);
  for (size_t i = 0; i < g.size(); ++i) g[i] = static_cast<float>(i) * 0.25f - 100.0f;
  g[3] = -0.0f;
  g[4] = std::numeric_limits<float>::denorm_min();
  g[5] = std::numeric_limits<float>::max();
  g[6] = std::numeric_limits<float>::lowest();
  EXPECT_TRUE(AllFiniteFloats(g.data(), g.size()));
  EXPECT_TRUE(AllFiniteFloats(g.data(), 0));
  for (size_t at : {size_t{0}, size_t{4095}, size_t{4096}, size_t{9999}}) {
    for (float bad : {std::nanf(""), std::numeric_limits<float>::infinity(),
                      -std::numeric_limits<float>::infinity()}) {
      std::vector<float> b = g;
      b[at] = bad;
      EXPECT_FALSE(AllFiniteFloats(b.data(), b.size())) << "value " << bad << " at " << at;
    }
  }
}

// A client with push parts of `part_bytes` over an observed transport, and the server's counters.
class PushPartsTest : public ::testing::Test {
 protected:
  void Connect(size_t part_bytes) {
    ASSERT_TRUE(cluster_.ActivateAll().ok());
    auto t = std::make_unique<ObservedTransport>(cluster_.NewTransport());
    transport_ = t.get();
    ClientOptions o;
    o.push_part_bytes = part_bytes;
    client_ = std::make_unique<Client>(o, std::move(t), cluster_.map());
    ASSERT_TRUE(client_->Start().ok());
  }
  std::vector<float> PullSparse(const std::vector<uint64_t>& keys) {
    std::vector<float> out(keys.size() * kDim);
    EXPECT_TRUE(client_->Wait(client_->Pull(0, keys.data(), keys.size(), out.data())).ok());
    return out;
  }
  std::vector<float> PullDense() {
    std::vector<float> out(kDenseFloats);
    EXPECT_TRUE(client_->Wait(client_->PullDense(1, out.data())).ok());
    return out;
  }
  uint64_t PushesApplied() { return cluster_.server(0).stats().pushes_applied; }

  InprocCluster cluster_{1, Tables()};
  ObservedTransport* transport_ = nullptr;
  std::unique_ptr<Client> client_;
};

std::vector<uint64_t> Keys(size_t n) {
  std::vector<uint64_t> keys(n);
  for (size_t i = 0; i < n; ++i) keys[i] = 7 + 13 * i;  // distinct
  return keys;
}

std::vector<float> Grads(size_t n) {
  std::vector<float> g(n);
  for (size_t i = 0; i < n; ++i) g[i] = 0.001f * static_cast<float>(i % 997) - 0.3f;
  return g;
}

TEST_F(PushPartsTest, SparsePushInPartsIsOnePushWithTheWholePushesWeights) {
  Connect(1024);
  const std::vector<uint64_t> keys = Keys(1000);  // 16000 bytes of rows: 15 parts
  const std::vector<float> before = PullSparse(keys), g = Grads(keys.size() * kDim);
  const uint64_t applied = PushesApplied();
  const size_t sent = transport_->sent().size();
  ASSERT_TRUE(client_->Wait(client_->Push(0, keys.data(), keys.size(), g.data())).ok());
  EXPECT_EQ(transport_->sent().size() - sent, 15u) << "the push was not sent in parts";
  EXPECT_EQ(PushesApplied() - applied, 1u) << "the parts counted as pushes of their own";
  const std::vector<float> after = PullSparse(keys);
  for (size_t i = 0; i < after.size(); ++i) ASSERT_FLOAT_EQ(after[i], before[i] - kLr * g[i]) << i;
}

TEST_F(PushPartsTest, Bf16RowsGoInPartsEachEncodedAloneAndLandAsTheWholePushWould) {
  Connect(1024);
  StatusOr<std::unique_ptr<PushEncoder>> bf16 = MakeRowCastEncoder(proto::CODEC_BF16);
  ASSERT_TRUE(bf16.ok());
  ASSERT_TRUE(client_->SetEncoder(0, std::move(*bf16)).ok());
  const std::vector<uint64_t> keys = Keys(1000);  // 16000 bytes of fp32 rows: 15 parts
  const std::vector<float> before = PullSparse(keys), g = Grads(keys.size() * kDim);
  const uint64_t applied = PushesApplied();
  const size_t sent = transport_->sent().size();
  ASSERT_TRUE(client_->Wait(client_->Push(0, keys.data(), keys.size(), g.data())).ok());
  const std::vector<SentFrame> frames = transport_->sent();
  ASSERT_EQ(frames.size() - sent, 15u) << "the bf16 push was not sent in parts";
  size_t value_bytes = 0;
  for (size_t i = sent; i < frames.size(); ++i) {
    StatusOr<proto::Header> h = ParseHeader(frames[i].header);
    ASSERT_TRUE(h.ok()) << h.status().ToString();
    EXPECT_EQ(h->codec(), proto::CODEC_BF16) << "part " << i - sent;
    EXPECT_EQ(h->push_parts(), 15u) << "part " << i - sent;
    EXPECT_EQ(h->codec_count() * 2, frames[i].values_size) << "part " << i - sent;
    value_bytes += frames[i].values_size;
  }
  EXPECT_EQ(value_bytes, g.size() * 2) << "every value once, as bf16";
  EXPECT_EQ(PushesApplied() - applied, 1u) << "the parts counted as pushes of their own";
  const std::vector<float> after = PullSparse(keys);
  for (size_t i = 0; i < after.size(); ++i) {
    const float sent_g = codec::Bf16BitsToFloat(codec::row_cast_internal::Bf16Reference(g[i]));
    ASSERT_FLOAT_EQ(after[i], before[i] - kLr * sent_g) << i;
  }
}

TEST_F(PushPartsTest, DensePushInPartsIsOnePushWithTheWholePushesWeights) {
  Connect(2048);  // chunks of 1 KiB: parts of two chunks, 8 parts
  const std::vector<float> before = PullDense(), g = Grads(kDenseFloats);
  const uint64_t applied = PushesApplied();
  const size_t sent = transport_->sent().size();
  ASSERT_TRUE(client_->Wait(client_->PushDense(1, g.data())).ok());
  EXPECT_EQ(transport_->sent().size() - sent, 8u);
  EXPECT_EQ(PushesApplied() - applied, 1u);
  const std::vector<float> after = PullDense();
  for (size_t i = 0; i < after.size(); ++i) ASSERT_FLOAT_EQ(after[i], before[i] - kLr * g[i]) << i;
}

TEST_F(PushPartsTest, APushWithANonFiniteValueGoesWholeAndNothingOfItIsApplied) {
  Connect(1024);
  const std::vector<uint64_t> keys = Keys(1000);
  const std::vector<float> before = PullSparse(keys);
  std::vector<float> g = Grads(keys.size() * kDim);
  g[g.size() - 1] = std::nanf("");  // in what would have been the last part
  const size_t sent = transport_->sent().size();
  Status s = client_->Wait(client_->Push(0, keys.data(), keys.size(), g.data()));
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s.ToString();
  EXPECT_NE(s.ToString().find("non-finite"), std::string::npos) << s.ToString();
  EXPECT_EQ(transport_->sent().size() - sent, 1u) << "a non-finite push must go whole";
  EXPECT_EQ(PullSparse(keys), before) << "part of a rejected push was applied";
  // The dense call the same way.
  const std::vector<float> dense_before = PullDense();
  std::vector<float> dg = Grads(kDenseFloats);
  dg[100] = std::numeric_limits<float>::infinity();
  EXPECT_EQ(client_->Wait(client_->PushDense(1, dg.data())).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(PullDense(), dense_before);
}

// Three servers: each server's share of a sparse push is rows picked from the call (the rows
// layout) and of a dense push chunks scattered over the table (the ranges layout); both split.
TEST(PushPartsThreeServersTest, PartitionedSharesSplitAndLandExactly) {
  InprocCluster cluster(3, Tables());
  ASSERT_TRUE(cluster.ActivateAll().ok());
  auto t = std::make_unique<ObservedTransport>(cluster.NewTransport());
  ObservedTransport* transport = t.get();
  ClientOptions o;
  o.push_part_bytes = 1024;
  Client client(o, std::move(t), cluster.map());
  ASSERT_TRUE(client.Start().ok());
  const std::vector<uint64_t> keys = Keys(3000);  // ~1000 rows (16000 bytes) a server
  std::vector<float> before(keys.size() * kDim), after(keys.size() * kDim);
  ASSERT_TRUE(client.Wait(client.Pull(0, keys.data(), keys.size(), before.data())).ok());
  std::vector<float> dense_before(kDenseFloats), dense_after(kDenseFloats);
  ASSERT_TRUE(client.Wait(client.PullDense(1, dense_before.data())).ok());
  const std::vector<float> g = Grads(keys.size() * kDim), dg = Grads(kDenseFloats);
  const size_t sent = transport->sent().size();
  ASSERT_TRUE(client.Wait(client.Push(0, keys.data(), keys.size(), g.data())).ok());
  ASSERT_TRUE(client.Wait(client.PushDense(1, dg.data())).ok());
  EXPECT_GT(transport->sent().size() - sent, 3u * 2 + 3) << "the shares were not split";
  ASSERT_TRUE(client.Wait(client.Pull(0, keys.data(), keys.size(), after.data())).ok());
  ASSERT_TRUE(client.Wait(client.PullDense(1, dense_after.data())).ok());
  for (size_t i = 0; i < after.size(); ++i) ASSERT_FLOAT_EQ(after[i], before[i] - kLr * g[i]) << i;
  for (size_t i = 0; i < kDenseFloats; ++i) {
    ASSERT_FLOAT_EQ(dense_after[i], dense_before[i] - kLr * dg[i]) << i;
  }
  for (int s = 0; s < 3; ++s) {
    EXPECT_EQ(cluster.server(s).stats().pushes_applied, 2u) << "server " << s;  // one sparse, one dense
  }
}

TEST_F(PushPartsTest, ServerRefusesMalformedPartFields) {
  ASSERT_TRUE(cluster_.ActivateAll().ok());
  testing::RawPeer peer(cluster_.NewTransport(), "inproc://server-0");
  struct Case {
    proto::Op op;
    uint32_t part, parts;
  };
  for (const Case& c : {Case{proto::OP_PUSH_SPARSE, 3, 2}, Case{proto::OP_PUSH_SPARSE, 0, 2},
                        Case{proto::OP_PUSH_SPARSE, 1, 65}, Case{proto::OP_PULL_SPARSE, 1, 2}}) {
    proto::Header h;
    h.set_op(c.op);
    h.set_table(0);
    h.set_request_id(9);
    h.set_epoch(1);
    h.set_num_keys(1);
    const bool push = c.op == proto::OP_PUSH_SPARSE;
    h.set_value_bytes(push ? kDim * sizeof(float) : 0);
    h.set_push_part(c.part);
    h.set_push_parts(c.parts);
    std::vector<float> g(kDim, 0.5f);
    peer.Send(h, testing::VecBuf<uint64_t>({42}), push ? testing::VecBuf(g) : Buffer());
    proto::Header reply;
    ASSERT_TRUE(peer.Next(&reply, nullptr));
    EXPECT_EQ(reply.op(), proto::OP_ERROR) << c.part << " of " << c.parts;
    EXPECT_NE(reply.error().find("push part"), std::string::npos) << reply.error();
  }
  EXPECT_EQ(cluster_.server(0).stats().pushes_applied, 0u);
}

}  // namespace
}  // namespace osprey::worker
