// RedisClient against a real 3-master Redis Cluster (tests/testing/redis_fixture.h): routing and
// reply order, MOVED after a slot moved, ASK while a slot migrates, a master killed with kill -9,
// and FUNCTION LOAD on every master then FCALL routed by key.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <thread>

#include "common/redis/redis_client.h"
#include "tests/testing/free_port.h"
#include "tests/testing/launch_util.h"
#include "tests/testing/redis_fixture.h"
#include "tests/testing/wait.h"

namespace osprey::redis {
namespace {

using ::osprey::testing::RedisServer;
using ::osprey::testing::RedisTestCluster;

std::unique_ptr<RedisTestCluster> StartCluster() {
  auto c = RedisTestCluster::Start();
  EXPECT_TRUE(c.ok()) << c.status().ToString();
  return c.ok() ? std::move(c).value() : nullptr;
}

std::unique_ptr<RedisClient> ConnectTo(RedisTestCluster& c, std::vector<Endpoint> seeds = {}) {
  RedisOptions o;
  o.cluster = true;
  o.seeds = seeds.empty() ? c.endpoints() : seeds;
  o.max_retries = 3;
  o.backoff_ms = 20;
  auto client = RedisClient::Connect(o);
  EXPECT_TRUE(client.ok()) << client.status().ToString();
  return client.ok() ? std::move(client).value() : nullptr;
}

// SET key i -> "v<i><suffix>" for every key; every reply OK.
void SetAll(RedisClient& client, const std::vector<std::string>& keys, const std::string& suffix) {
  std::vector<Command> cmds;
  for (size_t i = 0; i < keys.size(); ++i) cmds.push_back({{"SET", keys[i], "v" + std::to_string(i) + suffix}});
  std::vector<Reply> r;
  Status st = client.Execute(cmds, &r);
  ASSERT_TRUE(st.ok()) << st.ToString();
  for (size_t i = 0; i < r.size(); ++i) ASSERT_EQ(r[i].str, "OK") << keys[i] << ": " << r[i].DebugString();
}

// GET every key; each must be "v<i><suffix>".
void ExpectAll(RedisClient& client, const std::vector<std::string>& keys, const std::string& suffix) {
  std::vector<Command> cmds;
  for (const std::string& k : keys) cmds.push_back({{"GET", k}});
  std::vector<Reply> r;
  Status st = client.Execute(cmds, &r);
  ASSERT_TRUE(st.ok()) << st.ToString();
  ASSERT_EQ(r.size(), keys.size());
  for (size_t i = 0; i < r.size(); ++i) {
    ASSERT_EQ(r[i].str, "v" + std::to_string(i) + suffix) << keys[i] << ": " << r[i].DebugString();
  }
}

std::vector<std::string> Keys(const std::string& prefix, int n) {
  std::vector<std::string> keys;
  for (int i = 0; i < n; ++i) keys.push_back(prefix + std::to_string(i));
  return keys;
}

size_t NodeIndexOnPort(RedisTestCluster& c, int port) {
  for (size_t i = 0; i < c.size(); ++i) {
    if (c.node(i).port() == port) return i;
  }
  return c.size();
}

// The start of a slot migration, as redis-cli --cluster reshard does it: IMPORTING on the
// target, MIGRATING on the source.
void BeginMigration(RedisTestCluster& c, int slot, size_t from, size_t to) {
  ASSERT_EQ(c.node(to).Call({"CLUSTER", "SETSLOT", std::to_string(slot), "IMPORTING", c.NodeId(from)}).str, "OK");
  ASSERT_EQ(c.node(from).Call({"CLUSTER", "SETSLOT", std::to_string(slot), "MIGRATING", c.NodeId(to)}).str, "OK");
}

void MigrateKeys(RedisTestCluster& c, size_t from, size_t to, const std::vector<std::string>& keys) {
  std::vector<std::string> args = {"MIGRATE", "127.0.0.1", std::to_string(c.node(to).port()), "", "0", "5000", "KEYS"};
  args.insert(args.end(), keys.begin(), keys.end());
  Reply r = c.node(from).Call(args);
  ASSERT_EQ(r.str, "OK") << r.DebugString();
}

// Moves what is left of the slot and gives it to `to` on every node.
void FinishMigration(RedisTestCluster& c, int slot, size_t from, size_t to) {
  Reply left = c.node(from).Call({"CLUSTER", "GETKEYSINSLOT", std::to_string(slot), "100000"});
  std::vector<std::string> keys;
  for (const Reply& k : left.elements) keys.push_back(k.str);
  if (!keys.empty()) MigrateKeys(c, from, to, keys);
  for (size_t i = 0; i < c.size(); ++i) {
    ASSERT_EQ(c.node(i).Call({"CLUSTER", "SETSLOT", std::to_string(slot), "NODE", c.NodeId(to)}).str, "OK");
  }
  ASSERT_TRUE(osprey::testing::WaitUntil([&] { return c.Agreed(); }, std::chrono::seconds(10)));
}

TEST(RedisClusterTest, SpreadsKeysOverMastersAndKeepsReplyOrder) {
  auto c = StartCluster();
  ASSERT_TRUE(c);
  auto client = ConnectTo(*c, {c->node(1).endpoint()});  // one seed finds every master
  ASSERT_TRUE(client);
  EXPECT_EQ(client->num_masters(), 3u);
  const auto keys = Keys("key:", 3000);
  SetAll(*client, keys, "");
  ExpectAll(*client, keys, "");
  // Interleaved writes and reads of keys on different masters come back in the caller's order.
  std::vector<Command> mixed;
  for (int i = 0; i < 300; ++i) {
    mixed.push_back({{"SET", keys[i], "w" + std::to_string(i)}});
    mixed.push_back({{"GET", keys[i]}});
    mixed.push_back({{"APPEND", keys[i], "!"}});
    mixed.push_back({{"GET", keys[i]}});
  }
  std::vector<Reply> r;
  ASSERT_TRUE(client->Execute(mixed, &r).ok());
  for (int i = 0; i < 300; ++i) {
    ASSERT_EQ(r[4 * i + 1].str, "w" + std::to_string(i));
    ASSERT_EQ(r[4 * i + 2].integer, static_cast<long long>(("w" + std::to_string(i)).size() + 1));
    ASSERT_EQ(r[4 * i + 3].str, "w" + std::to_string(i) + "!");
  }
  ASSERT_TRUE(client->ExecuteOnAllMasters({{"DBSIZE"}, -1}, &r).ok());
  ASSERT_EQ(r.size(), 3u);
  long long total = 0;
  for (const Reply& n : r) {
    EXPECT_GT(n.integer, 500) << "a master holds too few of the keys";
    total += n.integer;
  }
  EXPECT_EQ(total, 3000);
  EXPECT_EQ(client->counters().moved, 0);
}

TEST(RedisClusterTest, StaleMapFollowsMovedAfterASlotMoved) {
  auto c = StartCluster();
  ASSERT_TRUE(c);
  auto client = ConnectTo(*c);
  ASSERT_TRUE(client);
  const auto keys = Keys("{moved}k", 200);
  SetAll(*client, keys, "");
  const int slot = RedisClient::KeySlot("{moved}");
  const size_t from = NodeIndexOnPort(*c, c->OwnerPort(0, slot));
  ASSERT_LT(from, c->size());
  const size_t to = (from + 1) % c->size();
  BeginMigration(*c, slot, from, to);
  FinishMigration(*c, slot, from, to);
  ASSERT_EQ(c->OwnerPort(0, slot), c->node(to).port());

  const long long refreshes = client->counters().map_refreshes;
  ExpectAll(*client, keys, "");  // the client's map still names `from`
  EXPECT_GT(client->counters().moved, 0);
  EXPECT_GT(client->counters().map_refreshes, refreshes);
  SetAll(*client, keys, "b");
  ExpectAll(*client, keys, "b");
  EXPECT_EQ(c->node(to).Call({"CLUSTER", "COUNTKEYSINSLOT", std::to_string(slot)}).integer, 200);
}

TEST(RedisClusterTest, AskDuringMigrationLosesNothing) {
  auto c = StartCluster();
  ASSERT_TRUE(c);
  auto client = ConnectTo(*c);
  ASSERT_TRUE(client);
  const auto keys = Keys("{ask}k", 100);
  SetAll(*client, keys, "");
  const int slot = RedisClient::KeySlot("{ask}");
  const size_t from = NodeIndexOnPort(*c, c->OwnerPort(0, slot));
  ASSERT_LT(from, c->size());
  const size_t to = (from + 2) % c->size();
  BeginMigration(*c, slot, from, to);
  MigrateKeys(*c, from, to, std::vector<std::string>(keys.begin(), keys.begin() + 50));

  // Half the keys are on the target now: reads of both halves succeed (ASK for the moved half).
  ExpectAll(*client, keys, "");
  EXPECT_GT(client->counters().asks, 0);
  // Writes: existing keys where they are, new keys (missing on the source) via ASK to the target.
  SetAll(*client, keys, "x");
  const auto fresh = Keys("{ask}new", 40);
  SetAll(*client, fresh, "n");
  ExpectAll(*client, keys, "x");
  ExpectAll(*client, fresh, "n");
  EXPECT_EQ(client->counters().moved, 0) << "the slot still belongs to the source: ASK only";

  // A multi-key command whose keys are split between source and target gets TRYAGAIN until the
  // migration ends: retried with backoff, then Unavailable naming the reason.
  std::vector<Reply> r;
  Status st = client->Execute({{{"MGET", keys[0], keys[99]}}}, &r);
  EXPECT_EQ(st.code(), StatusCode::kUnavailable) << st.ToString();
  EXPECT_NE(st.message().find("TRYAGAIN"), std::string::npos) << st.ToString();

  FinishMigration(*c, slot, from, to);
  ASSERT_TRUE(client->Execute({{{"MGET", keys[0], keys[99]}}}, &r).ok());
  ASSERT_EQ(r[0].elements.size(), 2u);
  EXPECT_EQ(r[0].elements[1].str, "v99x");
  ExpectAll(*client, keys, "x");
  ExpectAll(*client, fresh, "n");
  EXPECT_EQ(c->node(to).Call({"CLUSTER", "COUNTKEYSINSLOT", std::to_string(slot)}).integer, 140);
  EXPECT_EQ(c->node(from).Call({"CLUSTER", "COUNTKEYSINSLOT", std::to_string(slot)}).integer, 0);
}

TEST(RedisClusterTest, ReshardWhileIncrementingLosesAndDuplicatesNothing) {
  auto c = StartCluster();
  ASSERT_TRUE(c);
  auto client = ConnectTo(*c);
  ASSERT_TRUE(client);
  const auto keys = Keys("ctr:", 4000);
  // `redis-cli --cluster reshard` moves 1500 slots (and their keys) from node 0 to node 1 while
  // this thread keeps incrementing every key: each INCR must apply exactly once.
  std::atomic<bool> resharding{true};
  int reshard_rc = -1;
  const std::string cmd = "redis-cli --cluster reshard 127.0.0.1:" + std::to_string(c->node(0).port()) +
                          " --cluster-from " + c->NodeId(0) + " --cluster-to " + c->NodeId(1) +
                          " --cluster-slots 1500 --cluster-yes > /dev/null 2>&1";
  std::thread reshard([&] {
    reshard_rc = osprey::testing::RunCommand(cmd);
    resharding = false;
  });
  std::vector<Command> incrs;
  for (const auto& k : keys) incrs.push_back({{"INCR", k}});
  std::vector<Reply> r;
  long long rounds = 0;
  bool ok = true;
  while (ok && (resharding || rounds < 3)) {
    Status st = client->Execute(incrs, &r);
    ok = st.ok();
    EXPECT_TRUE(st.ok()) << st.ToString();
    ++rounds;
    for (size_t i = 0; ok && i < r.size(); ++i) {
      ok = r[i].type == Reply::Type::kInteger && r[i].integer == rounds;
      EXPECT_TRUE(ok) << keys[i] << " round " << rounds << ": " << r[i].DebugString();
    }
  }
  reshard.join();
  ASSERT_EQ(reshard_rc, 0);
  ASSERT_TRUE(ok);
  std::vector<Command> gets;
  for (const auto& k : keys) gets.push_back({{"GET", k}});
  ASSERT_TRUE(client->Execute(gets, &r).ok());
  for (size_t i = 0; i < keys.size(); ++i) ASSERT_EQ(r[i].str, std::to_string(rounds)) << keys[i];
  EXPECT_GT(client->counters().moved + client->counters().asks, 0) << "the reshard was not observed";
  std::printf("reshard: %lld rounds of %zu INCRs, %lld MOVED, %lld ASK\n", rounds, keys.size(),
              client->counters().moved, client->counters().asks);
}

TEST(RedisClusterTest, KilledMasterIsUnavailableWithinTheRetryBudget) {
  auto c = StartCluster();
  ASSERT_TRUE(c);
  auto client = ConnectTo(*c);
  ASSERT_TRUE(client);
  const auto keys = Keys("key:", 300);
  SetAll(*client, keys, "");
  const Endpoint dead = c->node(0).endpoint();
  c->node(0).Kill9();
  std::vector<Command> gets;
  for (const auto& k : keys) gets.push_back({{"GET", k}});
  std::vector<Reply> r;
  const auto start = std::chrono::steady_clock::now();
  Status st = client->Execute(gets, &r);
  EXPECT_EQ(st.code(), StatusCode::kUnavailable) << st.ToString();
  EXPECT_NE(st.message().find(dead.ToString()), std::string::npos) << st.ToString();
  EXPECT_EQ(client->counters().retries, 3);
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(10));
  // Every-master commands report the dead one too.
  st = client->ExecuteOnAllMasters({{"PING"}, -1}, &r);
  EXPECT_EQ(st.code(), StatusCode::kUnavailable) << st.ToString();
  EXPECT_NE(st.message().find(dead.ToString()), std::string::npos) << st.ToString();
  // A new client whose first seed is the dead node still reads the map from the others.
  auto again = ConnectTo(*c);
  ASSERT_TRUE(again);
  EXPECT_EQ(again->num_masters(), 3u);
}

TEST(RedisClusterTest, StoppedMasterIsDeadlineExceededThenRecovers) {
  auto c = StartCluster();
  ASSERT_TRUE(c);
  RedisOptions o;
  o.cluster = true;
  o.seeds = c->endpoints();
  o.io_timeout_ms = 400;
  auto client = RedisClient::Connect(o);
  ASSERT_TRUE(client.ok()) << client.status().ToString();
  const auto keys = Keys("key:", 300);
  SetAll(**client, keys, "");
  c->node(1).Pause();
  std::vector<Command> gets;
  for (const auto& k : keys) gets.push_back({{"GET", k}});
  std::vector<Reply> r;
  const auto start = std::chrono::steady_clock::now();
  Status st = (*client)->Execute(gets, &r);
  EXPECT_EQ(st.code(), StatusCode::kDeadlineExceeded) << st.ToString();
  EXPECT_NE(st.message().find(c->node(1).endpoint().ToString()), std::string::npos) << st.ToString();
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(4));
  // ExecuteOnAllMasters meets the same stopped node.
  EXPECT_EQ((*client)->ExecuteOnAllMasters({{"PING"}, -1}, &r).code(), StatusCode::kDeadlineExceeded);
  c->node(1).Resume();
  ExpectAll(**client, keys, "");
}

