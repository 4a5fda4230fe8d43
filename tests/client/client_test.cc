#include "worker/client/client.h"

#include <gtest/gtest.h>

#include <limits>
#include <numeric>
#include <set>
#include <thread>

#include "common/codec/codec_math.h"
#include "common/placement.h"
#include "tests/testing/cluster_fixture.h"
#include "tests/testing/observed_transport.h"
#include "tests/testing/wait.h"

namespace osprey::worker {
namespace {

using testing::InprocCluster;
using testing::ObservedTransport;

// Sends sparse `table`'s pushed rows as `codec` (the row-cast encoder), as configs' codec does.
Status SetRowCodec(Client* client, uint32_t table, proto::Codec codec) {
  StatusOr<std::unique_ptr<PushEncoder>> encoder = MakeRowCastEncoder(codec);
  if (!encoder.ok()) return encoder.status();
  return client->SetEncoder(table, std::move(*encoder));
}

class ClientTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(cluster_.ActivateAll().ok());
    ClientOptions o;
    o.timeout_ms = 5000;
    o.max_inflight = 4;
    client_ = std::make_unique<Client>(o, cluster_.NewTransport(), cluster_.map());
    ASSERT_TRUE(client_->Start().ok());
  }
  InprocCluster cluster_{3};
  std::unique_ptr<Client> client_;
};

// Keys and gradient rows of table 0 grouped by their server of 3, stable within a server: what
// Client::PushByServer takes.
struct GroupedPush {
  std::vector<uint64_t> keys;
  std::vector<float> grads;
  std::vector<int32_t> counts = std::vector<int32_t>(3, 0);
};

GroupedPush GroupByServer(const std::vector<uint64_t>& keys, const std::vector<float>& g, int dim) {
  GroupedPush out;
  for (int s = 0; s < 3; ++s) {
    for (size_t i = 0; i < keys.size(); ++i) {
      if (ServerForKey(0, keys[i], 3) != s) continue;
      out.keys.push_back(keys[i]);
      out.grads.insert(out.grads.end(), g.begin() + i * dim, g.begin() + (i + 1) * dim);
      ++out.counts[s];
    }
  }
  return out;
}

TEST_F(ClientTest, SparsePullPushAcrossServersWithDuplicates) {
  std::vector<uint64_t> keys(200);
  std::iota(keys.begin(), keys.end(), 1000);
  keys.push_back(1000);  // duplicate
  std::vector<float> rows(keys.size() * 4);
  ASSERT_TRUE(client_->Wait(client_->Pull(0, keys.data(), keys.size(), rows.data())).ok());
  // Keys really landed on different servers, and a duplicate gets the same row.
  std::set<int> servers;
  for (uint64_t k : keys) servers.insert(ServerForKey(0, k, 3));
  EXPECT_EQ(servers.size(), 3u);
  for (int i = 0; i < 4; ++i) EXPECT_EQ(rows[i], rows[200 * 4 + i]);
  std::vector<float> grads(200 * 4, 1.0f);
  ASSERT_TRUE(client_->Wait(client_->Push(0, keys.data(), 200, grads.data())).ok());
  std::vector<float> after(rows.size());
  ASSERT_TRUE(client_->Wait(client_->Pull(0, keys.data(), keys.size(), after.data())).ok());
  for (size_t i = 0; i < 200 * 4; ++i) ASSERT_FLOAT_EQ(after[i], rows[i] - 0.5f);
  EXPECT_EQ(client_->version(0), 1u);  // each server applied one push
  EXPECT_GT(client_->stats().bytes_pulled, 0u);
}

TEST_F(ClientTest, DenseInitPushPullAndZeroCopyBuffer) {
  std::vector<float> init(10);
  std::iota(init.begin(), init.end(), 0.0f);
  ASSERT_TRUE(client_->Wait(client_->InitDense(1, init.data())).ok());
  std::vector<float> g(10, 2.0f);
  ASSERT_TRUE(client_->Wait(client_->PushDense(1, g.data())).ok());
  Buffer gb = Buffer::Copy(g.data(), g.size() * sizeof(float));
  ASSERT_TRUE(client_->Wait(client_->PushDense(1, gb)).ok());
  std::vector<float> out(10, -1.0f);
  ASSERT_TRUE(client_->Wait(client_->PullDense(1, out.data())).ok());
  for (int i = 0; i < 10; ++i) EXPECT_FLOAT_EQ(out[i], i - 2.0f);
}

// A GPU host group splits the servers among its workers: a masked push sends only the chunks of
// the servers in the mask; a mask of the wrong length is refused.
TEST_F(ClientTest, DensePushToASubsetOfServers) {
  const proto::TableSpec& spec = cluster_.map().tables(1);
  std::vector<float> init(spec.size(), 0.0f);
  ASSERT_TRUE(client_->Wait(client_->InitDense(1, init.data())).ok());
  std::vector<float> g(spec.size(), 2.0f);
  std::vector<bool> mask = {false, true, false};
  ASSERT_TRUE(client_->Wait(client_->PushDense(1, g.data(), 0, 0, mask)).ok());
  std::vector<float> out(spec.size(), -1.0f);
  ASSERT_TRUE(client_->Wait(client_->PullDense(1, out.data())).ok());
  std::set<int> owners;
  for (uint64_t i = 0; i < spec.size(); ++i) {
    int owner = ServerForChunk(1, i / spec.chunk_floats(), 3);
    owners.insert(owner);
    EXPECT_FLOAT_EQ(out[i], owner == 1 ? -1.0f : 0.0f) << "float " << i << " on server " << owner;
  }
  EXPECT_GT(owners.size(), 1u) << "the fixture's dense table should span servers";
  std::vector<bool> short_mask = {true};
  Status s = client_->Wait(client_->PushDense(1, g.data(), 0, 0, short_mask));
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("server mask has 1 entries for 3 servers"), std::string::npos) << s.ToString();
}

