// Pulls in parts (worker/client/push_parts.h, "Pulls in parts"): a sparse pull whose reply from one
// server would be large is asked for as several pulls of consecutive runs of that server's keys,
// and delivers exactly the rows the whole pull does -- fp32, 16-bit widened, 16-bit kept
// (PullCastRows), keys routed by the client or grouped by owner -- over three in-process servers;
// a dense pull likewise, in parts of whole chunks. A part that fails fails the whole pull, which
// then writes nothing.
#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>
#include <vector>

#include "common/placement.h"
#include "proto/wire.h"
#include "tests/testing/cluster_fixture.h"
#include "tests/testing/observed_transport.h"
#include "worker/client/client.h"
#include "worker/client/push_parts.h"

namespace osprey::worker {
namespace {

using testing::InprocCluster;
using testing::ObservedTransport;
using testing::SentFrame;

constexpr size_t kDim = 4;  // fp32 rows of 16 bytes, 16-bit rows of 8
constexpr int kServers = 3;
constexpr size_t kPartBytes = 1024;
constexpr size_t kDenseFloats = 8192;  // 32 chunks

std::vector<config::TableConfig> Tables() {
  config::TableConfig sparse;
  sparse.name = "emb";
  sparse.type = config::TableType::kSparse;
  sparse.dim = kDim;
  sparse.optimizer.lr = 0.5f;
  config::TableConfig dense;
  dense.name = "mlp";
  dense.type = config::TableType::kDense;
  dense.size = kDenseFloats;
  dense.chunk_floats = 256;  // chunks of 1 KiB, spread over the servers
  dense.optimizer.lr = 0.5f;
  return {sparse, dense};
}

std::vector<uint64_t> Keys(size_t n) {
  std::vector<uint64_t> keys(n);
  for (size_t i = 0; i < n; ++i) keys[i] = 0x9E3779B97F4A7C15ull * (i + 1);
  return keys;
}

// One cluster, a client that pulls whole and an observed one that pulls in parts of kPartBytes.
class PullPartsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(cluster_.ActivateAll().ok());
    whole_ = std::make_unique<Client>(ClientOptions(), cluster_.NewTransport(), cluster_.map());
    ASSERT_TRUE(whole_->Start().ok());
    auto t = std::make_unique<ObservedTransport>(cluster_.NewTransport());
    transport_ = t.get();
    ClientOptions o;
    o.pull_part_bytes = kPartBytes;
    o.timeout_ms = 2000;
    parted_ = std::make_unique<Client>(o, std::move(t), cluster_.map());
    ASSERT_TRUE(parted_->Start().ok());
    // Rows the pushes moved away from their initial values.
    keys_ = Keys(3000);
    std::vector<float> g(keys_.size() * kDim);
    for (size_t i = 0; i < g.size(); ++i) g[i] = 0.0137f * static_cast<float>(static_cast<int>(i % 1009) - 500);
    ASSERT_TRUE(whole_->Wait(whole_->Push(0, keys_.data(), keys_.size(), g.data(), 0, 1)).ok());
    std::vector<float> dg(kDenseFloats);
    for (size_t i = 0; i < dg.size(); ++i) dg[i] = 0.001f * static_cast<float>(i % 997);
    ASSERT_TRUE(whole_->Wait(whole_->PushDense(1, dg.data())).ok());
    std::reverse(keys_.begin(), keys_.end());  // the pulls' order is not the push's
  }

  // The `op` messages the parted client sent since `from`: their key counts.
  std::vector<size_t> PullMessages(size_t from, proto::Op op = proto::OP_PULL_SPARSE) {
    std::vector<size_t> counts;
    const std::vector<SentFrame> sent = transport_->sent();
    for (size_t i = from; i < sent.size(); ++i) {
      StatusOr<proto::Header> h = ParseHeader(sent[i].header);
      EXPECT_TRUE(h.ok()) << h.status().ToString();
      if (h.ok() && h->op() == op) counts.push_back(sent[i].keys_size / sizeof(uint64_t));
    }
    return counts;
  }

