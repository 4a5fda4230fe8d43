// The push marks (server/redis/push_marks.cc) through real processes: a redis-server, an
// osprey-coordinator and an osprey-server (write_through, no row cache). The test, as the job's
// only worker, pushes once and gets the ack, then kill -9s the server: from Redis's side this is
// a push applied whose reply the worker may never have seen (the marks are written with the rows,
// before the reply). A second osprey-server of rank 0 on the same Redis (a new incarnation, what
// a replacement reads) gets the same push re-sent (same worker rank, incarnation, request id): it
// is acknowledged, not applied again (the rows are exactly those of one application and the rank's
// applied-push counter in Redis stays 1), while a new push is applied (counter 2, rows changed).
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "common/redis/redis_client.h"
#include "common/zmq_transport.h"
#include "coordinator/coordinator_client.h"
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

constexpr int kDim = 16;
constexpr uint64_t kWorkerIncarnation = 0xfeedfacecafe1234ull;  // above 2^53: compared as text

struct Job {
  proc::Proc coordinator, server;
  std::unique_ptr<coordinator::CoordinatorClient> client;
  proto::ShardMap map;
  int rank = -1;
  std::unique_ptr<RawPeer> peer;
};

// Starts a coordinator and one server (in dir/<tag>-*), registers as the worker.
void StartJob(const std::string& dir, const std::string& tag, const std::string& redis, Job* job) {
  const std::string coord = "tcp://127.0.0.1:" + std::to_string(testing::FreePort());
  std::vector<std::string> args = {"--config", testing::SourceDir() + "/configs/local.yaml"};
  for (const std::string& s : {std::string("cluster.servers=1"), std::string("cluster.workers=1"),
                               std::string("cluster.heartbeat_timeout_ms=120000"),
                               std::string("store.type=redis"), "store.redis.endpoints=" + redis,
                               std::string("store.redis.key_prefix=dedup"),
                               std::string("store.redis.write_policy=write_through"),
                               std::string("store.redis.cache_rows=0"),
                               "cluster.coordinator=" + coord}) {
    args.insert(args.end(), {"--set", s});
  }
  auto with = [&](const std::string& bin) {
    std::vector<std::string> a = {testing::BinDir() + "/" + bin};
    a.insert(a.end(), args.begin(), args.end());
    return a;
  };
  std::filesystem::create_directories(dir + "/" + tag + "-coordinator");
  std::filesystem::create_directories(dir + "/" + tag + "-server");
  job->coordinator = proc::Spawn(with("osprey-coordinator"), dir + "/" + tag + "-coordinator");
  job->server = proc::Spawn(with("osprey-server"), dir + "/" + tag + "-server");
  auto t = MakeTransport(TransportOptions{});
  ASSERT_TRUE(t.ok());
  auto client = coordinator::CoordinatorClient::Create(std::move(*t), coord);
  ASSERT_TRUE(client.ok());
  job->client = std::move(*client);
  proto::RegisterRequest req;
  req.set_role(proto::ROLE_WORKER);
  req.set_host("localhost");
  req.set_pid(getpid());
  req.set_requested_rank(-1);
  req.set_incarnation(kWorkerIncarnation);
  auto reg = job->client->Register(req, 30000);
  ASSERT_TRUE(reg.ok()) << reg.status().ToString() << "\nserver:\n"
                        << testing::ReadFile(job->server.err_path) << "\ncoordinator:\n"
                        << testing::ReadFile(job->coordinator.err_path);
  job->map = reg->shard_map();
  job->rank = reg->rank();
  ASSERT_EQ(job->map.server_endpoints_size(), 1);
  job->peer = std::make_unique<RawPeer>(std::make_unique<ZmqTransport>(TransportOptions{}),
                                        job->map.server_endpoints(0));
}

void Kill(proc::Proc* p) {
  ::kill(p->pid, SIGKILL);
  ASSERT_TRUE(proc::WaitExit(p->pid, std::chrono::seconds(30)).has_value());
}

uint32_t SparseTable(const Job& job) {
  return job.map.tables(0).type() == proto::TABLE_SPARSE ? 0 : 1;
}