// A host group's slice pull: only the masked servers' chunks are written; the others stay as
// they were (they come from the other local ranks through NCCL).
TEST_F(ClientTest, DensePullOfASubsetOfServers) {
  const proto::TableSpec& spec = cluster_.map().tables(1);
  std::vector<float> init(spec.size());
  std::iota(init.begin(), init.end(), 1.0f);
  ASSERT_TRUE(client_->Wait(client_->InitDense(1, init.data())).ok());
  std::vector<bool> mask = {true, false, true};
  std::vector<float> out(spec.size(), -7.0f);
  ASSERT_TRUE(client_->Wait(client_->PullDense(1, out.data(), 0, mask)).ok());
  for (uint64_t i = 0; i < spec.size(); ++i) {
    int owner = ServerForChunk(1, i / spec.chunk_floats(), 3);
    EXPECT_FLOAT_EQ(out[i], owner == 1 ? -7.0f : init[i]) << "float " << i << " on server " << owner;
  }
  Status s = client_->Wait(client_->PullDense(1, out.data(), 0, std::vector<bool>{true, true}));
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("dense pull to table"), std::string::npos) << s.ToString();
}

// Keys grouped by owner go out as one slice per server and land exactly like a plain push;
// counts that do not add up fail at once, and a key grouped under the wrong server is refused.
TEST_F(ClientTest, PushByServerMatchesPush) {
  const int dim = cluster_.map().tables(0).dim();
  std::vector<uint64_t> keys(60);
  std::iota(keys.begin(), keys.end(), 1000);
  std::vector<float> g(keys.size() * dim);
  for (size_t i = 0; i < g.size(); ++i) g[i] = 0.01f * static_cast<float>(i % 97);
  std::vector<float> before(g.size()), after(g.size()), via_push(g.size());
  ASSERT_TRUE(client_->Wait(client_->Pull(0, keys.data(), keys.size(), before.data())).ok());
  const GroupedPush grouped = GroupByServer(keys, g, dim);
  const std::vector<int32_t>& counts = grouped.counts;
  EXPECT_GT(*std::min_element(counts.begin(), counts.end()), 0);
  ASSERT_TRUE(client_->Wait(client_->PushByServer(0, grouped.keys.data(), grouped.keys.size(), grouped.grads.data(), counts.data()))
                  .ok());
  ASSERT_TRUE(client_->Wait(client_->Pull(0, keys.data(), keys.size(), after.data())).ok());
  ASSERT_TRUE(client_->Wait(client_->Push(0, keys.data(), keys.size(), g.data())).ok());
  ASSERT_TRUE(client_->Wait(client_->Pull(0, keys.data(), keys.size(), via_push.data())).ok());
  for (size_t i = 0; i < g.size(); ++i) {
    // The fixture's sparse table is plain SGD: each push moves a row by the same -lr * g.
    EXPECT_FLOAT_EQ(via_push[i] - after[i], after[i] - before[i]) << "float " << i;
    EXPECT_NE(after[i] == before[i], g[i] != 0.0f) << "float " << i;
  }
  std::vector<int32_t> short_counts = {counts[0], counts[1], counts[2] - 1};
  Status s = client_->Wait(client_->PushByServer(0, grouped.keys.data(), grouped.keys.size(), grouped.grads.data(), short_counts.data()));
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("sum to"), std::string::npos) << s.ToString();
  std::vector<int32_t> shifted = {counts[0] + 1, counts[1] - 1, counts[2]};  // server 1's first key sent to 0
  s = client_->Wait(client_->PushByServer(0, grouped.keys.data(), grouped.keys.size(), grouped.grads.data(), shifted.data()));
  EXPECT_EQ(s.code(), StatusCode::kFailedPrecondition) << s.ToString();
  EXPECT_NE(s.message().find("belongs to server 1"), std::string::npos) << s.ToString();
}

