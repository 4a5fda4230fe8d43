// The job's metadata in Redis (coordinator/metadata_store.h), against a real redis-server: a
// Coordinator keeps its session and state there while the job runs; a second one started with
// SetRecover reads it back before any node re-registers, so it knows the session (a first
// re-registration of another session is refused), the reports already received (a worker that
// reported and exited is not waited for) and the epoch.
#include <gtest/gtest.h>

#include <future>
#include <memory>
#include <vector>

#include "common/inproc_transport.h"
#include "coordinator/coordinator.h"
#include "coordinator/coordinator_client.h"
#include "coordinator/metadata_store.h"
#include "tests/coordinator/coordinator_test_util.h"
#include "tests/testing/redis_fixture.h"
#include "tests/testing/wait.h"

namespace osprey::coordinator {
namespace {

using testing::ServerRequest;
using testing::TestJob;
using testing::WorkerRequest;
using Ms = std::chrono::milliseconds;

constexpr char kEndpoint[] = "inproc://coordinator";

std::unique_ptr<MetadataStore> Store(const osprey::testing::RedisServer& redis) {
  config::RedisStoreConfig c;
  c.endpoints = redis.endpoint().ToString();
  c.key_prefix = "meta-test";
  auto store = MakeRedisMetadataStore(c);
  EXPECT_TRUE(store.ok()) << store.status().ToString();
  return store.ok() ? std::move(store).value() : nullptr;
}

TEST(CoordinatorMetadataTest, RecoveringCoordinatorReadsSessionReportsAndEpochFromRedis) {
  auto redis = osprey::testing::RedisServer::Start();
  ASSERT_TRUE(redis.ok()) << redis.status().ToString();
  const config::PsConfig job = TestJob(1, 2, /*heartbeat_timeout_ms=*/5000);
  auto hub = std::make_shared<InprocHub>();
  auto first = std::make_unique<Coordinator>(job, std::make_unique<InprocTransport>(hub));
  first->SetMetadataStore(Store(**redis));
  ASSERT_TRUE(first->Start(kEndpoint).ok());

  std::vector<std::unique_ptr<CoordinatorClient>> nodes;
  std::vector<proto::RegisterRequest> requests = {ServerRequest(100, 0), WorkerRequest(200, 0),
                                                  WorkerRequest(201, 1)};
  std::vector<std::future<StatusOr<proto::RegisterReply>>> regs;
  for (size_t i = 0; i < requests.size(); ++i) {
    auto c = CoordinatorClient::Create(std::make_unique<InprocTransport>(hub), kEndpoint);
    ASSERT_TRUE(c.ok());
    nodes.push_back(std::move(c).value());
  }
  for (size_t i = 0; i < nodes.size(); ++i) {
    regs.push_back(std::async(std::launch::async, [&, i] { return nodes[i]->Register(requests[i], 5000); }));
  }
  uint64_t session = 0;
  for (auto& r : regs) {
    auto reply = r.get();
    ASSERT_TRUE(reply.ok()) << reply.status().ToString();
    session = reply->session_id();
  }
  proto::WorkerReport report;
  report.set_rank(1);
  report.set_steps(33);
  ASSERT_TRUE(nodes[2]->Report(report, 5000).ok());  // worker 1 reported (and "exits")

  // What Redis holds catches up with the coordinator (saved at most every 100 ms).
  std::unique_ptr<MetadataStore> reader = Store(**redis);
  ASSERT_TRUE(osprey::testing::WaitUntil([&] {
    auto m = reader->Load();
    return m.ok() && m->has_value() && (*m)->session_id == session && (*m)->state.reports_size() == 1;
  }));
  first.reset();  // the coordinator goes away

  auto second = std::make_unique<Coordinator>(job, std::make_unique<InprocTransport>(hub));
  second->SetRecover(true);
  second->SetMetadataStore(Store(**redis));
  ASSERT_TRUE(second->Start(kEndpoint).ok());
  proto::ClusterState before = second->State();
  EXPECT_TRUE(before.recovering());
  ASSERT_EQ(before.reports_size(), 1) << "known from Redis before any node is back";
  EXPECT_EQ(before.reports(0).steps(), 33u);
  EXPECT_EQ(before.epoch(), 1u);

  // The session is known too: even a first re-registration of another session is refused.
  auto rogue = CoordinatorClient::Create(std::make_unique<InprocTransport>(hub), kEndpoint);
  ASSERT_TRUE(rogue.ok());
  proto::RegisterRequest other = WorkerRequest(300, 0);
  other.set_rejoin(true);
  other.set_session_id(session ^ 1);
  other.set_incarnation(9);
  EXPECT_EQ((*rogue)->Register(other, 5000).status().code(), StatusCode::kFailedPrecondition);

  // The server and worker 0 come back (no carried state at all): worker 1 is not waited for.
  for (int i : {0, 1}) {
    proto::RegisterRequest back = requests[i];
    back.set_rejoin(true);
    back.set_session_id(session);
    back.set_incarnation(10 + i);
    auto reply = nodes[i]->Register(back, 5000);
    ASSERT_TRUE(reply.ok()) << reply.status().ToString();
    EXPECT_TRUE(reply->recovered());
  }
  proto::ClusterState after = second->State();
  EXPECT_FALSE(after.recovering());
  for (const proto::NodeState& n : after.nodes()) EXPECT_TRUE(n.alive()) << n.role() << " " << n.rank();
  report.set_rank(0);
  ASSERT_TRUE(nodes[1]->Report(report, 5000).ok());
  EXPECT_TRUE(second->State().done());
  for (auto& n : nodes) n->Stop();
}

}  // namespace
}  // namespace osprey::coordinator
