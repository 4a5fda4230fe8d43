// RedisStore::ReownRows / AdoptRows (a scale step's sparse rows handed over in Redis) against a
// real redis-server and a real 3-master Redis Cluster, write_through and write_back: rank 0 holds
// rows it wrote (flushed or, write_back, still dirty; over kRowsPerCall moving rows a bucket) and
// rows only pulled (never written), hands the odd keys to rank 1, and rank 1 then reads exactly
// the rows rank 0 had -- weights, optimizer state and update versions -- while rank 0's buckets
// keep only the even keys. A replaced incarnation of rank 0 can hand nothing over (the fence).
#include <gtest/gtest.h>

#include <map>
#include <random>
#include <set>
#include <vector>

#include "server/redis/redis_store.h"
#include "server/redis/row_layout.h"
#include "server/updater.h"
#include "tests/testing/redis_fixture.h"

namespace osprey::server {
namespace {

using testing::RedisServer;
using testing::RedisTestCluster;

constexpr int kDim = 4;

struct Row {
  std::vector<float> floats;
  std::vector<uint64_t> history;
  bool operator==(const Row& o) const { return floats == o.floats && history == o.history; }
};

StoreTableSpec Spec() {
  StoreTableSpec spec;
  spec.config.name = "emb";
  spec.config.type = config::TableType::kSparse;
  spec.config.dim = kDim;
  spec.config.optimizer.type = config::OptimizerType::kAdagrad;
  spec.state = Updater::Make(spec.config.optimizer).value()->state_layout();
  return spec;
}

// Every key's row as `store` has it (kRead: a missing row fails the test).
std::map<uint64_t, Row> Read(Store* store, const std::vector<uint64_t>& keys) {
  std::map<uint64_t, Row> out;
  const size_t f = store->RecordFloats(0, 0);
  Status s = store->VisitRows(0, keys.data(), keys.size(), RowAccess::kRead, [&](const RowBlock& b) {
    for (size_t i = 0; i < b.n; ++i) {
      const uint64_t key = keys[b.begin + i];
      EXPECT_NE(b.rows[i], nullptr) << "row " << key << " missing";
      if (b.rows[i] == nullptr) continue;
      out[key] = Row{{b.rows[i], b.rows[i] + f}, {b.history[i], b.history[i] + kRowHistory}};
    }
    return Status::OK();
  });
  EXPECT_TRUE(s.ok()) << s.ToString();
  return out;
}

struct Case {
  bool cluster;
  config::WritePolicy policy;
};

class ReownRowsTest : public ::testing::TestWithParam<Case> {
 protected:
  void SetUp() override {
    if (GetParam().cluster) {
      auto c = RedisTestCluster::Start(3);
      ASSERT_TRUE(c.ok()) << c.status().ToString();
      cluster_ = std::move(*c);
      rc_.cluster = true;
      for (const auto& e : cluster_->endpoints()) {
        rc_.endpoints += (rc_.endpoints.empty() ? "" : ",") + e.ToString();
      }
    } else {
      auto n = RedisServer::Start();
      ASSERT_TRUE(n.ok()) << n.status().ToString();
      node_ = std::move(*n);
      rc_.endpoints = node_->endpoint().ToString();
    }
    rc_.key_prefix = "reown";
    rc_.write_policy = GetParam().policy;
    rc_.flush_interval_ms = 3600 * 1000;  // write_back: dirty rows stay dirty until ReownRows
    rc_.cache_rows = 1 << 20;  // the pulled rows stay cached (with no cache they are dropped)
  }

  std::unique_ptr<RedisStore> Open(int rank) {
    auto s = RedisStore::Connect(rc_);
    EXPECT_TRUE(s.ok()) << s.status().ToString();
    if (!s.ok()) return nullptr;
    EXPECT_TRUE((*s)->TakeOver(rank).ok());
    EXPECT_TRUE((*s)->CreateTable(Spec()).ok());
    return std::move(*s);
  }

  // The keys under rank `rank`'s buckets in Redis.
  std::set<uint64_t> KeysInRedis(int rank) {
    redis::RedisOptions o;
    o.cluster = rc_.cluster;
    o.seeds = cluster_ ? cluster_->endpoints() : std::vector<redis::Endpoint>{node_->endpoint()};
    auto client = redis::RedisClient::Connect(o);
    EXPECT_TRUE(client.ok());
    std::vector<redis::Command> cmds;
    const redis_store::Layout layout("reown", rank);
    for (uint32_t b = 0; b < redis_store::kBuckets; ++b) cmds.push_back({{"HKEYS", layout.Rows(0, b)}, 1});
    std::vector<redis::Reply> r;
    EXPECT_TRUE((*client)->Execute(cmds, &r).ok());
    std::set<uint64_t> keys;
    for (const auto& x : r) {
      for (const auto& e : x.elements) keys.insert(std::stoull(e.str));
    }
    return keys;
  }