// Keys grouped by owner are pulled as one slice per server, each reply landing as one run of the
// output: the same rows as a plain pull of the grouped keys; bad counts fail at once, a key
// grouped under the wrong server is refused.
TEST_F(ClientTest, PullByServerMatchesPull) {
  const int dim = cluster_.map().tables(0).dim();
  std::vector<uint64_t> keys(60);
  std::iota(keys.begin(), keys.end(), 5000);
  std::vector<float> g(keys.size() * dim);
  for (size_t i = 0; i < g.size(); ++i) g[i] = 0.01f * static_cast<float>(i % 89 + 1);
  ASSERT_TRUE(client_->Wait(client_->Push(0, keys.data(), keys.size(), g.data())).ok());  // rows differ
  const GroupedPush grouped = GroupByServer(keys, g, dim);
  const std::vector<int32_t>& counts = grouped.counts;
  EXPECT_GT(*std::min_element(counts.begin(), counts.end()), 0);
  std::vector<float> plain(g.size()), by_server(g.size(), -1.0f);
  ASSERT_TRUE(client_->Wait(client_->Pull(0, grouped.keys.data(), grouped.keys.size(), plain.data())).ok());
  ASSERT_TRUE(
      client_->Wait(client_->PullByServer(0, grouped.keys.data(), grouped.keys.size(), by_server.data(), counts.data()))
          .ok());
  EXPECT_EQ(by_server, plain);
  std::vector<int32_t> short_counts = {counts[0], counts[1], counts[2] - 1};
  Status s = client_->Wait(
      client_->PullByServer(0, grouped.keys.data(), grouped.keys.size(), by_server.data(), short_counts.data()));
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("pull by server"), std::string::npos) << s.ToString();
  std::vector<int32_t> shifted = {counts[0] + 1, counts[1] - 1, counts[2]};  // server 1's first key asked of 0
  s = client_->Wait(client_->PullByServer(0, grouped.keys.data(), grouped.keys.size(), by_server.data(), shifted.data()));
  EXPECT_EQ(s.code(), StatusCode::kFailedPrecondition) << s.ToString();
  EXPECT_NE(s.message().find("belongs to server 1"), std::string::npos) << s.ToString();
}