  // Checks the parted client's last pull went as parts of >= kPartBytes reply bytes (rows of
  // `row_bytes`), every key once.
  void ExpectParts(size_t from, size_t row_bytes) {
    const std::vector<size_t> counts = PullMessages(from);
    EXPECT_GT(counts.size(), size_t{2 * kServers}) << "the pull did not go in parts";
    for (size_t c : counts) EXPECT_GE(c * row_bytes, kPartBytes) << "a part smaller than part_bytes";
    EXPECT_EQ(std::accumulate(counts.begin(), counts.end(), size_t{0}), keys_.size());
  }

  InprocCluster cluster_{kServers, Tables()};
  std::unique_ptr<Client> whole_, parted_;
  ObservedTransport* transport_ = nullptr;
  std::vector<uint64_t> keys_;
};

TEST(RowPartStartsTest, CutsReplyRowsOfAnyWidthLikeUniformPartStarts) {
  // 1000 rows of 8 bytes (bf16, dim 4), parts of >= 1024 bytes: 128 rows each, the remainder
  // (104 rows) joining the last of 7 parts.
  const std::vector<size_t> s = RowPartStarts(1000, 8, 1024, kMaxClientPushParts);
  ASSERT_EQ(s.size(), 7u);
  for (size_t p = 0; p < s.size(); ++p) EXPECT_EQ(s[p], p * 128);
  EXPECT_EQ(RowPartStarts(1000, 16, 1024, 16), UniformPartStarts(1000, 4, 1024, 16));
  EXPECT_EQ(RowPartStarts(1000, 8, 0, 16), std::vector<size_t>{0});     // off
  EXPECT_EQ(RowPartStarts(255, 8, 1024, 16), std::vector<size_t>{0});   // under two parts
  EXPECT_EQ(RowPartStarts(100000, 8, 1024, 16).size(), 16u);            // capped: larger parts
}

TEST_F(PullPartsTest, Fp32PullInPartsDeliversTheWholePullsRows) {
  std::vector<float> want(keys_.size() * kDim), got(keys_.size() * kDim, -1.0f);
  ASSERT_TRUE(whole_->Wait(whole_->Pull(0, keys_.data(), keys_.size(), want.data())).ok());
  const size_t from = transport_->sent().size();
  ASSERT_TRUE(parted_->Wait(parted_->Pull(0, keys_.data(), keys_.size(), got.data())).ok());
  EXPECT_EQ(got, want);
  ExpectParts(from, kDim * sizeof(float));
}

TEST_F(PullPartsTest, GroupedPullInPartsDeliversTheWholePullsRows) {
  // Keys grouped by owner (PullByServer): each server's keys are one contiguous run of the call.
  std::vector<uint64_t> grouped;
  std::vector<int32_t> counts(kServers, 0);
  for (int s = 0; s < kServers; ++s) {
    for (uint64_t k : keys_) {
      if (ServerForKey(0, k, kServers) != s) continue;
      grouped.push_back(k);
      ++counts[s];
    }
  }
  std::vector<float> want(grouped.size() * kDim), got(grouped.size() * kDim, -1.0f);
  ASSERT_TRUE(whole_->Wait(whole_->Pull(0, grouped.data(), grouped.size(), want.data())).ok());
  const size_t from = transport_->sent().size();
  ASSERT_TRUE(
      parted_->Wait(parted_->PullByServer(0, grouped.data(), grouped.size(), got.data(), counts.data())).ok());
  EXPECT_EQ(got, want);
  ExpectParts(from, kDim * sizeof(float));
}

