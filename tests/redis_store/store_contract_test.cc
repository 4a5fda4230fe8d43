// The Redis store against real redis-server processes (tests/testing/redis_fixture.h): the same
// pushes applied to NativeStore and to RedisStore (one node and a 3-master cluster, with and
// without a hot-row cache, write_through and write_back) give the same rows, optimizer state and
// history bit for bit; a new store on the same Redis reads them back; a replaced incarnation's
// writes are refused; a mismatched table spec, a Redis that is down and a wrong password are
// refused with errors naming what is wrong; a scale step's moved rows change owner in Redis.
#include <gtest/gtest.h>

#include <cstring>
#include <map>
#include <random>
#include <vector>

#include "server/native_store.h"
#include "server/redis/redis_store.h"
#include "server/updater.h"
#include "tests/testing/redis_fixture.h"
#include "tests/testing/wait.h"

namespace osprey::server {
namespace {

using testing::RedisServer;
using testing::RedisTestCluster;

config::TableConfig Sparse(int dim, const std::string& opt) {
  config::TableConfig c;
  c.name = "emb";
  c.type = config::TableType::kSparse;
  c.dim = dim;
  c.optimizer.type = *ParseOptimizerType(opt);
  c.optimizer.lr = 0.05f;
  return c;
}

config::TableConfig Dense(uint64_t size) {
  config::TableConfig c;
  c.name = "dense";
  c.type = config::TableType::kDense;
  c.size = size;
  c.chunk_floats = 100;
  c.optimizer.type = config::OptimizerType::kAdagrad;
  c.optimizer.lr = 0.05f;
  return c;
}

std::string EndpointsOf(const std::vector<redis::Endpoint>& e) {
  std::string s;
  for (const auto& x : e) s += (s.empty() ? "" : ",") + x.ToString();
  return s;
}

// Redis for one test: a single node or a 3-master cluster.
struct Backend {
  std::unique_ptr<RedisServer> node;
  std::unique_ptr<RedisTestCluster> cluster;
  config::RedisStoreConfig Config() const {
    config::RedisStoreConfig c;
    c.cluster = cluster != nullptr;
    c.endpoints = cluster ? EndpointsOf(cluster->endpoints()) : node->endpoint().ToString();
    c.key_prefix = "test";
    return c;
  }
};

Backend StartBackend(bool cluster) {
  Backend b;
  if (cluster) {
    auto c = RedisTestCluster::Start(3);
    EXPECT_TRUE(c.ok()) << c.status().ToString();
    if (c.ok()) b.cluster = std::move(*c);
  } else {
    auto n = RedisServer::Start();
    EXPECT_TRUE(n.ok()) << n.status().ToString();
    if (n.ok()) b.node = std::move(*n);
  }
  return b;
}

std::unique_ptr<RedisStore> Open(const config::RedisStoreConfig& c, int rank = 0) {
  auto s = RedisStore::Connect(c);
  EXPECT_TRUE(s.ok()) << s.status().ToString();
  if (!s.ok()) return nullptr;
  Status t = (*s)->TakeOver(rank);
  EXPECT_TRUE(t.ok()) << t.ToString();
  return std::move(*s);
}

StoreTableSpec Spec(uint32_t id, const config::TableConfig& c, const Updater& u) {
  StoreTableSpec s;
  s.id = id;
  s.config = c;
  s.state = u.state_layout();
  for (uint64_t ch = 0; c.type == config::TableType::kDense && ch * c.chunk_floats < c.size; ++ch) {
    s.owned_chunks.push_back(ch);
  }
  return s;
}

// Every record (weights, state) and history of `keys` in `store`, as bytes.
std::vector<char> Snapshot(Store* store, uint32_t t, const std::vector<uint64_t>& keys,
                           size_t row_floats) {
  std::vector<char> out;
  Status s = store->VisitRows(t, keys.data(), keys.size(), RowAccess::kRead, [&](const RowBlock& b) {
    for (size_t i = 0; i < b.n; ++i) {
      EXPECT_NE(b.rows[i], nullptr) << "row of key " << keys[b.begin + i] << " missing";
      if (b.rows[i] == nullptr) continue;
      const char* r = reinterpret_cast<const char*>(b.rows[i]);
      const char* h = reinterpret_cast<const char*>(b.history[i]);
      out.insert(out.end(), r, r + row_floats * sizeof(float));
      out.insert(out.end(), h, h + kRowHistory * sizeof(uint64_t));
    }
    return Status::OK();
  });
  EXPECT_TRUE(s.ok()) << s.ToString();
  return out;
}

// Every exported record (checkpoint view), by (key, record).
std::map<uint64_t, std::vector<float>> Export(const Store& store, uint32_t t) {
  std::map<uint64_t, std::vector<float>> out;
  Status s = store.ExportRecords(t, [&](uint64_t key, const float* d, size_t n) {
    EXPECT_EQ(out.count(key), 0u) << "key " << key << " exported twice";
    out[key].assign(d, d + n);
    return Status::OK();
  });
  EXPECT_TRUE(s.ok()) << s.ToString();
  return out;
}

std::vector<float> Chunks(Store* store, uint32_t t, size_t n) {
  std::vector<uint64_t> ids(n);
  for (size_t i = 0; i < n; ++i) ids[i] = i;
  std::vector<float> out(store->ChunkFloats(t, 0) * n + 100);
  EXPECT_TRUE(store->PullChunks(t, ids.data(), n, out.data()).ok());
  return out;
}

struct Case {
  bool cluster;
  std::string optimizer;
  uint64_t cache_rows;
  config::WritePolicy policy;
};

class StoreContractTest : public ::testing::TestWithParam<Case> {};

TEST_P(StoreContractTest, SamePushesSameRowsBitForBitAndReadBackAfterRestart) {
  const Case& p = GetParam();
  Backend be = StartBackend(p.cluster);
  config::RedisStoreConfig rc = be.Config();
  rc.cache_rows = p.cache_rows;
  rc.write_policy = p.policy;
  rc.flush_interval_ms = 20;
  const int kDim = 8;
  config::TableConfig sc = Sparse(kDim, p.optimizer);
  config::TableConfig dc = Dense(350);
  auto su = *Updater::Make(sc.optimizer);
  auto du = *Updater::Make(dc.optimizer);
  NativeStore native;
  std::unique_ptr<RedisStore> redis = Open(rc);
  ASSERT_NE(redis, nullptr);
  for (Store* s : std::vector<Store*>{&native, redis.get()}) {
    ASSERT_TRUE(s->CreateTable(Spec(0, sc, *su)).ok());
    ASSERT_TRUE(s->CreateTable(Spec(1, dc, *du)).ok());
  }
  std::vector<uint64_t> chunks = {0, 1, 2, 3};
  std::vector<float> init(350, 0.5f);
  std::mt19937_64 rng(11);
  std::vector<uint64_t> all;
  for (int round = 0; round < 6; ++round) {
    std::vector<uint64_t> keys(300);
    for (auto& k : keys) k = rng() % 500;  // duplicates within and across rounds
    keys[0] = keys[1];
    std::vector<float> g(keys.size() * kDim);
    for (auto& x : g) x = static_cast<float>(static_cast<int64_t>(rng() % 2001) - 1000) / 1000.0f;
    std::vector<float> dg(350);
    for (auto& x : dg) x = static_cast<float>(rng() % 100) / 100.0f;
    RowUpdate u;
    u.version = static_cast<uint64_t>(round + 1);
    for (Store* s : std::vector<Store*>{&native, redis.get()}) {
      ASSERT_TRUE(s->InitChunks(1, chunks.data(), chunks.size(), init.data()).ok());
      ASSERT_TRUE(su->ApplyRows(s, 0, keys.data(), keys.size(), kDim, g.data(), u).ok());
      ASSERT_TRUE(du->ApplyChunks(s, 1, chunks.data(), chunks.size(), dg.data(), ApplyOptions{}).ok());
      Status st = s->Sync(0);
      ASSERT_TRUE(st.ok()) << st.ToString();
      ASSERT_TRUE(s->Sync(1).ok());
    }
    all.insert(all.end(), keys.begin(), keys.end());
  }
  std::sort(all.begin(), all.end());
  all.erase(std::unique(all.begin(), all.end()), all.end());
  const size_t rf = native.RecordFloats(0, 0);
  std::vector<char> want = Snapshot(&native, 0, all, rf);
  EXPECT_EQ(Snapshot(redis.get(), 0, all, rf), want);
  EXPECT_EQ(Chunks(redis.get(), 1, 4), Chunks(&native, 1, 4));
  if (p.policy == config::WritePolicy::kWriteBack) {
    ASSERT_TRUE(testing::WaitUntil([&] { return redis->unflushed_rows() == 0; },
                                   std::chrono::seconds(10)));
  }
  EXPECT_EQ(redis->num_rows(0), all.size());
  // A new server of the same rank on the same Redis reads every row back.
  std::unique_ptr<RedisStore> next = Open(rc);
  ASSERT_NE(next, nullptr);
  ASSERT_TRUE(next->CreateTable(Spec(0, sc, *su)).ok());
  ASSERT_TRUE(next->CreateTable(Spec(1, dc, *du)).ok());
  EXPECT_EQ(Snapshot(next.get(), 0, all, rf), want);
  EXPECT_EQ(Chunks(next.get(), 1, 4), Chunks(&native, 1, 4));
  EXPECT_EQ(next->num_rows(0), all.size());
  // Checkpoints: the same records exported (rows read back from Redis, chunks from memory).
  EXPECT_EQ(Export(*next, 0), Export(native, 0));
  EXPECT_EQ(Export(*next, 1), Export(native, 1));
  // The replaced incarnation's writes are refused; the successor's are not.
  std::vector<uint64_t> one = {all[0]};
  std::vector<float> g1(kDim, 1.0f);
  ASSERT_TRUE(su->ApplyRows(redis.get(), 0, one.data(), 1, kDim, g1.data(), RowUpdate{}).ok());
  Status fenced = redis->FlushAll();
  EXPECT_EQ(fenced.code(), StatusCode::kFailedPrecondition) << fenced.ToString();
  EXPECT_NE(fenced.message().find("FENCED"), std::string::npos) << fenced.ToString();
  ASSERT_TRUE(su->ApplyRows(next.get(), 0, one.data(), 1, kDim, g1.data(), RowUpdate{}).ok());
  EXPECT_TRUE(next->FlushAll().ok());
}

INSTANTIATE_TEST_SUITE_P(
    Stores, StoreContractTest,
    ::testing::Values(Case{false, "sgd", 0, config::WritePolicy::kWriteThrough},
                      Case{false, "adagrad", 0, config::WritePolicy::kWriteThrough},
                      Case{false, "adagrad", 50, config::WritePolicy::kWriteThrough},
                      Case{false, "adam", 1000, config::WritePolicy::kWriteBack},
                      Case{false, "adagrad", 50, config::WritePolicy::kWriteBack},
                      Case{true, "adagrad", 0, config::WritePolicy::kWriteThrough},
                      Case{true, "sgd", 50, config::WritePolicy::kWriteBack}));

TEST(RedisStoreTest, AnotherTableSpecIsRefusedNamingBoth) {
  Backend be = StartBackend(false);
  auto u = *Updater::Make(Sparse(8, "sgd").optimizer);
  std::unique_ptr<RedisStore> a = Open(be.Config());
  ASSERT_TRUE(a->CreateTable(Spec(0, Sparse(8, "sgd"), *u)).ok());
  std::unique_ptr<RedisStore> b = Open(be.Config());
  Status s = b->CreateTable(Spec(0, Sparse(16, "sgd"), *u));
  EXPECT_EQ(s.code(), StatusCode::kFailedPrecondition) << s.ToString();
  EXPECT_NE(s.message().find("dim=8"), std::string::npos) << s.ToString();
  EXPECT_NE(s.message().find("dim=16"), std::string::npos) << s.ToString();
}

TEST(RedisStoreTest, WriteBackLossIsBoundedAndCounted) {
  Backend be = StartBackend(false);
  config::RedisStoreConfig rc = be.Config();
  rc.write_policy = config::WritePolicy::kWriteBack;
  rc.flush_interval_ms = 3600000;  // never within this test: what a crash now would lose
  auto u = *Updater::Make(Sparse(4, "sgd").optimizer);
  std::unique_ptr<RedisStore> a = Open(rc);
  ASSERT_TRUE(a->CreateTable(Spec(0, Sparse(4, "sgd"), *u)).ok());
  std::vector<uint64_t> keys = {1, 2, 3};
  std::vector<float> g(12, 1.0f);
  ASSERT_TRUE(u->ApplyRows(a.get(), 0, keys.data(), 3, 4, g.data(), RowUpdate{}).ok());
  ASSERT_TRUE(a->Sync(0).ok());  // write_back: schedules only
  EXPECT_EQ(a->unflushed_rows(), 3u);
  rc.write_policy = config::WritePolicy::kWriteThrough;
  std::unique_ptr<RedisStore> b = Open(rc, /*rank=*/0);
  ASSERT_TRUE(b->CreateTable(Spec(0, Sparse(4, "sgd"), *u)).ok());
  EXPECT_EQ(b->num_rows(0), 0u);  // the 3 unflushed rows are what was lost
}

// cache_bytes sizes each sparse table's cache by memory: a budget of 100 rows' worth keeps about
// 100 rows however many pass through (eviction runs in batches once 1/8 over, at least 64 rows).
TEST(RedisStoreTest, CacheBytesBoundsTheCachedRows) {
  Backend be = StartBackend(false);
  config::RedisStoreConfig rc = be.Config();
  auto u = *Updater::Make(Sparse(16, "adagrad").optimizer);
  const size_t row_floats = 16 + 16;  // adagrad: weights and accumulator
  rc.cache_bytes = 100 * redis_store::RowCache::BytesPerRow(row_floats);
  std::unique_ptr<RedisStore> a = Open(rc);
  ASSERT_TRUE(a->CreateTable(Spec(0, Sparse(16, "adagrad"), *u)).ok());
  EXPECT_EQ(a->cache_capacity(0), 100u);
  std::vector<float> g(16 * 100, 0.5f);
  for (uint64_t round = 0; round < 10; ++round) {
    std::vector<uint64_t> keys(100);
    for (uint64_t i = 0; i < 100; ++i) keys[i] = round * 100 + i;
    ASSERT_TRUE(u->ApplyRows(a.get(), 0, keys.data(), keys.size(), 16, g.data(), RowUpdate{}).ok());
    ASSERT_TRUE(a->Sync(0).ok());
    EXPECT_LE(a->cached_rows(0), 100u + 100u + 64u) << "round " << round;
  }
  EXPECT_EQ(a->num_rows(0), 1000u);
  EXPECT_GE(a->cached_rows(0), 1u);
}

// Row ids (merge windows apply by id): while ids are out, a cache of 20 rows evicts nothing even
// as a pull of 300 other keys takes it far over capacity, so every id still names its own key's
// row and the rows equal the native store's bit for bit; once released, the cache is trimmed.
TEST(RedisStoreTest, RowIdsStayValidUntilReleased) {
  Backend be = StartBackend(false);
  config::RedisStoreConfig rc = be.Config();
  rc.cache_rows = 20;
  const int kDim = 4;
  config::TableConfig sc = Sparse(kDim, "adagrad");
  auto su = *Updater::Make(sc.optimizer);
  NativeStore native;
  std::unique_ptr<RedisStore> redis = Open(rc);
  ASSERT_NE(redis, nullptr);
  for (Store* s : std::vector<Store*>{&native, redis.get()}) {
    ASSERT_TRUE(s->CreateTable(Spec(0, sc, *su)).ok());
  }
  ASSERT_TRUE(redis->has_row_ids(0));
  std::vector<uint64_t> keys(100), others(300);
  for (size_t i = 0; i < keys.size(); ++i) keys[i] = 1000 + 7 * i;
  for (size_t i = 0; i < others.size(); ++i) others[i] = 90000 + i;
  std::vector<float> g(keys.size() * kDim);
  for (size_t i = 0; i < g.size(); ++i) g[i] = 0.01f * static_cast<float>(i % 37) - 0.1f;
  std::vector<const float*> gp(keys.size());
  for (size_t i = 0; i < keys.size(); ++i) gp[i] = g.data() + i * kDim;
  RowUpdate u;
  u.version = 1;
  std::vector<std::vector<float>> pulled;
  for (Store* s : std::vector<Store*>{&native, redis.get()}) {
    std::vector<uint32_t> ids(keys.size());
    ASSERT_TRUE(s->FindOrCreateRowIds(0, keys.data(), keys.size(), ids.data()).ok());
    std::vector<float>& out = pulled.emplace_back(others.size() * kDim);
    ASSERT_TRUE(s->PullRows(0, others.data(), others.size(), out.data()).ok());
    if (s == redis.get()) {
      EXPECT_EQ(redis->cached_rows(0), 400u) << "rows evicted while ids were out";
    }
    Status st = su->ApplyRowsById(s, 0, ids.data(), ids.size(), kDim, gp.data(), u);
    ASSERT_TRUE(st.ok()) << st.ToString();
    s->ReleaseRowIds(0);
    ASSERT_TRUE(s->Sync(0).ok());
  }
  EXPECT_LE(redis->cached_rows(0), 20u) << "the cache was not trimmed after the release";
  const size_t rf = native.RecordFloats(0, 0);
  EXPECT_EQ(Snapshot(redis.get(), 0, keys, rf), Snapshot(&native, 0, keys, rf));
  EXPECT_EQ(pulled[1], pulled[0]);
}

// A scale step's part of the store (osprey scale; the whole step: scale_process_test): rows moved
// from rank 0 to rank 1 -- imported there, erased here -- are in Redis under rank 1 only, with
// the same records; more than kRowsPerCall rows a bucket are written and deleted in pieces; a
// replaced incarnation cannot erase; a dense chunk given up is never written by its old owner.
TEST(RedisStoreTest, MovedRowsLeaveTheOldOwnerForTheNew) {
  Backend be = StartBackend(false);
  auto u = *Updater::Make(Sparse(4, "sgd").optimizer);
  std::unique_ptr<RedisStore> a = Open(be.Config(), 0), b = Open(be.Config(), 1);
  ASSERT_TRUE(a->CreateTable(Spec(0, Sparse(4, "sgd"), *u)).ok());
  ASSERT_TRUE(b->CreateTable(Spec(0, Sparse(4, "sgd"), *u)).ok());
  const size_t n = 64 * redis_store::kRowsPerCall + 20000;  // buckets over kRowsPerCall rows
  std::vector<uint64_t> keys(n), moved;
  for (uint64_t i = 0; i < n; ++i) keys[i] = i * 7919;
  std::vector<float> g(4 * n, 0.25f);
  ASSERT_TRUE(u->ApplyRows(a.get(), 0, keys.data(), n, 4, g.data(), RowUpdate{}).ok());
  ASSERT_TRUE(a->Sync(0).ok());
  ASSERT_EQ(a->num_rows(0), n);
  const std::map<uint64_t, std::vector<float>> before = Export(*a, 0);
  // ExportKeys (what a scale step scans: HKEYS, no row data) visits exactly the exported keys.
  std::map<uint64_t, int> seen;
  ASSERT_TRUE(a->ExportKeys(0, [&](uint64_t key) {
    ++seen[key];
    return Status::OK();
  }).ok());
  ASSERT_EQ(seen.size(), before.size());
  for (const auto& [key, count] : seen) {
    EXPECT_EQ(count, 1) << "key " << key;
    EXPECT_EQ(before.count(key), 1u) << "key " << key;
  }
  for (const auto& [key, rec] : before) {
    if (key % 2 == 0) continue;
    moved.push_back(key);
    ASSERT_TRUE(b->ImportRecord(0, key, rec.data(), rec.size()).ok());
  }
  ASSERT_TRUE(b->Sync(0).ok());
  size_t erased = 0;
  ASSERT_TRUE(a->EraseRows(0, moved.data(), moved.size(), &erased).ok());
  EXPECT_EQ(erased, moved.size());
  EXPECT_EQ(a->num_rows(0), n - moved.size());
  // Read back by new incarnations of both ranks: each key under exactly one, its record intact.
  std::unique_ptr<RedisStore> a2 = Open(be.Config(), 0), b2 = Open(be.Config(), 1);
  ASSERT_TRUE(a2->CreateTable(Spec(0, Sparse(4, "sgd"), *u)).ok());
  ASSERT_TRUE(b2->CreateTable(Spec(0, Sparse(4, "sgd"), *u)).ok());
  const auto kept = Export(*a2, 0), gained = Export(*b2, 0);
  EXPECT_EQ(kept.size(), n - moved.size());
  EXPECT_EQ(gained.size(), moved.size());
  for (const auto& [key, rec] : before) {
    const auto& where = key % 2 == 0 ? kept : gained;
    auto it = where.find(key);
    ASSERT_NE(it, where.end()) << "key " << key << " lost";
    EXPECT_EQ(it->second, rec) << "key " << key;
    EXPECT_EQ((key % 2 == 0 ? gained : kept).count(key), 0u) << "key " << key << " under both ranks";
  }
  // The replaced rank-0 store is fenced off: it cannot erase its successor's rows.
  const uint64_t one = keys[0];
  Status fenced = a->EraseRows(0, &one, 1, nullptr);
  EXPECT_EQ(fenced.code(), StatusCode::kFailedPrecondition) << fenced.ToString();

  // Dense: chunk 3 written here, then given up before the flush: never written by this store.
  auto du = *Updater::Make(Dense(1000).optimizer);
  std::unique_ptr<RedisStore> d = Open(be.Config(), 0);
  ASSERT_TRUE(d->CreateTable(Spec(1, Dense(1000), *du)).ok());
  std::vector<uint64_t> chunks = {2, 3};
  std::vector<float> init(200, 1.5f);
  ASSERT_TRUE(d->InitChunks(1, chunks.data(), 2, init.data()).ok());
  ASSERT_TRUE(d->SetOwnedChunks(1, {0, 1, 2}).ok());
  ASSERT_TRUE(d->Sync(1).ok());
  std::vector<float> out(100);
  EXPECT_FALSE(d->PullChunks(1, &chunks[1], 1, out.data()).ok()) << "chunk 3 is not owned any more";
  std::unique_ptr<RedisStore> e = Open(be.Config(), 1);
  ASSERT_TRUE(e->CreateTable(Spec(1, Dense(1000), *du)).ok()) << "chunk 3 was written after it was given up";
  ASSERT_TRUE(e->PullChunks(1, &chunks[0], 1, out.data()).ok());
  EXPECT_EQ(out[0], 1.5f) << "chunk 2, kept and flushed";
}

TEST(RedisStoreTest, RedisDownAtStartNamesTheEndpoint) {
  config::RedisStoreConfig rc;
  int port = testing::FreePort();
  rc.endpoints = "127.0.0.1:" + std::to_string(port);
  rc.connect_timeout_ms = 500;
  rc.max_retries = 1;
  auto s = RedisStore::Connect(rc);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.status().code(), StatusCode::kUnavailable) << s.status().ToString();
  EXPECT_NE(s.status().message().find(rc.endpoints), std::string::npos) << s.status().ToString();
}

TEST(RedisStoreTest, WrongPasswordIsRefused) {
  RedisServer::Options o;
  o.password = "right-secret";
  auto node = RedisServer::Start(o);
  ASSERT_TRUE(node.ok()) << node.status().ToString();
  config::RedisStoreConfig rc;
  rc.endpoints = (*node)->endpoint().ToString();
  rc.password = "wrong-secret";
  auto s = RedisStore::Connect(rc);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.status().code(), StatusCode::kPermissionDenied) << s.status().ToString();
  rc.password = "right-secret";
  EXPECT_TRUE(RedisStore::Connect(rc).ok());
}

}  // namespace
}  // namespace osprey::server