// Sparse rows sent as fp16 / bf16: every server decodes them, and each row moves by -lr times the
// gradient rounded to that format (not the fp32 gradient); a finite gradient beyond fp16's range
// arrives as 65504. Push (partitioned here), PushByServer and the values frames' size all agree.
TEST_F(ClientTest, SparseRowsAsFp16OrBf16MoveRowsByTheRoundedGradient) {
  const int dim = cluster_.map().tables(0).dim();
  for (proto::Codec row_codec : {proto::CODEC_FP16, proto::CODEC_BF16}) {
    SCOPED_TRACE(row_codec == proto::CODEC_FP16 ? "fp16" : "bf16");
    ASSERT_TRUE(SetRowCodec(client_.get(), 0, row_codec).ok());
    std::vector<uint64_t> keys(90);
    std::iota(keys.begin(), keys.end(), row_codec == proto::CODEC_FP16 ? 5000 : 6000);
    std::vector<float> g(keys.size() * dim);
    for (size_t i = 0; i < g.size(); ++i) g[i] = 0.1f + 1.37e-4f * static_cast<float>(i);
    g[5] = 1e6f;  // beyond fp16's range: saturates to 65504 in fp16, ~1e6 in bf16
    auto rounded = [&](float x) {
      return row_codec == proto::CODEC_FP16
                 ? codec::HalfBitsToFloat(codec::FloatToHalfBits(std::min(x, 65504.0f)))
                 : codec::Bf16BitsToFloat(codec::FloatToBf16Bits(x));
    };
    std::vector<float> before(g.size()), after(g.size()), again(g.size());
    ASSERT_TRUE(client_->Wait(client_->Pull(0, keys.data(), keys.size(), before.data())).ok());
    const uint64_t pushed0 = client_->stats().bytes_pushed;
    ASSERT_TRUE(client_->Wait(client_->Push(0, keys.data(), keys.size(), g.data())).ok());
    EXPECT_EQ(client_->stats().bytes_pushed - pushed0, keys.size() * (sizeof(uint64_t) + dim * sizeof(uint16_t)));
    ASSERT_TRUE(client_->Wait(client_->Pull(0, keys.data(), keys.size(), after.data())).ok());
    int differs_from_fp32 = 0;
    for (size_t i = 0; i < g.size(); ++i) {
      ASSERT_FLOAT_EQ(after[i], before[i] - 0.5f * rounded(g[i])) << "float " << i;
      differs_from_fp32 += rounded(g[i]) != g[i];
    }
    EXPECT_GT(differs_from_fp32, static_cast<int>(g.size()) / 2);  // the test can tell the formats apart
    if (row_codec == proto::CODEC_FP16) {
      EXPECT_FLOAT_EQ(before[5] - after[5], 0.5f * 65504.0f);
    }
    // The same gradients grouped by server move every row by the same step again.
    const GroupedPush grouped = GroupByServer(keys, g, dim);
    ASSERT_TRUE(
        client_->Wait(client_->PushByServer(0, grouped.keys.data(), grouped.keys.size(), grouped.grads.data(), grouped.counts.data())).ok());
    ASSERT_TRUE(client_->Wait(client_->Pull(0, keys.data(), keys.size(), again.data())).ok());
    for (size_t i = 0; i < g.size(); ++i) ASSERT_FLOAT_EQ(again[i], after[i] - 0.5f * rounded(g[i])) << "float " << i;
  }
  for (int s = 0; s < 3; ++s) EXPECT_GE(cluster_.server(s).decode_stats().frames.load(), 4u);
  ASSERT_TRUE(SetRowCodec(client_.get(), 0, proto::CODEC_NONE).ok());
  EXPECT_EQ(SetRowCodec(client_.get(), 0, proto::CODEC_TOPK).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(SetRowCodec(client_.get(), 1, proto::CODEC_FP16).code(), StatusCode::kInvalidArgument);  // dense
}

// Rows pulled as fp16 / bf16 are the servers' fp32 rows rounded to that format, in the caller's
// fp32 array, at half the pulled bytes; through the partitioned path (3 servers) and the single
// server's bulk path.
TEST_F(ClientTest, SparsePullsAsFp16OrBf16GiveTheRoundedRows) {
  const int dim = cluster_.map().tables(0).dim();
  std::vector<uint64_t> keys(120);
  std::iota(keys.begin(), keys.end(), 7000);
  keys.push_back(7003);  // a duplicate
  std::vector<float> fp32(keys.size() * dim), cast(keys.size() * dim);
  ASSERT_TRUE(client_->Wait(client_->Pull(0, keys.data(), keys.size(), fp32.data())).ok());
  for (proto::Codec pull_codec : {proto::CODEC_FP16, proto::CODEC_BF16}) {
    SCOPED_TRACE(pull_codec == proto::CODEC_FP16 ? "fp16" : "bf16");
    ASSERT_TRUE(client_->SetSparsePullCodec(0, pull_codec).ok());
    const uint64_t pulled0 = client_->stats().bytes_pulled;
    ASSERT_TRUE(client_->Wait(client_->Pull(0, keys.data(), keys.size(), cast.data())).ok());
    EXPECT_EQ(client_->stats().bytes_pulled - pulled0, keys.size() * dim * sizeof(uint16_t));
    int rounded = 0;
    for (size_t i = 0; i < fp32.size(); ++i) {
      const float want = pull_codec == proto::CODEC_FP16 ? codec::HalfBitsToFloat(codec::FloatToHalfBits(fp32[i]))
                                                         : codec::Bf16BitsToFloat(codec::FloatToBf16Bits(fp32[i]));
      ASSERT_EQ(cast[i], want) << "float " << i;
      rounded += cast[i] != fp32[i];
    }
    EXPECT_GT(rounded, static_cast<int>(fp32.size()) / 2);  // the rows really went in 16 bits
  }
  ASSERT_TRUE(client_->SetSparsePullCodec(0, proto::CODEC_NONE).ok());
  ASSERT_TRUE(client_->Wait(client_->Pull(0, keys.data(), keys.size(), cast.data())).ok());
  EXPECT_EQ(cast, fp32);
  EXPECT_EQ(client_->SetSparsePullCodec(0, proto::CODEC_ONEBIT).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(client_->SetSparsePullCodec(1, proto::CODEC_BF16).code(), StatusCode::kInvalidArgument);  // dense

  InprocCluster one(1);
  ASSERT_TRUE(one.ActivateAll().ok());
  Client single(ClientOptions{}, one.NewTransport(), one.map());
  ASSERT_TRUE(single.Start().ok());
  std::vector<float> one_fp32(keys.size() * dim), one_bf16(keys.size() * dim);
  ASSERT_TRUE(single.Wait(single.Pull(0, keys.data(), keys.size(), one_fp32.data())).ok());
  ASSERT_TRUE(single.SetSparsePullCodec(0, proto::CODEC_BF16).ok());
  ASSERT_TRUE(single.Wait(single.Pull(0, keys.data(), keys.size(), one_bf16.data())).ok());
  for (size_t i = 0; i < one_fp32.size(); ++i) {
    ASSERT_EQ(one_bf16[i], codec::Bf16BitsToFloat(codec::FloatToBf16Bits(one_fp32[i]))) << "float " << i;
  }
  single.Stop();
}

TEST_F(ClientTest, WrongTableKindFailsImmediately) {
  float x[4];
  uint64_t k = 1;
  Status s = client_->Wait(client_->Pull(1, &k, 1, x));
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("dense"), std::string::npos);
  EXPECT_EQ(client_->Wait(client_->PullDense(7, x)).code(), StatusCode::kInvalidArgument);
  Buffer wrong = Buffer::Allocate(8);
  EXPECT_EQ(client_->Wait(client_->PushDense(1, wrong)).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(client_->TableId("nope").status().code(), StatusCode::kNotFound);
  EXPECT_EQ(*client_->TableId("mlp"), 1u);
}

TEST_F(ClientTest, ServerErrorSurfacesWithServerName) {
  std::vector<float> g = {0, 0, 0, std::numeric_limits<float>::infinity()};
  uint64_t k = 3;
  Status s = client_->Wait(client_->Push(0, &k, 1, g.data()));
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("non-finite"), std::string::npos) << s.ToString();
  EXPECT_NE(s.message().find("on server"), std::string::npos) << s.ToString();
}

TEST_F(ClientTest, ManyOutstandingTicketsWithSmallWindow) {
  std::vector<uint64_t> keys(50);
  std::iota(keys.begin(), keys.end(), 0);
  std::vector<std::vector<float>> outs(20, std::vector<float>(50 * 4));
  std::vector<Ticket> tickets;
  for (auto& o : outs) tickets.push_back(client_->Pull(0, keys.data(), keys.size(), o.data()));
  for (Ticket t : tickets) ASSERT_TRUE(client_->Wait(t).ok());
  for (auto& o : outs) EXPECT_EQ(o, outs[0]);
  EXPECT_EQ(client_->Wait(tickets[0]).code(), StatusCode::kInvalidArgument);  // waited twice
}

// Several threads pull at once (the trainer's pullers do): each Wait copies its own ticket's rows,
// so every thread must get exactly the rows a lone pull of the same keys gets.
TEST_F(ClientTest, ConcurrentPullsFromSeveralThreadsGetTheirOwnRows) {
  constexpr int kThreads = 4, kKeys = 300, kRounds = 20;
  std::vector<std::vector<uint64_t>> keys(kThreads);
  for (int t = 0; t < kThreads; ++t) {
    for (int i = 0; i < kKeys; ++i) keys[t].push_back(uint64_t{7919} * (t * kKeys + i) % 5003);
    keys[t].push_back(keys[t][0]);  // a duplicate
  }
  std::vector<std::vector<float>> expect(kThreads);
  for (int t = 0; t < kThreads; ++t) {
    expect[t].resize(keys[t].size() * 4);
    ASSERT_TRUE(client_->Wait(client_->Pull(0, keys[t].data(), keys[t].size(), expect[t].data())).ok());
  }
  std::vector<int> mismatches(kThreads, 0), failures(kThreads, 0);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      std::vector<float> out(expect[t].size());
      for (int r = 0; r < kRounds; ++r) {
        std::fill(out.begin(), out.end(), -1.0f);
        if (!client_->Wait(client_->Pull(0, keys[t].data(), keys[t].size(), out.data())).ok()) {
          ++failures[t];
        } else if (out != expect[t]) {
          ++mismatches[t];
        }
      }
    });
  }
  for (auto& th : threads) th.join();
  for (int t = 0; t < kThreads; ++t) {
    EXPECT_EQ(failures[t], 0) << "thread " << t;
    EXPECT_EQ(mismatches[t], 0) << "thread " << t;
  }
}

