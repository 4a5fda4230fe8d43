// The `store` section: defaults, every setting read, and each bad value refused naming the key.
#include "common/config/store_config.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>

#include "job/job_config.h"
#include "tests/config/minimal_job.h"

namespace osprey::config {
namespace {

StatusOr<JobConfig> Parse(const std::string& store, std::vector<std::string> overrides = {}) {
  return ParseJobConfig(std::string(kMinimalJobYaml) + store, "test.yaml", overrides);
}

void ExpectError(const std::string& store, const std::string& fragment,
                 std::vector<std::string> overrides = {}) {
  auto job = Parse(store, overrides);
  ASSERT_FALSE(job.ok()) << "expected an error containing: " << fragment;
  EXPECT_EQ(job.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(job.status().message().find(fragment), std::string::npos)
      << "message was: " << job.status().message();
}

TEST(StoreConfigTest, NativeByDefault) {
  auto job = Parse("");
  ASSERT_TRUE(job.ok()) << job.status().ToString();
  EXPECT_EQ(job->store.type, StoreType::kNative);
  EXPECT_EQ(StoreName(job->store), "native");
}

TEST(StoreConfigTest, ReadsEveryRedisSetting) {
  auto job = Parse(R"(
store:
  type: redis
  redis:
    endpoints: 10.0.0.1:7000,10.0.0.2:7000
    cluster: true
    key_prefix: jobA
    write_policy: write_back
    flush_interval_ms: 250
    cache_rows: 5000
    cache_policy: lfu
    user: osprey
    password: s3cret
    connect_timeout_ms: 100
    io_timeout_ms: 200
    max_retries: 3
    merge: server
    local: cluster
)");
  ASSERT_TRUE(job.ok()) << job.status().ToString();
  const RedisStoreConfig& r = job->store.redis;
  EXPECT_EQ(job->store.type, StoreType::kRedis);
  EXPECT_EQ(r.endpoints, "10.0.0.1:7000,10.0.0.2:7000");
  EXPECT_TRUE(r.cluster);
  EXPECT_EQ(r.key_prefix, "jobA");
  EXPECT_EQ(r.write_policy, WritePolicy::kWriteBack);
  EXPECT_EQ(r.flush_interval_ms, 250);
  EXPECT_EQ(r.cache_rows, 5000u);
  EXPECT_EQ(r.cache_policy, CachePolicy::kLfu);
  EXPECT_EQ(r.user, "osprey");
  EXPECT_EQ(r.password, "s3cret");
  EXPECT_EQ(r.connect_timeout_ms, 100);
  EXPECT_EQ(r.io_timeout_ms, 200);
  EXPECT_EQ(r.max_retries, 3);
  EXPECT_EQ(r.local, LocalRedis::kCluster);
  EXPECT_EQ(StoreName(job->store), "redis-cluster");
}

TEST(StoreConfigTest, BadValuesNameTheKey) {
  ExpectError("store:\n  type: mongo\n", "store.type");
  ExpectError("store:\n  type: redis\n  redis:\n    write_policy: sometimes\n",
              "store.redis.write_policy");
  ExpectError("store:\n  type: redis\n  redis:\n    flush_interval_ms: 0\n",
              "store.redis.flush_interval_ms");
  ExpectError("store:\n  type: redis\n  redis:\n    key_prefix: 'a{b'\n", "store.redis.key_prefix");
  ExpectError("store:\n  type: redis\n  redis:\n    key_prefix: ''\n", "store.redis.key_prefix");
  ExpectError("store:\n  type: redis\n  redis:\n    local: cluster\n", "store.redis.cluster");
  ExpectError("store:\n  type: redis\n  redis:\n    password: a\n    password_file: /x\n",
              "store.redis.password_file");
  ExpectError("store:\n  type: redis\n  redis:\n    cache_policy: fifo\n", "store.redis.cache_policy");
  ExpectError("store:\n  type: redis\n  redis:\n    cache_rows: 10\n    cache_bytes: 1000000\n",
              "store.redis.cache_bytes");
  auto bytes = Parse("store:\n  type: redis\n  redis:\n    cache_bytes: 1000000\n");
  ASSERT_TRUE(bytes.ok()) << bytes.status().ToString();
  EXPECT_EQ(bytes->store.redis.cache_bytes, 1000000u);
  ExpectError("store:\n  type: redis\n  redis:\n    frobnicate: 1\n", "store.redis.frobnicate");
}

TEST(StoreConfigTest, MergeOnRedisOnlyForSgdAndAdagrad) {
  ExpectError("store:\n  type: redis\n  redis:\n    merge: redis\n",
              "store.redis.merge: redis applies only sgd and adagrad",
              {"tables.0.optimizer.type=adam"});
  EXPECT_TRUE(Parse("store:\n  type: redis\n  redis:\n    merge: redis\n",
                    {"tables.0.optimizer.type=adagrad", "tables.1.optimizer.type=sgd"})
                  .ok());
}

TEST(StoreConfigTest, PasswordFileIsRead) {
  const std::string path = ::testing::TempDir() + "/redis-pass-" + std::to_string(getpid());
  {
    std::ofstream f(path);
    f << "from-file\n";
  }
  auto job = Parse("store:\n  type: redis\n  redis:\n    password_file: " + path + "\n");
  ASSERT_TRUE(job.ok()) << job.status().ToString();
  EXPECT_EQ(job->store.redis.password, "from-file");
  std::remove(path.c_str());
  ExpectError("store:\n  type: redis\n  redis:\n    password_file: " + path + "\n",
              "store.redis.password_file: cannot read");
}

}  // namespace
}  // namespace osprey::config
