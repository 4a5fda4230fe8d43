// Server::Reshard and OP_MIGRATE_ROWS (server/migration/): three real Servers over real ZeroMQ
// sockets on loopback, a real Client per shard map. 2 -> 3 -> 2 servers: every row and dense
// chunk (with its optimizer state) is conserved exactly (count and checksum), lands on its
// owner under the new map, and reads back the same through a client of the new map.
#include <gtest/gtest.h>

#include <thread>

#include "common/config/table_config.h"
#include "common/placement.h"
#include "common/zmq_transport.h"
#include "server/migration/row_sender.h"
#include "server/server.h"
#include "tests/testing/cluster_fixture.h"
#include "worker/client/client.h"

namespace osprey {
namespace {

std::vector<config::TableConfig> Tables() {
  std::vector<config::TableConfig> t = testing::TestTables();
  t[0].optimizer.type = config::OptimizerType::kAdagrad;  // rows carry optimizer state
  t[1].size = 64;  // 16 dense chunks of 4: some move at every step
  t[1].optimizer.type = config::OptimizerType::kAdagrad;
  return t;
}

proto::ShardMap MapOf(const std::vector<std::string>& endpoints, uint64_t epoch) {
  proto::ShardMap m = testing::MakeShardMap(endpoints, Tables());
  m.set_epoch(epoch);
  return m;
}

class ReshardTest : public ::testing::Test {
 protected:
  void SetUp() override {
    for (int i = 0; i < 3; ++i) {
      servers_.push_back(std::make_unique<server::Server>(std::make_unique<ZmqTransport>(TransportOptions{}),
                                                          std::move(*server::MakeStore("native"))));
      auto bound = servers_.back()->Listen("tcp://127.0.0.1:0");
      ASSERT_TRUE(bound.ok()) << bound.status().ToString();
      endpoints_.push_back(*bound);
    }
    for (uint64_t k = 0; k < 6000; ++k) keys_.push_back(k * 2654435761ULL + 17);
  }

  std::unique_ptr<worker::Client> ClientFor(const proto::ShardMap& map) {
    worker::ClientOptions o;
    o.timeout_ms = 10000;
    auto c = std::make_unique<worker::Client>(o, std::make_unique<ZmqTransport>(TransportOptions{}), map);
    EXPECT_TRUE(c->Start().ok());
    return c;
  }

  // Every row's and chunk's weights through `client`.
  std::vector<float> ReadAll(worker::Client* c) {
    std::vector<float> out(keys_.size() * 4 + 64);
    EXPECT_TRUE(c->Wait(c->Pull(0, keys_.data(), keys_.size(), out.data())).ok());
    EXPECT_TRUE(c->Wait(c->PullDense(1, out.data() + keys_.size() * 4)).ok());
    return out;
  }

  void Train(worker::Client* c, float scale) {
    std::vector<float> g(keys_.size() * 4);
    for (size_t i = 0; i < g.size(); ++i) g[i] = scale * static_cast<float>((i % 7) + 1) * 0.01f;
    std::vector<float> dg(64, scale * 0.1f);
    ASSERT_TRUE(c->Wait(c->Push(0, keys_.data(), keys_.size(), g.data())).ok());
    ASSERT_TRUE(c->Wait(c->PushDense(1, dg.data())).ok());
  }

  // Sum of the digests of servers [0, n).
  server::migration::RowsDigest Total(int n) {
    server::migration::RowsDigest sum;
    for (int i = 0; i < n; ++i) {
      auto d = servers_[i]->Digest();
      EXPECT_TRUE(d.ok()) << d.status().ToString();
      sum.rows += d->rows;
      sum.records += d->records;
      sum.checksum += d->checksum;
    }
    return sum;
  }

  // Reshards servers [0, n) to `target` concurrently (a shrink's receivers may reach the new
  // epoch after the removed server starts sending: the sender retries).
  void ReshardAll(int n, const proto::ShardMap& target, uint64_t* sent) {
    std::vector<std::thread> threads;
    std::vector<Status> status(n);
    std::vector<uint64_t> moved(n, 0);
    for (int i = 0; i < n; ++i) {
      threads.emplace_back([&, i] {
        server::migration::RowSender sender(std::make_unique<ZmqTransport>(TransportOptions{}), 10000);
        auto r = servers_[i]->Reshard(target, &sender);
        status[i] = r.status();
        if (r.ok()) moved[i] = r->records_sent;
      });
    }
    for (auto& t : threads) t.join();
    *sent = 0;
    for (int i = 0; i < n; ++i) {
      EXPECT_TRUE(status[i].ok()) << "server " << i << ": " << status[i].ToString();
      *sent += moved[i];
    }
  }