// The rows of a pull are copied into `out` only when every server replied: a pull that fails on
// one server leaves `out` as it was, although another server's reply already arrived, and the
// late reply of the failed server never reaches it either.
TEST(ClientFailedPullTest, LeavesTheOutputUntouched) {
  InprocCluster cluster(2);
  ASSERT_TRUE(cluster.server(0).Activate(0, cluster.map(), cluster.tables()).ok());  // 1 holds requests
  ClientOptions o;
  o.timeout_ms = 300;
  auto observed = std::make_unique<ObservedTransport>(cluster.NewTransport());
  ObservedTransport* transport = observed.get();
  Client client(o, std::move(observed), cluster.map());
  ASSERT_TRUE(client.Start().ok());
  std::vector<uint64_t> keys(64);
  std::iota(keys.begin(), keys.end(), 100);
  std::set<int> servers;
  for (uint64_t k : keys) servers.insert(ServerForKey(0, k, 2));
  ASSERT_EQ(servers.size(), 2u);
  constexpr float kUntouched = -7.0f;
  std::vector<float> rows(keys.size() * 4, kUntouched);
  std::vector<float> dense(10, kUntouched);
  Ticket sparse_ticket = client.Pull(0, keys.data(), keys.size(), rows.data());
  Ticket dense_ticket = client.PullDense(1, dense.data());
  EXPECT_EQ(client.Wait(sparse_ticket).code(), StatusCode::kDeadlineExceeded);
  EXPECT_EQ(client.Wait(dense_ticket).code(), StatusCode::kDeadlineExceeded);
  EXPECT_GT(client.stats().bytes_pulled, 0u);  // server 0 did answer both
  ASSERT_TRUE(cluster.server(1).Activate(1, cluster.map(), cluster.tables()).ok());
  // Its held replies come back now: wait until the client has handled a reply to every message.
  ASSERT_TRUE(transport->WaitForHandled(transport->sent().size())) << transport->handled() << " replies";
  for (float v : rows) ASSERT_EQ(v, kUntouched);
  for (float v : dense) ASSERT_EQ(v, kUntouched);
  client.Stop();
}

TEST(ClientTimeoutTest, SilentServerGivesDeadlineExceeded) {
  // A listener that never replies stands in for a hung server.
  auto hub = std::make_shared<InprocHub>();
  InprocTransport silent(hub);
  ASSERT_TRUE(silent.Listen("inproc://silent").ok());
  silent.SetHandler([](Message&&) {});
  ASSERT_TRUE(silent.Start().ok());
  auto map = testing::MakeShardMap({"inproc://silent"}, testing::TestTables());
  ClientOptions o;
  o.timeout_ms = 200;
  Client client(o, std::make_unique<InprocTransport>(hub), map);
  ASSERT_TRUE(client.Start().ok());
  uint64_t k = 1;
  float row[4];
  auto start = std::chrono::steady_clock::now();
  Status s = client.Wait(client.Pull(0, &k, 1, row));
  EXPECT_EQ(s.code(), StatusCode::kDeadlineExceeded);
  EXPECT_NE(s.message().find("200 ms"), std::string::npos) << s.ToString();
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(5));
  silent.Stop();
}