TEST(RedisClusterTest, ClusterDownIsRetriedThenUnavailable) {
  // A short node timeout so the survivors mark the killed master failed within seconds.
  auto c = RedisTestCluster::Start(3, "", {"--cluster-node-timeout", "2000"});
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  auto client = ConnectTo(**c);
  ASSERT_TRUE(client);
  (*c)->node(2).Kill9();
  ASSERT_TRUE(osprey::testing::WaitUntil(
      [&] { return (*c)->node(0).Call({"CLUSTER", "INFO"}).str.find("cluster_state:fail") != std::string::npos; },
      std::chrono::seconds(20)));
  // A key on a live master: its node answers CLUSTERDOWN, retried with backoff, then reported.
  std::string key;
  for (int i = 0; key.empty(); ++i) {
    const std::string k = "key:" + std::to_string(i);
    if ((*c)->OwnerPort(0, RedisClient::KeySlot(k)) == (*c)->node(0).port()) key = k;
  }
  std::vector<Reply> r;
  Status st = client->Execute({{{"GET", key}}}, &r);
  EXPECT_EQ(st.code(), StatusCode::kUnavailable) << st.ToString();
  EXPECT_NE(st.message().find("CLUSTERDOWN"), std::string::npos) << st.ToString();
  EXPECT_EQ(client->counters().retries, 3);
}

