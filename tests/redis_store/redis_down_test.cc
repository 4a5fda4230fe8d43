// Redis killed mid-run (kill -9 of a real redis-server with appendfsync always): a row the store
// must read fails naming the endpoint; the next write_through Sync of rows it has retries within its timeouts, then fails with Unavailable (or
// DeadlineExceeded) naming the endpoint; the window's rows stay dirty in the store (a retry can
// still write them), and a Redis restarted from the same files holds exactly the windows synced
// before the kill -- nothing of the failed window half-applied.
#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <vector>

#include "server/redis/redis_store.h"
#include "server/updater.h"
#include "tests/testing/redis_fixture.h"

namespace osprey::server {
namespace {

using testing::RedisServer;

constexpr int kDim = 4;

config::RedisStoreConfig Config(const RedisServer& r) {
  config::RedisStoreConfig c;
  c.endpoints = r.endpoint().ToString();
  c.key_prefix = "down";
  c.connect_timeout_ms = 300;
  c.io_timeout_ms = 500;
  c.max_retries = 2;
  c.cache_rows = 1000;  // b's rows are read before the kill, so their window applies in memory
  return c;
}

StoreTableSpec Spec(const Updater& u) {
  StoreTableSpec s;
  s.config.name = "emb";
  s.config.type = config::TableType::kSparse;
  s.config.dim = kDim;
  s.state = u.state_layout();
  return s;
}

TEST(RedisDownTest, KilledMidRunFailsTheSyncNamingTheEndpointAndHalfAppliesNothing) {
  const std::string dir = testing::MakeTempDir("redis-down");
  ASSERT_FALSE(dir.empty());
  RedisServer::Options o;
  o.dir = dir;
  o.extra = {"--appendonly", "yes", "--appendfsync", "always"};
  auto redis = RedisServer::Start(o);
  ASSERT_TRUE(redis.ok()) << redis.status().ToString();
  const std::string endpoint = (*redis)->endpoint().ToString();
  auto u = *Updater::Make(OptimizerConfig{});
  auto store = RedisStore::Connect(Config(**redis));
  ASSERT_TRUE(store.ok()) << store.status().ToString();
  ASSERT_TRUE((*store)->TakeOver(0).ok());
  ASSERT_TRUE((*store)->CreateTable(Spec(*u)).ok());
  std::vector<uint64_t> a, b;
  for (uint64_t k = 1; k <= 40; ++k) (k <= 20 ? a : b).push_back(k * 7919);
  std::vector<float> g(20 * kDim, 0.25f);
  ASSERT_TRUE(u->ApplyRows(store->get(), 0, a.data(), a.size(), kDim, g.data(), RowUpdate{}).ok());
  ASSERT_TRUE((*store)->Sync(0).ok());
  std::vector<float> a_rows(a.size() * kDim);
  ASSERT_TRUE((*store)->PullRows(0, a.data(), a.size(), a_rows.data()).ok());

  std::vector<float> b_rows(b.size() * kDim);
  ASSERT_TRUE((*store)->PullRows(0, b.data(), b.size(), b_rows.data()).ok());

  (*redis)->Kill9();
  // A row the store must read from Redis: the apply fails naming the endpoint.
  const uint64_t uncached = 1;
  Status read = u->ApplyRows(store->get(), 0, &uncached, 1, kDim, g.data(), RowUpdate{});
  EXPECT_FALSE(read.ok());
  EXPECT_NE(read.message().find(endpoint), std::string::npos) << read.ToString();
  ASSERT_TRUE(u->ApplyRows(store->get(), 0, b.data(), b.size(), kDim, g.data(), RowUpdate{}).ok());
  const auto t0 = std::chrono::steady_clock::now();
  Status s = (*store)->Sync(0);
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_TRUE(s.code() == StatusCode::kUnavailable || s.code() == StatusCode::kDeadlineExceeded)
      << s.ToString();
  EXPECT_NE(s.message().find(endpoint), std::string::npos) << s.ToString();
  EXPECT_LT(secs, 10.0) << "retries past their timeouts";
  EXPECT_EQ((*store)->unflushed_rows(), b.size()) << "the failed window's rows were dropped";

  // Restarted from the same append-only file: the synced window, and nothing of the failed one.
  auto again = RedisServer::Start(o);
  ASSERT_TRUE(again.ok()) << again.status().ToString();
  auto next = RedisStore::Connect(Config(**again));
  ASSERT_TRUE(next.ok()) << next.status().ToString();
  ASSERT_TRUE((*next)->TakeOver(0).ok());
  ASSERT_TRUE((*next)->CreateTable(Spec(*u)).ok());
  EXPECT_EQ((*next)->num_rows(0), a.size());
  std::vector<float> got(a.size() * kDim);
  ASSERT_TRUE((*next)->PullRows(0, a.data(), a.size(), got.data()).ok());
  EXPECT_EQ(got, a_rows);
  size_t present = 0;
  ASSERT_TRUE((*next)->VisitRows(0, b.data(), b.size(), RowAccess::kRead, [&](const RowBlock& rb) {
    for (size_t i = 0; i < rb.n; ++i) present += rb.rows[i] != nullptr;
    return Status::OK();
  }).ok());
  EXPECT_EQ(present, 0u);
  store->reset();  // its stop flush fails (that Redis is gone) and logs what it could not write
  again->reset();
  std::error_code ec;
  std::filesystem::remove_all(dir, ec);
}

}  // namespace
}  // namespace osprey::server