TEST(ClientStopTest, StopFailsOutstandingTickets) {
  auto hub = std::make_shared<InprocHub>();
  ObservedTransport silent(std::make_unique<InprocTransport>(hub));
  ASSERT_TRUE(silent.Listen("inproc://silent2").ok());
  silent.SetHandler([](Message&&) {});
  ASSERT_TRUE(silent.Start().ok());
  ClientOptions o;
  o.timeout_ms = 60000;
  Client client(o, std::make_unique<InprocTransport>(hub),
                testing::MakeShardMap({"inproc://silent2"}, testing::TestTables()));
  ASSERT_TRUE(client.Start().ok());
  uint64_t k = 1;
  float row[4];
  Ticket t = client.Pull(0, &k, 1, row);
  std::thread stopper([&] {
    EXPECT_TRUE(silent.WaitForHandled(1));  // the pull reached the server: it is outstanding
    client.Stop();
  });
  EXPECT_EQ(client.Wait(t).code(), StatusCode::kAborted);
  stopper.join();
  silent.Stop();
}

}  // namespace
}  // namespace osprey::worker

namespace osprey::worker {
namespace {

// A PushEncoder made of a function (any table).
class FunctionEncoder final : public PushEncoder {
 public:
  using Fn = std::function<Status(const PushValues&, proto::Header*, Buffer*)>;
  explicit FunctionEncoder(Fn fn) : fn_(std::move(fn)) {}
  Status CheckTable(const proto::TableSpec&) const override { return Status::OK(); }
  Status Encode(const PushValues& in, proto::Header* h, Buffer* out) override { return fn_(in, h, out); }

 private:
  Fn fn_;
};

TEST_F(ClientTest, DenseEncoderIsCalledPerServerAndItsErrorsFailThePush) {
  std::vector<float> init(10, 1.0f);
  ASSERT_TRUE(client_->Wait(client_->InitDense(1, init.data())).ok());
  std::vector<int> calls;
  size_t floats = 0;
  ASSERT_TRUE(client_->SetEncoder(1, std::make_unique<FunctionEncoder>([&](const PushValues& in, proto::Header* h,
                                                                          Buffer* out) {
    calls.push_back(in.server);
    floats += in.floats;
    h->set_codec(proto::CODEC_NONE);
    *out = Buffer::Allocate(in.floats * sizeof(float));  // identity "codec"
    in.CopyTo(reinterpret_cast<float*>(out->mutable_data()));
    return Status::OK();
  })).ok());
  std::vector<float> g(10, 2.0f);
  ASSERT_TRUE(client_->Wait(client_->PushDense(1, g.data())).ok());
  EXPECT_EQ(floats, 10u);
  EXPECT_GE(calls.size(), 1u);
  std::vector<float> out(10);
  ASSERT_TRUE(client_->Wait(client_->PullDense(1, out.data())).ok());
  for (float x : out) EXPECT_FLOAT_EQ(x, 0.0f);  // 1 - 0.5 * 2
  ASSERT_TRUE(client_->SetEncoder(1, std::make_unique<FunctionEncoder>([](const PushValues&, proto::Header*, Buffer*) {
    return InvalidArgument("encoder says no");
  })).ok());
  Status s = client_->Wait(client_->PushDense(1, g.data()));
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("encoder says no"), std::string::npos) << s.ToString();
  EXPECT_NE(s.message().find("dense push to table 'mlp'"), std::string::npos) << s.ToString();
}

}  // namespace
}  // namespace osprey::worker

namespace osprey::worker {
namespace {

TEST(ClientSingleServerTest, BulkPathKeepsKeyOrderAndDuplicates) {
  InprocCluster cluster(1);
  ASSERT_TRUE(cluster.ActivateAll().ok());
  Client client(ClientOptions{}, cluster.NewTransport(), cluster.map());
  ASSERT_TRUE(client.Start().ok());
  std::vector<uint64_t> keys = {9, 3, 9, 7};
  std::vector<float> rows(16), single(4);
  ASSERT_TRUE(client.Wait(client.Pull(0, keys.data(), 4, rows.data())).ok());
  for (size_t i = 0; i < keys.size(); ++i) {
    ASSERT_TRUE(client.Wait(client.Pull(0, &keys[i], 1, single.data())).ok());
    for (int d = 0; d < 4; ++d) EXPECT_EQ(rows[i * 4 + d], single[d]) << "key " << keys[i];
  }
  std::vector<float> g(16, 1.0f);
  ASSERT_TRUE(client.Wait(client.Push(0, keys.data(), 4, g.data())).ok());
  std::vector<float> after(16);
  ASSERT_TRUE(client.Wait(client.Pull(0, keys.data(), 4, after.data())).ok());
  EXPECT_FLOAT_EQ(after[0], rows[0] - 1.0f);  // key 9 pushed twice: two SGD steps of 0.5
  EXPECT_FLOAT_EQ(after[4], rows[4] - 0.5f);
}

}  // namespace
}  // namespace osprey::worker