TEST(RedisClusterTest, FunctionLoadedOnEveryMasterRunsWhereItsKeyLives) {
  auto c = StartCluster();
  ASSERT_TRUE(c);
  auto client = ConnectTo(*c);
  ASSERT_TRUE(client);
  const std::string lib =
      "#!lua name=ostest\n"
      "redis.register_function('addto', function(keys, args)\n"
      "  return redis.call('INCRBY', keys[1], args[1]) end)\n"
      "redis.register_function('refuse', function(keys, args)\n"
      "  return redis.error_reply('FENCED stale epoch') end)\n";
  std::vector<Reply> r;
  ASSERT_TRUE(client->ExecuteOnAllMasters({{"FUNCTION", "LOAD", "REPLACE", lib}, -1}, &r).ok());
  ASSERT_EQ(r.size(), 3u);
  for (const Reply& x : r) EXPECT_EQ(x.str, "ostest") << x.DebugString();

  std::vector<Command> calls;
  const auto keys = Keys("ctr:", 300);
  for (int round = 0; round < 2; ++round) {
    for (const auto& k : keys) calls.push_back({{"FCALL", "addto", "1", k, "5"}, 3});
  }
  calls.push_back({{"FCALL", "refuse", "1", "ctr:0"}, 3});
  ASSERT_TRUE(client->Execute(calls, &r).ok());
  for (size_t i = 0; i < keys.size(); ++i) {
    ASSERT_EQ(r[i].integer, 5) << r[i].DebugString();
    ASSERT_EQ(r[keys.size() + i].integer, 10) << r[keys.size() + i].DebugString();
  }
  ASSERT_TRUE(r.back().is_error());
  EXPECT_EQ(r.back().str, "FENCED stale epoch");
  EXPECT_EQ(client->counters().moved, 0);
}