  config::RedisStoreConfig rc_;
  std::unique_ptr<RedisServer> node_;
  std::unique_ptr<RedisTestCluster> cluster_;
};

TEST_P(ReownRowsTest, TheNewOwnerReadsExactlyTheRowsTheOldOneHad) {
  auto r0 = Open(0);
  auto r1 = Open(1);
  ASSERT_TRUE(r0 && r1);
  std::mt19937_64 rng(5);
  // About 1.5 x kRowsPerCall moving rows a bucket: a bucket moves in more than one call.
  std::vector<uint64_t> written(3 * redis_store::kBuckets * redis_store::kRowsPerCall + 3000);
  std::vector<uint64_t> pulled(500), all;
  for (uint64_t& k : written) k = rng();
  for (uint64_t& k : pulled) k = rng();
  // Written rows: weights, state and a version each, made durable (write_through) or left dirty.
  const size_t f = r0->RecordFloats(0, 0);  // asked before: a visit must not call the store
  ASSERT_TRUE(r0->VisitRows(0, written.data(), written.size(), RowAccess::kUpdate, [&](const RowBlock& b) {
    for (size_t i = 0; i < b.n; ++i) {
      for (size_t j = 0; j < f; ++j) b.rows[i][j] = static_cast<float>(rng() % 1000) / 7.0f;
      b.history[i][0] = 40 + i;
    }
    return Status::OK();
  }).ok());
  ASSERT_TRUE(r0->Sync(0).ok());
  std::vector<float> initial(pulled.size() * kDim);
  ASSERT_TRUE(r0->PullRows(0, pulled.data(), pulled.size(), initial.data()).ok());  // never written
  all = written;
  all.insert(all.end(), pulled.begin(), pulled.end());
  const std::map<uint64_t, Row> before = Read(r0.get(), all);
  ASSERT_EQ(before.size(), all.size());

  auto owner = [](uint64_t key) { return static_cast<int>(key % 2); };
  std::vector<uint64_t> moved;
  uint64_t kept = 0;
  Status s = r0->ReownRows(0, 0, 2, owner, &moved, &kept);
  ASSERT_TRUE(s.ok()) << s.ToString();
  std::vector<uint64_t> odd, even_written;
  for (uint64_t k : all) {
    if (k % 2) odd.push_back(k);
  }
  for (uint64_t k : written) {
    if (k % 2 == 0) even_written.push_back(k);
  }
  ASSERT_EQ(moved.size(), 2u);
  EXPECT_EQ(moved[0], 0u);
  EXPECT_EQ(moved[1], odd.size()) << "the pulled-only rows move too";
  EXPECT_EQ(kept, even_written.size());
  EXPECT_EQ(r0->num_rows(0), even_written.size());

  // In Redis: the odd keys under rank 1 only, the written even keys under rank 0 only.
  const std::set<uint64_t> in0 = KeysInRedis(0), in1 = KeysInRedis(1);
  EXPECT_EQ(in1, std::set<uint64_t>(odd.begin(), odd.end()));
  EXPECT_EQ(in0, std::set<uint64_t>(even_written.begin(), even_written.end()));

  // Rank 1 counts them once told, and reads every one exactly as rank 0 had it.
  EXPECT_EQ(r1->num_rows(0), 0u);
  ASSERT_TRUE(r1->AdoptRows(0).ok());
  EXPECT_EQ(r1->num_rows(0), odd.size());
  const std::map<uint64_t, Row> after = Read(r1.get(), odd);
  ASSERT_EQ(after.size(), odd.size());
  for (uint64_t k : odd) EXPECT_TRUE(after.at(k) == before.at(k)) << "row " << k << " changed";

  // A replaced incarnation of rank 0 hands nothing over: the fence refuses it before any copy.
  auto next = Open(0);
  ASSERT_TRUE(next);
  s = r0->ReownRows(0, 0, 2, [](uint64_t) { return 1; }, &moved, &kept);
  EXPECT_EQ(s.code(), StatusCode::kFailedPrecondition) << s.ToString();
  EXPECT_NE(s.message().find("FENCED"), std::string::npos) << s.ToString();
  EXPECT_EQ(KeysInRedis(1), in1);
  EXPECT_EQ(KeysInRedis(0), in0);
}

INSTANTIATE_TEST_SUITE_P(
    Stores, ReownRowsTest,
    ::testing::Values(Case{false, config::WritePolicy::kWriteThrough},
                      Case{false, config::WritePolicy::kWriteBack},
                      Case{true, config::WritePolicy::kWriteThrough},
                      Case{true, config::WritePolicy::kWriteBack}),
    [](const ::testing::TestParamInfo<Case>& i) {
      return std::string(i.param.cluster ? "Cluster" : "Node") +
             (i.param.policy == config::WritePolicy::kWriteBack ? "WriteBack" : "WriteThrough");
    });

}  // namespace
}  // namespace osprey::server