namespace osprey::worker {
namespace {

std::vector<config::TableConfig> BspTables() {
  std::vector<config::TableConfig> tables = testing::TestTables();
  for (auto& t : tables) t.consistency.mode = config::ConsistencyMode::kBsp;
  return tables;
}

// Workers 0 and 1, both live on both servers of `cluster`.
void StartTwoBspWorkers(testing::InprocCluster* cluster, std::unique_ptr<Client> (&c)[2]) {
  ASSERT_TRUE(cluster->ActivateAll().ok());
  for (int s = 0; s < 2; ++s) cluster->server(s).SetLiveWorkers({0, 1});
  for (int w = 0; w < 2; ++w) {
    ClientOptions o;
    o.worker_rank = w;
    o.timeout_ms = 3000;
    c[w] = std::make_unique<Client>(o, cluster->NewTransport(), cluster->map());
    ASSERT_TRUE(c[w]->Start().ok());
  }
}

// The GPU host group's pattern in bsp: both workers pull the dense table every clock, only the
// owner pushes it. The window of a clock must close once both have moved on (pulled the next
// clock), so the next clock's pulls are answered.
TEST(ClientBspHostGroupTest, DenseWindowClosesWhenOnlyOneWorkerPushes) {
  testing::InprocCluster cluster(2, BspTables());
  std::unique_ptr<Client> c[2];
  StartTwoBspWorkers(&cluster, c);
  if (::testing::Test::HasFatalFailure()) return;
  std::vector<float> init(10, 0.0f), g(10, 1.0f), out0(10), out1(10);
  ASSERT_TRUE(c[0]->Wait(c[0]->InitDense(1, init.data())).ok());
  for (int64_t clock = 0; clock < 4; ++clock) {
    Ticket p0 = c[0]->PullDense(1, out0.data(), clock);
    Ticket p1 = c[1]->PullDense(1, out1.data(), clock);
    ASSERT_TRUE(c[0]->Wait(p0).ok()) << "clock " << clock;
    ASSERT_TRUE(c[1]->Wait(p1).ok()) << "clock " << clock;
    ASSERT_TRUE(c[0]->Wait(c[0]->PushDense(1, g.data(), clock)).ok());
  }
  EXPECT_FLOAT_EQ(out0[0], -1.5f);  // three windows of lr 0.5 applied before clock 3's pull
}

// The same with slice pulls: worker w pulls and pushes only the servers s with s % 2 == w; to
// the others it sends clock-only pulls. Each server's window must still close every clock (the
// clock-only pull carries the non-owner's progress), and a clock-only pull must be held like a
// real one until its clock is ready.
TEST(ClientBspHostGroupTest, SlicePullsWithClockOnlyPullsKeepWindowsClosing) {
  testing::InprocCluster cluster(2, BspTables());
  std::unique_ptr<Client> c[2];
  StartTwoBspWorkers(&cluster, c);
  if (::testing::Test::HasFatalFailure()) return;
  const proto::TableSpec& spec = cluster.map().tables(1);
  std::vector<float> init(spec.size(), 0.0f), g(spec.size(), 1.0f);
  std::vector<float> out[2] = {std::vector<float>(spec.size()), std::vector<float>(spec.size())};
  const std::vector<bool> mask[2] = {{true, false}, {false, true}};
  ASSERT_TRUE(c[0]->Wait(c[0]->InitDense(1, init.data())).ok());
  for (int64_t clock = 0; clock < 4; ++clock) {
    const uint64_t requests[2] = {cluster.server(0).stats().requests, cluster.server(1).stats().requests};
    Ticket p0 = c[0]->PullDense(1, out[0].data(), clock, mask[0]);
    if (clock > 0) {
      // Worker 1 has not pulled this clock yet, so clock - 1's windows are open and worker 0's
      // pull (the clock-only part included) must still be held: let both parts reach their
      // servers before worker 1 pulls.
      ASSERT_TRUE(testing::WaitUntil([&] {
        return cluster.server(0).stats().requests > requests[0] && cluster.server(1).stats().requests > requests[1];
      })) << "clock " << clock;
    }
    Ticket p1 = c[1]->PullDense(1, out[1].data(), clock, mask[1]);
    ASSERT_TRUE(c[0]->Wait(p0).ok()) << "clock " << clock;
    ASSERT_TRUE(c[1]->Wait(p1).ok()) << "clock " << clock;
    for (int w = 0; w < 2; ++w) ASSERT_TRUE(c[w]->Wait(c[w]->PushDense(1, g.data(), clock, 0, mask[w])).ok());
  }
  // Each chunk: three windows of one push each (lr 0.5) before clock 3's pull, read by its owner.
  std::set<int> owners;
  for (uint64_t i = 0; i < spec.size(); ++i) {
    int owner = ServerForChunk(1, i / spec.chunk_floats(), 2);
    owners.insert(owner);
    EXPECT_FLOAT_EQ(out[owner][i], -1.5f) << "float " << i;
  }
  EXPECT_EQ(owners.size(), 2u) << "the fixture's dense table should span both servers";
}

}  // namespace
}  // namespace osprey::worker

