// write_through durability through a real osprey-server process: the test starts a redis-server,
// osprey-coordinator and one osprey-server (configs/local.yaml with store.type: redis,
// write_through, no row cache), registers as the job's only worker, pushes 20 batches of rows and
// waits for each acknowledgement, then kill -9s the server. A new store on the same Redis (what a
// replacement server reads at start) has every acknowledged row, changed from its initial value;
// a row never pushed is not there; and a SECOND osprey-server process (new coordinator, same
// Redis) serves exactly those rows to a pull.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "common/zmq_transport.h"
#include "coordinator/coordinator_client.h"
#include "job/job_config.h"
#include "server/redis/redis_store.h"
#include "server/sparse_table.h"
#include "server/updater.h"
#include "tests/coordinator/process_test_util.h"
#include "tests/testing/cluster_fixture.h"
#include "tests/testing/free_port.h"
#include "tests/testing/redis_fixture.h"
#include "tests/testing/test_env.h"

namespace osprey {
namespace {

using testing::RawPeer;
using testing::VecBuf;
namespace proc = tools::testing;

TEST(RedisDurabilityProcessTest, WriteThroughKeepsEveryAcknowledgedRowAcrossKill9) {
  auto redis = testing::RedisServer::Start();
  ASSERT_TRUE(redis.ok()) << redis.status().ToString();
  proc::TempDir dir;
  std::filesystem::create_directories(dir.path() + "/coordinator");
  std::filesystem::create_directories(dir.path() + "/server");
  const std::string coord = "tcp://127.0.0.1:" + std::to_string(testing::FreePort());
  const std::string config = testing::SourceDir() + "/configs/local.yaml";
  std::vector<std::string> sets = {
      "cluster.servers=1", "cluster.workers=1", "cluster.heartbeat_timeout_ms=120000",
      "store.type=redis", "store.redis.endpoints=" + (*redis)->endpoint().ToString(),
      "store.redis.key_prefix=durable", "store.redis.write_policy=write_through",
      "store.redis.cache_rows=0", "cluster.coordinator=" + coord};
  std::vector<std::string> args = {"--config", config};
  for (const std::string& s : sets) args.insert(args.end(), {"--set", s});
  auto with = [&](const std::string& bin) {
    std::vector<std::string> a = {testing::BinDir() + "/" + bin};
    a.insert(a.end(), args.begin(), args.end());
    return a;
  };
  proc::Proc coordinator = proc::Spawn(with("osprey-coordinator"), dir.path() + "/coordinator");
  proc::Proc server = proc::Spawn(with("osprey-server"), dir.path() + "/server");

  auto t = MakeTransport(TransportOptions{});
  ASSERT_TRUE(t.ok());
  auto client = coordinator::CoordinatorClient::Create(std::move(*t), coord);
  ASSERT_TRUE(client.ok());
  proto::RegisterRequest req;
  req.set_role(proto::ROLE_WORKER);
  req.set_host("localhost");
  req.set_pid(getpid());
  req.set_requested_rank(-1);
  auto reg = (*client)->Register(req, 30000);
  ASSERT_TRUE(reg.ok()) << reg.status().ToString() << testing::ReadFile(server.err_path);
  const proto::ShardMap& map = reg->shard_map();
  ASSERT_EQ(map.server_endpoints_size(), 1);
  const uint32_t sparse = map.tables(0).type() == proto::TABLE_SPARSE ? 0 : 1;
  const int dim = 16;

  RawPeer peer(std::make_unique<ZmqTransport>(TransportOptions{}), map.server_endpoints(0));
  std::vector<uint64_t> pushed;
  for (int b = 0; b < 20; ++b) {
    std::vector<uint64_t> keys;
    for (int i = 0; i < 50; ++i) keys.push_back(1000 + b * 50 + i);
    std::vector<float> g(keys.size() * dim, 0.25f);
    proto::Header h;
    h.set_op(proto::OP_PUSH_SPARSE);
    h.set_table(sparse);
    h.set_request_id(100 + b);
    h.set_epoch(map.epoch());
    h.set_num_keys(keys.size());
    h.set_value_bytes(g.size() * sizeof(float));
    h.set_worker_rank(reg->rank());
    peer.Send(h, VecBuf(keys), VecBuf(g));
    proto::Header r;
    ASSERT_TRUE(peer.Next(&r, nullptr)) << "no ack for push " << b;
    ASSERT_EQ(r.op(), proto::OP_REPLY) << r.error();
    pushed.insert(pushed.end(), keys.begin(), keys.end());
  }
  ::kill(server.pid, SIGKILL);  // right after the last ack: nothing more to flush
  ASSERT_TRUE(proc::WaitExit(server.pid, std::chrono::seconds(30)).has_value());
  ::kill(coordinator.pid, SIGKILL);
  (void)proc::WaitExit(coordinator.pid, std::chrono::seconds(30));
  EXPECT_NE(testing::ReadFile(server.err_path).find("store: redis"), std::string::npos);

  // What a replacement osprey-server of rank 0 reads at start.
  std::vector<std::string> overrides(sets.begin(), sets.end() - 1);
  auto job = config::LoadJobConfig(config, overrides);
  ASSERT_TRUE(job.ok()) << job.status().ToString();
  auto store = server::RedisStore::Connect(job->store.redis);
  ASSERT_TRUE(store.ok()) << store.status().ToString();
  ASSERT_TRUE((*store)->TakeOver(0).ok());
  const config::TableConfig& tc = job->tables[sparse];
  auto updater = server::Updater::Make(tc.optimizer);
  ASSERT_TRUE(updater.ok());
  server::StoreTableSpec spec;
  spec.id = sparse;
  spec.config = tc;
  spec.state = (*updater)->state_layout();
  Status created = (*store)->CreateTable(spec);
  ASSERT_TRUE(created.ok()) << created.ToString();
  EXPECT_EQ((*store)->num_rows(sparse), pushed.size());
  server::SparseTable initial(sparse, dim, tc.init, spec.state);
  std::vector<float> w0(dim);
  pushed.push_back(999999);  // never pushed
  size_t present = 0, changed = 0;
  std::vector<float> in_redis;  // the acknowledged rows' weights, in `pushed` order
  Status s = (*store)->VisitRows(sparse, pushed.data(), pushed.size(), server::RowAccess::kRead,
                                 [&](const server::RowBlock& b) {
    for (size_t i = 0; i < b.n; ++i) {
      if (b.rows[i] == nullptr) continue;
      ++present;
      in_redis.insert(in_redis.end(), b.rows[i], b.rows[i] + dim);
      initial.InitialWeights(pushed[b.begin + i], w0.data());
      if (std::vector<float>(b.rows[i], b.rows[i] + dim) != w0) ++changed;
    }
    return Status::OK();
  });
  ASSERT_TRUE(s.ok()) << s.ToString();
  EXPECT_EQ(present, pushed.size() - 1) << "acknowledged rows missing from Redis after kill -9";
  EXPECT_EQ(changed, pushed.size() - 1);
  store->reset();

  // A SECOND real osprey-server (with a new coordinator) on the same Redis serves those rows.
  pushed.pop_back();
  const std::string coord2 = "tcp://127.0.0.1:" + std::to_string(testing::FreePort());
  args.back() = "cluster.coordinator=" + coord2;
  std::filesystem::create_directories(dir.path() + "/coordinator2");
  std::filesystem::create_directories(dir.path() + "/server2");
  proc::Proc coordinator2 = proc::Spawn(with("osprey-coordinator"), dir.path() + "/coordinator2");
  proc::Proc server2 = proc::Spawn(with("osprey-server"), dir.path() + "/server2");
  auto t2 = MakeTransport(TransportOptions{});
  ASSERT_TRUE(t2.ok());
  auto client2 = coordinator::CoordinatorClient::Create(std::move(*t2), coord2);
  ASSERT_TRUE(client2.ok());
  auto reg2 = (*client2)->Register(req, 30000);
  ASSERT_TRUE(reg2.ok()) << reg2.status().ToString() << testing::ReadFile(server2.err_path);
  const proto::ShardMap& map2 = reg2->shard_map();
  RawPeer peer2(std::make_unique<ZmqTransport>(TransportOptions{}), map2.server_endpoints(0));
  proto::Header pull;
  pull.set_op(proto::OP_PULL_SPARSE);
  pull.set_table(sparse);
  pull.set_request_id(7);
  pull.set_epoch(map2.epoch());
  pull.set_num_keys(pushed.size());
  pull.set_worker_rank(reg2->rank());
  peer2.Send(pull, VecBuf(pushed), Buffer());
  proto::Header r;
  Buffer values;
  ASSERT_TRUE(peer2.Next(&r, &values)) << "no reply to the pull" << testing::ReadFile(server2.err_path);
  ASSERT_EQ(r.op(), proto::OP_REPLY) << r.error();
  ASSERT_EQ(values.size(), in_redis.size() * sizeof(float));
  std::vector<float> served(in_redis.size());
  std::memcpy(served.data(), values.data(), values.size());
  EXPECT_EQ(served, in_redis) << "the second server does not serve the acknowledged rows";
  ::kill(server2.pid, SIGKILL);
  (void)proc::WaitExit(server2.pid, std::chrono::seconds(30));
  ::kill(coordinator2.pid, SIGKILL);
  (void)proc::WaitExit(coordinator2.pid, std::chrono::seconds(30));
  EXPECT_NE(testing::ReadFile(server2.err_path).find("incarnation 3"), std::string::npos)
      << testing::ReadFile(server2.err_path);
}

}  // namespace
}  // namespace osprey
