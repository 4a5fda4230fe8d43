// Client::PushCastRows: rows the caller cast to 16 bits (a GPU worker casts its row gradients on
// the device) land exactly as the same fp32 rows pushed through the table's row-cast encoder, over
// three in-process servers, with the keys grouped by owner (counts) or routed by the client; a
// wrong value type or counts that do not add up fail the ticket and send nothing.
// Client::PullCastRows: the other way, the servers' 16-bit rows left unwidened.
#include <gtest/gtest.h>

#include <vector>

#include "common/codec/row_cast.h"
#include "common/placement.h"
#include "tests/testing/cluster_fixture.h"
#include "worker/client/client.h"
#include "worker/client/push_encoder.h"

namespace osprey::worker {
namespace {

using testing::InprocCluster;

constexpr size_t kDim = 8;
constexpr int kServers = 3;

std::vector<config::TableConfig> Tables() {
  config::TableConfig sparse;
  sparse.name = "emb";
  sparse.type = config::TableType::kSparse;
  sparse.dim = kDim;
  sparse.optimizer.lr = 0.5f;
  return {sparse};
}

// A cluster and a client of it.
struct Side {
  Side() : cluster(kServers, Tables()) {
    EXPECT_TRUE(cluster.ActivateAll().ok());
    client = std::make_unique<Client>(ClientOptions(), cluster.NewTransport(), cluster.map());
    EXPECT_TRUE(client->Start().ok());
  }
  std::vector<float> Pull(const std::vector<uint64_t>& keys) {
    std::vector<float> out(keys.size() * kDim);
    EXPECT_TRUE(client->Wait(client->Pull(0, keys.data(), keys.size(), out.data())).ok());
    return out;
  }
  InprocCluster cluster;
  std::unique_ptr<Client> client;
};

std::vector<uint64_t> Keys(size_t n) {
  std::vector<uint64_t> keys(n);
  for (size_t i = 0; i < n; ++i) keys[i] = 0x9E3779B97F4A7C15ull * (i + 1);
  return keys;
}

std::vector<float> Grads(size_t n) {
  std::vector<float> g(n);
  for (size_t i = 0; i < n; ++i) g[i] = 0.0137f * static_cast<float>(static_cast<int>(i % 1009) - 500);
  return g;
}

// The keys (and their rows) reordered by owner, with one count per server.
void GroupByOwner(std::vector<uint64_t>* keys, std::vector<float>* rows, std::vector<int32_t>* counts) {
  std::vector<uint64_t> k;
  std::vector<float> r;
  counts->assign(kServers, 0);
  for (int s = 0; s < kServers; ++s) {
    for (size_t i = 0; i < keys->size(); ++i) {
      if (ServerForKey(0, (*keys)[i], kServers) != s) continue;
      k.push_back((*keys)[i]);
      r.insert(r.end(), rows->begin() + i * kDim, rows->begin() + (i + 1) * kDim);
      ++(*counts)[s];
    }
  }
  *keys = std::move(k);
  *rows = std::move(r);
}

std::vector<uint16_t> Cast(const std::vector<float>& rows, codec::ValueType type) {
  std::vector<uint16_t> out(rows.size());
  codec::CastRowValues(rows.data(), rows.size(), type, reinterpret_cast<uint8_t*>(out.data()));
  return out;
}

TEST(CastRowsPushTest, CastRowsLandAsTheEncodersCastOfTheSameRows) {
  for (codec::ValueType type : {codec::ValueType::kBf16, codec::ValueType::kFp16}) {
    for (bool grouped : {true, false}) {
      std::vector<uint64_t> keys = Keys(2000);
      std::vector<float> g = Grads(keys.size() * kDim);
      std::vector<int32_t> counts;
      if (grouped) GroupByOwner(&keys, &g, &counts);
      Side encoded, cast;
      const std::vector<float> before = encoded.Pull(keys);
      ASSERT_EQ(cast.Pull(keys), before);
      auto encoder = MakeRowCastEncoder(type == codec::ValueType::kBf16 ? proto::CODEC_BF16 : proto::CODEC_FP16);
      ASSERT_TRUE(encoder.ok());
      ASSERT_TRUE(encoded.client->SetEncoder(0, std::move(*encoder)).ok());
      ASSERT_TRUE(encoded.client->Wait(encoded.client->Push(0, keys.data(), keys.size(), g.data(), 3, 1)).ok());
      const std::vector<uint16_t> rows = Cast(g, type);
      ASSERT_TRUE(cast.client->Wait(cast.client->PushCastRows(0, keys.data(), keys.size(), rows.data(), type,
                                                              grouped ? counts.data() : nullptr, 3, 1))
                      .ok());
      const std::vector<float> after = cast.Pull(keys);
      EXPECT_EQ(after, encoded.Pull(keys)) << codec::ValueTypeName(type) << (grouped ? " grouped" : " routed");
      EXPECT_NE(after, before) << "nothing was applied";
      EXPECT_EQ(cast.cluster.server(0).stats().pushes_applied + cast.cluster.server(1).stats().pushes_applied +
                    cast.cluster.server(2).stats().pushes_applied,
                3u);
    }
  }
}

// PullCastRows: the rows as the servers cast them (the host cast of the fp32 rows), left in 16
// bits for the caller to widen, grouped or routed; the table's own pull codec plays no part.
TEST(CastRowsPushTest, PullCastRowsDeliversTheServersCastUnwidened) {
  for (codec::ValueType type : {codec::ValueType::kBf16, codec::ValueType::kFp16}) {
    for (bool grouped : {true, false}) {
      std::vector<uint64_t> keys = Keys(1500);
      std::vector<float> unused = Grads(keys.size() * kDim);
      std::vector<int32_t> counts;
      if (grouped) GroupByOwner(&keys, &unused, &counts);
      Side side;
      const std::vector<float> fp32 = side.Pull(keys);
      std::vector<uint16_t> got(fp32.size(), 0xFFFF);
      ASSERT_TRUE(side.client->Wait(side.client->PullCastRows(0, keys.data(), keys.size(), got.data(), type,
                                                              grouped ? counts.data() : nullptr))
                      .ok());
      EXPECT_EQ(got, Cast(fp32, type)) << codec::ValueTypeName(type) << (grouped ? " grouped" : " routed");
    }
  }
  Side side;
  const std::vector<uint64_t> keys = Keys(4);
  std::vector<uint16_t> out(keys.size() * kDim);
  const Status st = side.client->Wait(
      side.client->PullCastRows(0, keys.data(), keys.size(), out.data(), codec::ValueType::kFp32, nullptr));
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument) << st.ToString();
  EXPECT_NE(st.message().find("fp16 or bf16, not fp32"), std::string::npos) << st.ToString();
}

TEST(CastRowsPushTest, BadTypeOrCountsFailTheTicketAndSendNothing) {
  Side side;
  const std::vector<uint64_t> keys = Keys(30);
  const std::vector<float> before = side.Pull(keys);
  const std::vector<uint16_t> rows(keys.size() * kDim, 0x3F80);  // bf16 1.0
  Status st = side.client->Wait(
      side.client->PushCastRows(0, keys.data(), keys.size(), rows.data(), codec::ValueType::kFp32, nullptr));
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument) << st.ToString();
  EXPECT_NE(st.message().find("fp16 or bf16, not fp32"), std::string::npos) << st.ToString();
  const std::vector<int32_t> counts = {10, 10, 9};  // 29 of 30
  st = side.client->Wait(
      side.client->PushCastRows(0, keys.data(), keys.size(), rows.data(), codec::ValueType::kBf16, counts.data()));
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument) << st.ToString();
  // No rows for the keys, either way.
  st = side.client->Wait(
      side.client->PushCastRows(0, keys.data(), keys.size(), nullptr, codec::ValueType::kBf16, nullptr));
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument) << st.ToString();
  EXPECT_NE(st.message().find("null rows array"), std::string::npos) << st.ToString();
  st = side.client->Wait(
      side.client->PullCastRows(0, keys.data(), keys.size(), nullptr, codec::ValueType::kBf16, nullptr));
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument) << st.ToString();
  EXPECT_NE(st.message().find("null rows array"), std::string::npos) << st.ToString();
  EXPECT_EQ(side.Pull(keys), before);
}

}  // namespace
}  // namespace osprey::worker
