// RedisClient against one real redis-server: pipelined binary-safe SET/GET in order, AUTH,
// Redis down at connect, and an io timeout on a server that stopped answering (SIGSTOP).
#include <gtest/gtest.h>

#include <chrono>
#include <random>

#include "common/redis/redis_client.h"
#include "tests/testing/free_port.h"
#include "tests/testing/redis_fixture.h"

namespace osprey::redis {
namespace {

using ::osprey::testing::RedisServer;

RedisOptions OptionsFor(const RedisServer& s) {
  RedisOptions o;
  o.seeds = {s.endpoint()};
  return o;
}

std::string Blob(std::mt19937* rng, size_t n) {
  std::string b(n, '\0');
  for (char& c : b) c = static_cast<char>((*rng)() & 0xff);
  b[n / 2] = '\0';  // at least one NUL inside every blob
  return b;
}

TEST(RedisSingleNodeTest, PipelinedBinaryBlobsComeBackInOrder) {
  auto server = RedisServer::Start();
  ASSERT_TRUE(server.ok()) << server.status().ToString();
  auto client = RedisClient::Connect(OptionsFor(**server));
  ASSERT_TRUE(client.ok()) << client.status().ToString();
  EXPECT_EQ((*client)->num_masters(), 1u);

  constexpr int kN = 10000;
  std::mt19937 rng(7);
  std::vector<std::string> keys, values;
  std::vector<Command> sets, gets;
  for (int i = 0; i < kN; ++i) {
    keys.push_back(std::string("k\0", 2) + std::to_string(i));  // NUL inside the key too
    values.push_back(Blob(&rng, 1 + rng() % 300));
    sets.push_back({{"SET", keys.back(), values.back()}});
    gets.push_back({{"GET", keys.back()}});
  }
  std::vector<Reply> replies;
  ASSERT_TRUE((*client)->Execute(sets, &replies).ok());
  ASSERT_EQ(replies.size(), static_cast<size_t>(kN));
  for (const Reply& r : replies) ASSERT_EQ(r.type, Reply::Type::kStatus) << r.DebugString();
  ASSERT_TRUE((*client)->Execute(gets, &replies).ok());
  ASSERT_EQ(replies.size(), static_cast<size_t>(kN));
  for (int i = 0; i < kN; ++i) {
    ASSERT_EQ(replies[i].type, Reply::Type::kString) << i;
    ASSERT_EQ(replies[i].str, values[i]) << "reply " << i << " is not the value of key " << i;
  }
}

TEST(RedisSingleNodeTest, MixedBatchKeepsOrderAndReturnsErrorReplies) {
  auto server = RedisServer::Start();
  ASSERT_TRUE(server.ok()) << server.status().ToString();
  auto client = RedisClient::Connect(OptionsFor(**server));
  ASSERT_TRUE(client.ok()) << client.status().ToString();
  std::vector<Reply> r;
  ASSERT_TRUE((*client)
                  ->Execute({{{"SET", "x", "1"}}, {{"GET", "x"}}, {{"INCRBY", "x", "41"}}, {{"GET", "x"}},
                             {{"HSET", "x", "f", "v"}}, {{"GET", "missing"}}, {{"PING"}, -1},
                             {{"RPUSH", "l", "a", "b"}}, {{"LRANGE", "l", "0", "-1"}}},
                            &r)
                  .ok());
  ASSERT_EQ(r.size(), 9u);
  EXPECT_EQ(r[1].str, "1");
  EXPECT_EQ(r[2].integer, 42);
  EXPECT_EQ(r[3].str, "42");
  EXPECT_TRUE(r[4].is_error());  // WRONGTYPE: a reply, not a failed batch
  EXPECT_NE(r[4].str.find("WRONGTYPE"), std::string::npos);
  EXPECT_TRUE(r[5].is_nil());
  EXPECT_EQ(r[6].str, "PONG");
  ASSERT_EQ(r[8].elements.size(), 2u);
  EXPECT_EQ(r[8].elements[1].str, "b");
}

TEST(RedisSingleNodeTest, RejectsBadCommands) {
  auto server = RedisServer::Start();
  ASSERT_TRUE(server.ok()) << server.status().ToString();
  auto client = RedisClient::Connect(OptionsFor(**server));
  ASSERT_TRUE(client.ok());
  std::vector<Reply> r;
  EXPECT_EQ((*client)->Execute({{{}}}, &r).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ((*client)->Execute({{{"GET"}, 1}}, &r).code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE((*client)->Execute({}, &r).ok());
  EXPECT_TRUE(r.empty());
}

TEST(RedisSingleNodeTest, AuthWithPasswordAndAclUser) {
  RedisServer::Options so;
  so.password = "s3cret";
  auto server = RedisServer::Start(so);
  ASSERT_TRUE(server.ok()) << server.status().ToString();
  RedisOptions o = OptionsFor(**server);

  auto anonymous = RedisClient::Connect(o);
  ASSERT_FALSE(anonymous.ok());
  EXPECT_EQ(anonymous.status().code(), StatusCode::kPermissionDenied) << anonymous.status().ToString();
  EXPECT_NE(anonymous.status().message().find("NOAUTH"), std::string::npos);

  o.password = "wrong";
  auto wrong = RedisClient::Connect(o);
  ASSERT_FALSE(wrong.ok());
  EXPECT_EQ(wrong.status().code(), StatusCode::kPermissionDenied) << wrong.status().ToString();
  EXPECT_NE(wrong.status().message().find((*server)->endpoint().ToString()), std::string::npos);
  EXPECT_NE(wrong.status().message().find("WRONGPASS"), std::string::npos);

  o.password = "s3cret";
  auto good = RedisClient::Connect(o);
  ASSERT_TRUE(good.ok()) << good.status().ToString();
  std::vector<Reply> r;
  ASSERT_TRUE((*good)->Execute({{{"ACL", "SETUSER", "alice", "on", ">alicepw", "~*", "+@all"}, -1}}, &r).ok());
  ASSERT_EQ(r[0].str, "OK") << r[0].DebugString();

  o.user = "alice";
  o.password = "alicepw";
  auto alice = RedisClient::Connect(o);
  ASSERT_TRUE(alice.ok()) << alice.status().ToString();
  ASSERT_TRUE((*alice)->Execute({{{"ACL", "WHOAMI"}, -1}}, &r).ok());
  EXPECT_EQ(r[0].str, "alice");
  o.password = "s3cret";  // the default user's password is not alice's
  EXPECT_EQ(RedisClient::Connect(o).status().code(), StatusCode::kPermissionDenied);
}

TEST(RedisSingleNodeTest, RedisDownAtConnectIsUnavailableNamingTheEndpoint) {
  RedisOptions o;
  o.seeds = {{"127.0.0.1", osprey::testing::FreePort()}};  // nothing listens there
  const auto start = std::chrono::steady_clock::now();
  auto client = RedisClient::Connect(o);
  ASSERT_FALSE(client.ok());
  EXPECT_EQ(client.status().code(), StatusCode::kUnavailable);
  EXPECT_NE(client.status().message().find(o.seeds[0].ToString()), std::string::npos)
      << client.status().ToString();
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(5));
}

TEST(RedisSingleNodeTest, StoppedServerGivesDeadlineExceededWithinTheIoTimeout) {
  auto server = RedisServer::Start();
  ASSERT_TRUE(server.ok()) << server.status().ToString();
  RedisOptions o = OptionsFor(**server);
  o.io_timeout_ms = 300;
  auto client = RedisClient::Connect(o);
  ASSERT_TRUE(client.ok()) << client.status().ToString();
  (*server)->Pause();
  std::vector<Reply> r;
  const auto start = std::chrono::steady_clock::now();
  Status st = (*client)->Execute({{{"SET", "k", "v"}}, {{"GET", "k"}}}, &r);
  const auto took = std::chrono::steady_clock::now() - start;
  EXPECT_EQ(st.code(), StatusCode::kDeadlineExceeded) << st.ToString();
  EXPECT_NE(st.message().find((*server)->endpoint().ToString()), std::string::npos) << st.ToString();
  EXPECT_GE(took, std::chrono::milliseconds(250));
  EXPECT_LT(took, std::chrono::seconds(3));
  // Once the server answers again, the client reconnects on the next batch.
  (*server)->Resume();
  ASSERT_TRUE((*client)->Execute({{{"SET", "k", "v2"}}, {{"GET", "k"}}}, &r).ok());
  EXPECT_EQ(r[1].str, "v2");
}

TEST(RedisSingleNodeTest, KilledServerIsUnavailableAfterRetries) {
  auto server = RedisServer::Start();
  ASSERT_TRUE(server.ok()) << server.status().ToString();
  RedisOptions o = OptionsFor(**server);
  o.max_retries = 3;
  o.backoff_ms = 10;
  auto client = RedisClient::Connect(o);
  ASSERT_TRUE(client.ok());
  (*server)->Kill9();
  std::vector<Reply> r;
  const auto start = std::chrono::steady_clock::now();
  Status st = (*client)->Execute({{{"GET", "k"}}}, &r);
  EXPECT_EQ(st.code(), StatusCode::kUnavailable) << st.ToString();
  EXPECT_NE(st.message().find(o.seeds[0].ToString()), std::string::npos) << st.ToString();
  EXPECT_NE(st.message().find("after 3 retries"), std::string::npos) << st.ToString();
  EXPECT_EQ((*client)->counters().retries, 3);
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(5));
}

}  // namespace
}  // namespace osprey::redis