  std::vector<std::unique_ptr<server::Server>> servers_;
  std::vector<std::string> endpoints_;
  std::vector<uint64_t> keys_;
};

TEST_F(ReshardTest, GrowThenShrinkConservesEveryRecord) {
  const proto::ShardMap two = MapOf({endpoints_[0], endpoints_[1]}, 1);
  for (int i = 0; i < 2; ++i) ASSERT_TRUE(servers_[i]->Activate(i, two, Tables()).ok());
  auto c1 = ClientFor(two);
  std::vector<float> init(64);
  for (size_t i = 0; i < init.size(); ++i) init[i] = 0.01f * static_cast<float>(i);
  ASSERT_TRUE(c1->Wait(c1->InitDense(1, init.data())).ok());
  Train(c1.get(), 1.0f);
  Train(c1.get(), -0.5f);
  const std::vector<float> before = ReadAll(c1.get());
  const server::migration::RowsDigest d2 = Total(2);
  EXPECT_EQ(d2.rows, keys_.size());
  EXPECT_EQ(d2.records, keys_.size() + 16);

  // 2 -> 3: the new server learns the new map at activation, the old ones reshard to it.
  const proto::ShardMap three = MapOf(endpoints_, 2);
  ASSERT_TRUE(servers_[2]->Activate(2, three, Tables()).ok());
  uint64_t sent = 0;
  ReshardAll(2, three, &sent);
  const server::migration::RowsDigest d3 = Total(3);
  EXPECT_EQ(d3.rows, d2.rows);
  EXPECT_EQ(d3.records, d2.records);
  EXPECT_EQ(d3.checksum, d2.checksum) << "a moved row's weights or optimizer state changed";
  const uint64_t on_new = servers_[2]->Digest()->records;
  EXPECT_EQ(sent, on_new);
  EXPECT_NEAR(static_cast<double>(on_new) / d3.records, 1.0 / 3, 0.04);

  // The old map's client is refused (its epoch is gone); the new one reads the same values.
  std::vector<float> row(4);
  EXPECT_EQ(c1->Wait(c1->Pull(0, keys_.data(), 1, row.data())).code(), StatusCode::kFailedPrecondition);
  auto c2 = ClientFor(three);
  EXPECT_EQ(ReadAll(c2.get()), before);
  Train(c2.get(), 0.25f);
  const std::vector<float> trained = ReadAll(c2.get());
  const server::migration::RowsDigest d3b = Total(3);
  EXPECT_NE(d3b.checksum, d3.checksum);

  // 3 -> 2: everything of server 2 goes back to 0 and 1.
  const proto::ShardMap back = MapOf({endpoints_[0], endpoints_[1]}, 3);
  ReshardAll(3, back, &sent);
  EXPECT_EQ(servers_[2]->Digest()->records, 0u);
  const server::migration::RowsDigest d2b = Total(2);
  EXPECT_EQ(d2b.rows, d3b.rows);
  EXPECT_EQ(d2b.checksum, d3b.checksum);
  auto c3 = ClientFor(back);
  EXPECT_EQ(ReadAll(c3.get()), trained);
  // Each row now lives on its owner under the 2-server map.
  for (int s = 0; s < 2; ++s) {
    size_t mine = 0;
    for (uint64_t k : keys_) mine += ServerForKey(0, k, 2) == s ? 1 : 0;
    EXPECT_EQ(servers_[s]->Digest()->rows, mine);
  }
}

TEST_F(ReshardTest, RefusesAStaleEpochAndRecordsOfAnotherEpoch) {
  const proto::ShardMap two = MapOf({endpoints_[0], endpoints_[1]}, 4);
  for (int i = 0; i < 2; ++i) ASSERT_TRUE(servers_[i]->Activate(i, two, Tables()).ok());
  auto r = servers_[0]->Reshard(MapOf({endpoints_[0]}, 4), nullptr);
  EXPECT_EQ(r.status().code(), StatusCode::kFailedPrecondition);
  // Records for an epoch the receiver has not reached are answered Unavailable (the sender
  // retries until its deadline, then fails naming the receiver).
  server::migration::RowSender sender(std::make_unique<ZmqTransport>(TransportOptions{}), 300);
  server::migration::RowBatch b;
  b.endpoint = endpoints_[1];
  b.epoch = 9;
  b.keys = {1};
  b.records.assign(8, 1.0f);
  Status st = sender.SendAll({b});
  EXPECT_EQ(st.code(), StatusCode::kUnavailable) << st.ToString();
  EXPECT_NE(st.message().find(endpoints_[1]), std::string::npos) << st.ToString();
}

// A notice of rows handed over in the store (reowned_rows) carries no records, and a store that
// cannot take rows in place (native) refuses it: each a clear error, the receiver unchanged.
TEST_F(ReshardTest, RefusesMalformedOrUnsupportedHandOverNotices) {
  const proto::ShardMap two = MapOf({endpoints_[0], endpoints_[1]}, 4);
  for (int i = 0; i < 2; ++i) ASSERT_TRUE(servers_[i]->Activate(i, two, Tables()).ok());
  const uint64_t rows_before = servers_[1]->Digest()->rows;
  server::migration::RowSender sender(std::make_unique<ZmqTransport>(TransportOptions{}), 2000);
  server::migration::RowBatch b;
  b.endpoint = endpoints_[1];
  b.epoch = 4;
  b.reowned = 5;
  b.keys = {1};
  b.records.assign(8, 1.0f);
  Status st = sender.SendAll({b});
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument) << st.ToString();
  EXPECT_NE(st.message().find("come with no records"), std::string::npos) << st.ToString();
  b.keys.clear();
  b.records.clear();
  st = sender.SendAll({b});
  EXPECT_EQ(st.code(), StatusCode::kUnimplemented) << st.ToString();
  EXPECT_NE(st.message().find("in place"), std::string::npos) << st.ToString();
  EXPECT_EQ(servers_[1]->Digest()->rows, rows_before);
}

}  // namespace
}  // namespace osprey