// Pushes request `id` (gradient 0.25 on keys 1000..1049); returns the reply.
proto::Header Push(Job* job, uint64_t id) {
  std::vector<uint64_t> keys;
  for (int i = 0; i < 50; ++i) keys.push_back(1000 + i);
  std::vector<float> g(keys.size() * kDim, 0.25f);
  proto::Header h;
  h.set_op(proto::OP_PUSH_SPARSE);
  h.set_table(SparseTable(*job));
  h.set_request_id(id);
  h.set_epoch(job->map.epoch());
  h.set_num_keys(keys.size());
  h.set_value_bytes(g.size() * sizeof(float));
  h.set_worker_rank(job->rank);
  h.set_worker_incarnation(kWorkerIncarnation);
  job->peer->Send(h, VecBuf(keys), VecBuf(g));
  proto::Header r;
  EXPECT_TRUE(job->peer->Next(&r, nullptr)) << "no reply to push " << id;
  return r;
}

std::vector<float> Pull(Job* job) {
  std::vector<uint64_t> keys;
  for (int i = 0; i < 50; ++i) keys.push_back(1000 + i);
  proto::Header h;
  h.set_op(proto::OP_PULL_SPARSE);
  h.set_table(SparseTable(*job));
  h.set_request_id(1);
  h.set_epoch(job->map.epoch());
  h.set_num_keys(keys.size());
  h.set_worker_rank(job->rank);
  job->peer->Send(h, VecBuf(keys), Buffer());
  proto::Header r;
  Buffer values;
  EXPECT_TRUE(job->peer->Next(&r, &values)) << "no reply to the pull";
  EXPECT_EQ(r.op(), proto::OP_REPLY) << r.error();
  std::vector<float> out(values.size() / sizeof(float));
  if (!out.empty()) std::memcpy(out.data(), values.data(), values.size());
  return out;
}

std::string Hget(redis::RedisClient* c, const std::string& key, const std::string& field) {
  std::vector<redis::Reply> r;
  Status s = c->Execute({redis::Command({"HGET", key, field})}, &r);
  EXPECT_TRUE(s.ok()) << s.ToString();
  return s.ok() && r.size() == 1 ? r[0].str : "?";
}

TEST(RedisDedupProcessTest, PushAppliedBeforeAKillIsNotAppliedAgainWhenResent) {
  auto redis = testing::RedisServer::Start();
  ASSERT_TRUE(redis.ok()) << redis.status().ToString();
  redis::RedisOptions ro;
  ro.seeds = {(*redis)->endpoint()};
  auto rc = redis::RedisClient::Connect(ro);
  ASSERT_TRUE(rc.ok()) << rc.status().ToString();
  proc::TempDir dir;
  const std::string key = "{dedup}:pushes:r0";

  Job first;
  StartJob(dir.path(), "first", (*redis)->endpoint().ToString(), &first);
  if (::testing::Test::HasFatalFailure()) return;
  const std::vector<float> initial = Pull(&first);
  ASSERT_EQ(initial.size(), 50u * kDim);
  proto::Header r = Push(&first, 100);
  ASSERT_EQ(r.op(), proto::OP_REPLY) << r.error();
  const std::vector<float> once = Pull(&first);
  ASSERT_NE(once, initial) << "the push changed nothing";
  // The marks are in Redis before the reply: applied 1, worker 0's applied ids: 100.
  EXPECT_EQ(Hget(rc->get(), key, "applied"), "1");
  EXPECT_EQ(Hget(rc->get(), key, "t" + std::to_string(SparseTable(first)) + ":w" +
                                     std::to_string(first.rank)),
            std::to_string(kWorkerIncarnation) + " 0 100");
  Kill(&first.server);
  Kill(&first.coordinator);

  Job second;  // a new incarnation of server rank 0 on the same Redis
  StartJob(dir.path(), "second", (*redis)->endpoint().ToString(), &second);
  if (::testing::Test::HasFatalFailure()) return;
  EXPECT_EQ(Pull(&second), once) << "the replacement does not serve the applied push's rows";
  r = Push(&second, 100);  // the re-send of the push whose reply "was lost"
  ASSERT_EQ(r.op(), proto::OP_REPLY) << r.error();
  EXPECT_EQ(Pull(&second), once) << "the re-sent push was applied a second time";
  EXPECT_EQ(Hget(rc->get(), key, "applied"), "1");
  r = Push(&second, 101);  // a new push is applied
  ASSERT_EQ(r.op(), proto::OP_REPLY) << r.error();
  const std::vector<float> twice = Pull(&second);
  EXPECT_NE(twice, once);
  EXPECT_EQ(Hget(rc->get(), key, "applied"), "2");
  const std::string log = testing::ReadFile(second.server.err_path);
  EXPECT_NE(log.find("restored the push marks of 1 (table, worker) pairs, 1 ids (1 pushes applied before)"), std::string::npos) << log;
  Kill(&second.server);
  Kill(&second.coordinator);
}

}  // namespace
}  // namespace osprey
