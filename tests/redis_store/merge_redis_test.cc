// store.redis.merge: redis against a real redis-server (and a 3-master cluster): the same pushes
// through TableShard on the native store (the server's float kernels) and on the Redis store
// whose function osprey_apply applies sgd / adagrad in Redis. Lua computes in double and stores
// floats, so weights and state are compared within a relative 1e-5 (absolute 1e-7 near 0);
// update versions (history) must be equal. Also: the fencing check refuses a replaced
// incarnation's apply, and configs merge: redis cannot serve are refused at Connect.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

#include "server/native_store.h"
#include "server/redis/redis_store.h"
#include "server/table_shard.h"
#include "server/updater.h"
#include "tests/testing/redis_fixture.h"

namespace osprey::server {
namespace {

using testing::RedisServer;
using testing::RedisTestCluster;

class NoReplies : public Replier {
 public:
  void Reply(PeerId, const proto::Header&, Buffer) override {}
  void ReplyError(PeerId, const proto::Header&, const Status&) override {}
};

constexpr int kDim = 8;

config::TableConfig Table(const std::string& opt) {
  config::TableConfig c;
  c.name = "emb";
  c.type = config::TableType::kSparse;
  c.dim = kDim;
  c.optimizer.type = *ParseOptimizerType(opt);
  c.optimizer.lr = 0.05f;
  c.consistency.mode = config::ConsistencyMode::kAsync;
  c.consistency.merge_max_pushes = 2;
  return c;
}

// Pushes 6 windows of 2 pushes (overlapping keys: merged) through a TableShard on `store`.
Status Train(Store* store, const config::TableConfig& cfg, const std::vector<uint64_t>& keys) {
  proto::TableSpec ps;
  ps.set_name(cfg.name);
  ps.set_type(proto::TABLE_SPARSE);
  ps.set_dim(kDim);
  ServerCounters counters;
  NoReplies replier;
  OSPREY_ASSIGN_OR_RETURN(auto shard, TableShard::Create(0, ps, cfg, {}, 0, store, &counters,
                                                         &replier));
  std::mt19937_64 rng(11);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  for (int p = 0; p < 12; ++p) {
    std::vector<uint64_t> k(keys.begin() + (p % 3) * 20, keys.begin() + (p % 3) * 20 + 60);
    std::vector<float> g(k.size() * kDim);
    for (float& x : g) x = u(rng);
    proto::Header h;
    h.set_version(shard->version());
    OSPREY_RETURN_IF_ERROR(shard->Push(h, k.data(), k.size(),
                                       Buffer::Copy(g.data(), g.size() * sizeof(float)), 0));
    OSPREY_RETURN_IF_ERROR(shard->Advance(0));
  }
  if (shard->version() != 6) return Internal("windows applied: " + std::to_string(shard->version()));
  return shard->failure();
}

struct Rows {
  std::vector<float> floats;
  std::vector<uint64_t> history;
};

Rows Read(Store* store, const std::vector<uint64_t>& keys, size_t row_floats) {
  Rows out;
  Status s = store->VisitRows(0, keys.data(), keys.size(), RowAccess::kRead, [&](const RowBlock& b) {
    for (size_t i = 0; i < b.n; ++i) {
      EXPECT_NE(b.rows[i], nullptr) << "key " << keys[b.begin + i] << " missing";
      if (b.rows[i] == nullptr) continue;
      out.floats.insert(out.floats.end(), b.rows[i], b.rows[i] + row_floats);
      out.history.insert(out.history.end(), b.history[i], b.history[i] + kRowHistory);
    }
    return Status::OK();
  });
  EXPECT_TRUE(s.ok()) << s.ToString();
  return out;
}

std::string Endpoints(const std::vector<redis::Endpoint>& e) {
  std::string s;
  for (const auto& x : e) s += (s.empty() ? "" : ",") + x.ToString();
  return s;
}

struct Case {
  bool cluster;
  const char* optimizer;
};

class MergeRedisTest : public ::testing::TestWithParam<Case> {};

TEST_P(MergeRedisTest, SameRowsAsTheServersKernelsWithinFloatRounding) {
  const Case c = GetParam();
  std::unique_ptr<RedisServer> node;
  std::unique_ptr<RedisTestCluster> cluster;
  config::RedisStoreConfig rc;
  if (c.cluster) {
    auto cl = RedisTestCluster::Start(3);
    ASSERT_TRUE(cl.ok()) << cl.status().ToString();
    cluster = std::move(*cl);
    rc.cluster = true;
    rc.endpoints = Endpoints(cluster->endpoints());
  } else {
    auto n = RedisServer::Start();
    ASSERT_TRUE(n.ok()) << n.status().ToString();
    node = std::move(*n);
    rc.endpoints = node->endpoint().ToString();
  }
  rc.key_prefix = "merge";
  rc.merge = config::MergeSide::kRedis;
  const config::TableConfig cfg = Table(c.optimizer);
  std::vector<uint64_t> keys(100);
  std::mt19937_64 rng(3);
  for (uint64_t& k : keys) k = rng();

  NativeStore native;
  ASSERT_TRUE(Train(&native, cfg, keys).ok());
  auto redis = RedisStore::Connect(rc);
  ASSERT_TRUE(redis.ok()) << redis.status().ToString();
  ASSERT_TRUE((*redis)->TakeOver(0).ok());
  Status trained = Train(redis->get(), cfg, keys);
  ASSERT_TRUE(trained.ok()) << trained.ToString();
  EXPECT_TRUE((*redis)->applies_merged(0));
  EXPECT_EQ((*redis)->num_rows(0), keys.size());

  const size_t rf = kDim + Updater::Make(cfg.optimizer).value()->state_layout().floats(kDim);
  Rows want = Read(&native, keys, rf);
  Rows got = Read(redis->get(), keys, rf);
  ASSERT_EQ(got.floats.size(), want.floats.size());
  EXPECT_EQ(got.history, want.history);
  size_t differ_bits = 0;
  for (size_t i = 0; i < want.floats.size(); ++i) {
    const float w = want.floats[i];
    EXPECT_NEAR(got.floats[i], w, std::max(1e-7f, 1e-5f * std::fabs(w))) << "float " << i;
    differ_bits += got.floats[i] != w;
  }
  // Rows really changed (not all initial): the comparison would catch a no-op function.
  {
    NativeStore fresh;
    auto u = *Updater::Make(cfg.optimizer);
    StoreTableSpec spec;
    spec.config = cfg;
    spec.state = u->state_layout();
    ASSERT_TRUE(fresh.CreateTable(spec).ok());
    std::vector<float> out(keys.size() * kDim);
    ASSERT_TRUE(fresh.PullRows(0, keys.data(), keys.size(), out.data()).ok());
    EXPECT_NE(std::vector<float>(want.floats.begin(), want.floats.begin() + kDim),
              std::vector<float>(out.begin(), out.begin() + kDim));
  }
  RecordProperty("floats_not_bit_equal", static_cast<int>(differ_bits));

  // A replaced incarnation's apply is refused by the same fencing check.
  auto next = RedisStore::Connect(rc);
  ASSERT_TRUE(next.ok());
  ASSERT_TRUE((*next)->TakeOver(0).ok());
  StoreTableSpec spec;
  spec.config = cfg;
  spec.state = Updater::Make(cfg.optimizer).value()->state_layout();
  ASSERT_TRUE((*next)->CreateTable(spec).ok());
  std::vector<float> g(kDim, 0.5f);
  const float* gp = g.data();
  Status fenced = (*redis)->ApplyMergedRows(0, keys.data(), 1, &gp, 1.0f, 1.0f, 7);
  EXPECT_EQ(fenced.code(), StatusCode::kFailedPrecondition) << fenced.ToString();
  EXPECT_NE(fenced.message().find("FENCED"), std::string::npos) << fenced.ToString();
  EXPECT_EQ(Read(redis->get(), keys, rf).floats, got.floats);  // nothing applied
  EXPECT_TRUE((*next)->ApplyMergedRows(0, keys.data(), 1, &gp, 1.0f, 1.0f, 7).ok());
}

INSTANTIATE_TEST_SUITE_P(Stores, MergeRedisTest,
                         ::testing::Values(Case{false, "sgd"}, Case{false, "adagrad"},
                                           Case{true, "adagrad"}));

TEST(MergeRedisConfigTest, WriteBackOrACacheIsRefused) {
  config::RedisStoreConfig rc;
  rc.endpoints = "127.0.0.1:1";  // never reached: refused before connecting
  rc.merge = config::MergeSide::kRedis;
  rc.write_policy = config::WritePolicy::kWriteBack;
  auto s = RedisStore::Connect(rc);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.status().code(), StatusCode::kInvalidArgument) << s.status().ToString();
  EXPECT_NE(s.status().message().find("write_through"), std::string::npos);
  rc.write_policy = config::WritePolicy::kWriteThrough;
  rc.cache_rows = 10;
  s = RedisStore::Connect(rc);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.status().message().find("cache_rows"), std::string::npos) << s.status().ToString();
}

}  // namespace
}  // namespace osprey::server