TEST(RedisClusterTest, AuthOnEveryNode) {
  auto c = RedisTestCluster::Start(3, "clusterpw");
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  RedisOptions o;
  o.cluster = true;
  o.seeds = (*c)->endpoints();
  auto anonymous = RedisClient::Connect(o);
  ASSERT_FALSE(anonymous.ok());
  EXPECT_EQ(anonymous.status().code(), StatusCode::kPermissionDenied) << anonymous.status().ToString();
  o.password = "nope";
  EXPECT_EQ(RedisClient::Connect(o).status().code(), StatusCode::kPermissionDenied);
  o.password = "clusterpw";
  auto client = RedisClient::Connect(o);
  ASSERT_TRUE(client.ok()) << client.status().ToString();
  const auto keys = Keys("key:", 500);
  SetAll(**client, keys, "a");
  ExpectAll(**client, keys, "a");
}

TEST(RedisClusterTest, NoSeedUpIsUnavailableNamingEverySeed) {
  RedisOptions o;
  o.cluster = true;
  o.seeds = {{"127.0.0.1", osprey::testing::FreePort()}, {"127.0.0.1", osprey::testing::FreePort()}};
  auto client = RedisClient::Connect(o);
  ASSERT_FALSE(client.ok());
  EXPECT_EQ(client.status().code(), StatusCode::kUnavailable);
  for (const Endpoint& ep : o.seeds) {
    EXPECT_NE(client.status().message().find(ep.ToString()), std::string::npos) << client.status().ToString();
  }
}

TEST(RedisClusterTest, ClusterModeOnAPlainNodeIsAClearError) {
  auto server = RedisServer::Start();
  ASSERT_TRUE(server.ok()) << server.status().ToString();
  RedisOptions o;
  o.cluster = true;
  o.seeds = {(*server)->endpoint()};
  auto client = RedisClient::Connect(o);
  ASSERT_FALSE(client.ok());
  EXPECT_EQ(client.status().code(), StatusCode::kFailedPrecondition) << client.status().ToString();
  EXPECT_NE(client.status().message().find((*server)->endpoint().ToString()), std::string::npos);
}

}  // namespace
}  // namespace osprey::redis