namespace osprey::worker {
namespace {

// One server owns every chunk: a pull into a Buffer is the server's reply frame, which (through
// the in-process transport) is the store's copy-on-write weights block itself. A push made while
// that view is held must not change it.
TEST(ClientDenseBufferTest, PullIntoBufferIsAStableZeroCopySnapshot) {
  InprocCluster cluster(1);
  ASSERT_TRUE(cluster.ActivateAll().ok());
  Client client(ClientOptions{}, cluster.NewTransport(), cluster.map());
  ASSERT_TRUE(client.Start().ok());
  std::vector<float> init(10);
  std::iota(init.begin(), init.end(), 0.0f);
  ASSERT_TRUE(client.Wait(client.InitDense(1, init.data())).ok());
  Buffer a, b;
  ASSERT_TRUE(client.Wait(client.PullDense(1, &a)).ok());
  ASSERT_TRUE(client.Wait(client.PullDense(1, &b)).ok());
  ASSERT_EQ(a.size(), 10 * sizeof(float));
  EXPECT_EQ(a.data(), b.data()) << "two pulls without a push in between share the store's block";
  std::vector<float> g(10, 2.0f);
  ASSERT_TRUE(client.Wait(client.PushDense(1, g.data())).ok());
  for (int i = 0; i < 10; ++i) EXPECT_FLOAT_EQ(a.as<float>()[i], i) << "held snapshot changed";
  Buffer c;
  std::vector<float> out(10);
  ASSERT_TRUE(client.Wait(client.PullDense(1, &c)).ok());
  ASSERT_TRUE(client.Wait(client.PullDense(1, out.data())).ok());
  EXPECT_NE(c.data(), a.data());
  for (int i = 0; i < 10; ++i) {
    EXPECT_FLOAT_EQ(c.as<float>()[i], i - 1.0f);
    EXPECT_FLOAT_EQ(out[i], i - 1.0f);
  }
  // With no view left, a push writes the block in place and later pulls see it.
  a = b = c = Buffer();
  ASSERT_TRUE(client.Wait(client.PushDense(1, g.data())).ok());
  ASSERT_TRUE(client.Wait(client.PullDense(1, &a)).ok());
  for (int i = 0; i < 10; ++i) EXPECT_FLOAT_EQ(a.as<float>()[i], i - 2.0f);
}

// Chunks spread over three servers: the Buffer is assembled like a float-array pull.
TEST_F(ClientTest, DensePullIntoBufferAcrossServers) {
  std::vector<float> init(10);
  std::iota(init.begin(), init.end(), 0.0f);
  ASSERT_TRUE(client_->Wait(client_->InitDense(1, init.data())).ok());
  Buffer out;
  ASSERT_TRUE(client_->Wait(client_->PullDense(1, &out)).ok());
  ASSERT_EQ(out.size(), 10 * sizeof(float));
  for (int i = 0; i < 10; ++i) EXPECT_FLOAT_EQ(out.as<float>()[i], i);
  Buffer bad;
  EXPECT_EQ(client_->Wait(client_->PullDense(0, &bad)).code(), StatusCode::kInvalidArgument);
}

// Pushes racing pulls never tear a chunk: every pushed step moves each weight of every chunk by
// the same amount, so within a pulled chunk all weights must show the same number of steps.
TEST(ClientDenseBufferTest, ConcurrentPushesNeverTearAPulledChunk) {
  std::vector<config::TableConfig> tables = testing::TestTables();
  tables[1].size = 1 << 16;
  tables[1].chunk_floats = 1 << 14;
  InprocCluster cluster(1, tables);
  ASSERT_TRUE(cluster.ActivateAll().ok());
  Client pusher(ClientOptions{}, cluster.NewTransport(), cluster.map());
  Client puller(ClientOptions{}, cluster.NewTransport(), cluster.map());
  ASSERT_TRUE(pusher.Start().ok());
  ASSERT_TRUE(puller.Start().ok());
  const size_t n = tables[1].size, chunk = tables[1].chunk_floats;
  std::vector<float> zeros(n, 0.0f), g(n, 2.0f);  // lr 0.5: each push subtracts exactly 1
  ASSERT_TRUE(pusher.Wait(pusher.InitDense(1, zeros.data())).ok());
  constexpr int kPushes = 200;
  std::thread push_thread([&] {
    for (int i = 0; i < kPushes; ++i) ASSERT_TRUE(pusher.Wait(pusher.PushDense(1, g.data())).ok());
  });
  std::vector<float> array(n);
  std::vector<Buffer> held;  // views kept alive while pushes go on
  float last = 1.0f;
  for (int i = 0; i < 300 && last > -kPushes; ++i) {
    Buffer b;
    ASSERT_TRUE(puller.Wait(puller.PullDense(1, &b)).ok());
    ASSERT_TRUE(puller.Wait(puller.PullDense(1, array.data())).ok());
    held.push_back(b);
    if (held.size() > 4) held.erase(held.begin());
    for (const Buffer& h : held) {
      const float* v = h.as<float>();
      for (size_t c = 0; c < n; c += chunk) {
        for (size_t j = c; j < c + chunk; ++j) ASSERT_EQ(v[j], v[c]) << "torn chunk at " << j;
      }
    }
    for (size_t c = 0; c < n; c += chunk) {
      for (size_t j = c; j < c + chunk; ++j) ASSERT_EQ(array[j], array[c]) << "torn chunk at " << j;
    }
    last = array[0];
  }
  push_thread.join();
  ASSERT_TRUE(puller.Wait(puller.PullDense(1, array.data())).ok());
  for (size_t j = 0; j < n; ++j) ASSERT_EQ(array[j], -float{kPushes});
}

}  // namespace
}  // namespace osprey::worker