TEST_F(PullPartsTest, SixteenBitPullsInPartsDeliverTheWholePullsRows) {
  for (proto::Codec c : {proto::CODEC_BF16, proto::CODEC_FP16}) {
    ASSERT_TRUE(whole_->SetSparsePullCodec(0, c).ok());
    ASSERT_TRUE(parted_->SetSparsePullCodec(0, c).ok());
    std::vector<float> want(keys_.size() * kDim), got(keys_.size() * kDim, -1.0f);
    ASSERT_TRUE(whole_->Wait(whole_->Pull(0, keys_.data(), keys_.size(), want.data())).ok());
    const size_t from = transport_->sent().size();
    ASSERT_TRUE(parted_->Wait(parted_->Pull(0, keys_.data(), keys_.size(), got.data())).ok());
    EXPECT_EQ(got, want) << "codec " << c;
    ExpectParts(from, kDim * 2);  // parts are cut by the reply's 16-bit rows
  }
  // PullCastRows: the 16-bit rows kept as they came.
  for (codec::ValueType type : {codec::ValueType::kBf16, codec::ValueType::kFp16}) {
    std::vector<uint16_t> want(keys_.size() * kDim), got(keys_.size() * kDim, 0xFFFF);
    ASSERT_TRUE(whole_->Wait(whole_->PullCastRows(0, keys_.data(), keys_.size(), want.data(), type, nullptr)).ok());
    const size_t from = transport_->sent().size();
    ASSERT_TRUE(parted_->Wait(parted_->PullCastRows(0, keys_.data(), keys_.size(), got.data(), type, nullptr)).ok());
    EXPECT_EQ(got, want) << codec::ValueTypeName(type);
    ExpectParts(from, kDim * 2);
  }
}

TEST_F(PullPartsTest, DensePullInPartsOfWholeChunksDeliversTheWholePullsValues) {
  std::vector<float> want(kDenseFloats), got(kDenseFloats, -1.0f);
  ASSERT_TRUE(whole_->Wait(whole_->PullDense(1, want.data())).ok());
  const size_t from = transport_->sent().size();
  ASSERT_TRUE(parted_->Wait(parted_->PullDense(1, got.data())).ok());
  EXPECT_EQ(got, want);
  const std::vector<size_t> chunks = PullMessages(from, proto::OP_PULL_DENSE);
  EXPECT_GT(chunks.size(), size_t{kServers}) << "the dense pull did not go in parts";
  EXPECT_EQ(std::accumulate(chunks.begin(), chunks.end(), size_t{0}), kDenseFloats / 256) << "every chunk once";
  // A pull into a Buffer of a table one server holds whole stays one message (no copy); here the
  // chunks are spread, so it lands in a Buffer of the table's size like the array pull.
  Buffer buf;
  ASSERT_TRUE(parted_->Wait(parted_->PullDense(1, &buf)).ok());
  ASSERT_EQ(buf.size(), kDenseFloats * sizeof(float));
  EXPECT_TRUE(std::equal(want.begin(), want.end(), buf.as<float>()));
}

TEST_F(PullPartsTest, APartThatFailsFailsThePullAndNothingIsWritten) {
  // Server 2 stops answering: its parts time out while the other servers' parts come back. The
  // pull fails, and none of the rows that did come back reach the caller's array.
  cluster_.server(2).Stop();
  std::vector<float> got(keys_.size() * kDim, -1.0f);
  Status s = parted_->Wait(parted_->Pull(0, keys_.data(), keys_.size(), got.data()));
  EXPECT_FALSE(s.ok());
  EXPECT_TRUE(std::all_of(got.begin(), got.end(), [](float v) { return v == -1.0f; }))
      << "a failed pull wrote rows";
  std::vector<float> dense(kDenseFloats, -1.0f);
  s = parted_->Wait(parted_->PullDense(1, dense.data()));
  EXPECT_FALSE(s.ok());
  EXPECT_TRUE(std::all_of(dense.begin(), dense.end(), [](float v) { return v == -1.0f; }))
      << "a failed dense pull wrote values";
}

}  // namespace
}  // namespace osprey::worker
