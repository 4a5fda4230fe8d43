// Exact worker resume over real (in-process) servers: OP_APPLIED_CLOCKS reports the highest clock
// each server took from a rank per table, push floors keep a replayed step's push from reaching a
// server that already has it, and PlanExactResume puts the two together after a "kill" between a
// step's pushes to two servers (worker/resume_plan.h).
#include <gtest/gtest.h>

#include "tests/testing/cluster_fixture.h"
#include "tests/testing/observed_transport.h"
#include "worker/client/client.h"
#include "worker/resume_plan.h"

namespace osprey::worker {
namespace {

using testing::InprocCluster;
using testing::ObservedTransport;

constexpr uint32_t kSparse = 0, kDense = 1;

struct RankClient {
  RankClient(InprocCluster* cluster, int rank, uint64_t incarnation = 0) {
    auto t = std::make_unique<ObservedTransport>(cluster->NewTransport());
    transport = t.get();
    ClientOptions o;
    o.worker_rank = rank;
    o.incarnation = incarnation != 0 ? incarnation : 100 + rank;  // a process
    client = std::make_unique<Client>(o, std::move(t), cluster->map());
  }
  std::vector<int64_t> Clocks(int server) {
    std::vector<int64_t> words;
    Status s = client->Wait(client->AppliedClocks(server, &words));
    EXPECT_TRUE(s.ok()) << s.ToString();
    return words;
  }
  ObservedTransport* transport = nullptr;
  std::unique_ptr<Client> client;
};

TEST(ResumeFloorTest, AppliedClocksAreTheHighestClockTakenPerTableAndRank) {
  InprocCluster cluster(1);
  ASSERT_TRUE(cluster.ActivateAll().ok());
  RankClient a(&cluster, 3), b(&cluster, 4);
  ASSERT_TRUE(a.client->Start().ok());
  ASSERT_TRUE(b.client->Start().ok());
  EXPECT_EQ(a.Clocks(0), (std::vector<int64_t>{1, -1, -1})) << "nothing taken yet; a whole-job record";
  std::vector<uint64_t> keys = {5, 9};
  std::vector<float> grads(8, 0.1f), dense(10, 0.1f);
  for (int64_t clock = 0; clock < 5; ++clock) {
    ASSERT_TRUE(a.client->Wait(a.client->Push(kSparse, keys.data(), keys.size(), grads.data(), clock)).ok());
  }
  for (int64_t clock = 0; clock < 3; ++clock) {
    ASSERT_TRUE(a.client->Wait(a.client->PushDense(kDense, dense.data(), clock)).ok());
  }
  ASSERT_TRUE(b.client->Wait(b.client->PushDense(kDense, dense.data(), 7)).ok());
  EXPECT_EQ(a.Clocks(0), (std::vector<int64_t>{1, 4, 2}));
  EXPECT_EQ(b.Clocks(0), (std::vector<int64_t>{1, -1, 7})) << "per rank";
  // A bad server rank fails the ticket, naming it.
  std::vector<int64_t> words;
  Status s = a.client->Wait(a.client->AppliedClocks(5, &words));
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.ToString().find("server 5"), std::string::npos) << s.ToString();
}

TEST(ResumeFloorTest, AReplacementServerSaysItsRecordIsPartial) {
  InprocCluster cluster(1);
  cluster.server(0).SetReplacement(true);
  ASSERT_TRUE(cluster.ActivateAll().ok());
  RankClient a(&cluster, 0);
  ASSERT_TRUE(a.client->Start().ok());
  EXPECT_EQ(a.Clocks(0), (std::vector<int64_t>{0, -1, -1}));
}

TEST(ResumeFloorTest, PushesAtOrBelowTheFloorAreNotSent) {
  InprocCluster cluster(1);
  ASSERT_TRUE(cluster.ActivateAll().ok());
  RankClient a(&cluster, 0);
  ASSERT_TRUE(a.client->Start().ok());
  std::vector<uint64_t> keys = {5};
  std::vector<float> grads(4, 1.0f), before(4), after(4), dense(10, 1.0f);
  ASSERT_TRUE(a.client->Wait(a.client->Pull(kSparse, keys.data(), 1, before.data())).ok());
  a.client->SetPushFloors({{2, 0}});
  const size_t sent = a.transport->sent().size();
  ASSERT_TRUE(a.client->Wait(a.client->Push(kSparse, keys.data(), 1, grads.data(), 2)).ok());
  ASSERT_TRUE(a.client->Wait(a.client->PushDense(kDense, dense.data(), 0)).ok());
  EXPECT_EQ(a.transport->sent().size(), sent) << "both pushes are at their floor";
  EXPECT_EQ(a.client->pushes_suppressed(), 2u);
  ASSERT_TRUE(a.client->Wait(a.client->Pull(kSparse, keys.data(), 1, after.data())).ok());
  EXPECT_EQ(after, before) << "the suppressed push changed the row";
  ASSERT_TRUE(a.client->Wait(a.client->Push(kSparse, keys.data(), 1, grads.data(), 3)).ok());
  ASSERT_TRUE(a.client->Wait(a.client->PushDense(kDense, dense.data(), 1)).ok());
  EXPECT_EQ(a.client->pushes_suppressed(), 2u);
  ASSERT_TRUE(a.client->Wait(a.client->Pull(kSparse, keys.data(), 1, after.data())).ok());
  EXPECT_FLOAT_EQ(after[0], before[0] - 0.5f) << "the push above the floor was applied";
  EXPECT_EQ(a.Clocks(0), (std::vector<int64_t>{1, 3, 1}));
}

// Steps 0..5 reach both servers; step 6's dense push reaches server 0 only (the process was
// "killed" between the two messages). The restart replays from heard - 1 = 4 (the sparse table
// never got a push from the rank, so nothing shows a step complete there), sending steps 4 and 5
// nowhere and step 6 to server 1 only; a late push of the old process is refused.
TEST(ResumeFloorTest, PlanReplaysTheStepAKillCutInTwo) {
  std::vector<config::TableConfig> tables = testing::TestTables();
  tables[1].size = 64;  // 16 chunks: both servers hold some
  InprocCluster cluster(2, tables);
  ASSERT_TRUE(cluster.ActivateAll().ok());
  RankClient old_process(&cluster, 1);
  ASSERT_TRUE(old_process.client->Start().ok());
  std::vector<float> dense(64, 0.1f);
  for (int64_t clock = 0; clock < 6; ++clock) {
    ASSERT_TRUE(old_process.client->Wait(old_process.client->PushDense(kDense, dense.data(), clock)).ok());
  }
  ASSERT_TRUE(old_process.client->Wait(
      old_process.client->PushDense(kDense, dense.data(), 6, 0, std::vector<bool>{true, false})).ok());

  RankClient restart(&cluster, 1, /*incarnation=*/201);
  ASSERT_TRUE(restart.client->Start().ok());
  const ResumePlan plan = PlanExactResume(restart.client.get(), 1, /*heard=*/5, /*steps=*/100);
  EXPECT_EQ(plan.start, 4);
  ASSERT_EQ(plan.floors.size(), 2u);
  EXPECT_EQ(plan.floors[0], (std::vector<int64_t>{-1, 6}));
  EXPECT_EQ(plan.floors[1], (std::vector<int64_t>{-1, 5}));
  // The old process's push that arrives after the restart asked is refused, so the answer holds.
  Status late = old_process.client->Wait(
      old_process.client->PushDense(kDense, dense.data(), 6, 0, std::vector<bool>{false, true}));
  EXPECT_EQ(late.code(), StatusCode::kFailedPrecondition) << late.ToString();
  EXPECT_NE(late.ToString().find("a restarted process has taken its rank over"), std::string::npos);
  const size_t sent = restart.transport->sent().size();
  for (int64_t clock = plan.start; clock <= 6; ++clock) {
    ASSERT_TRUE(restart.client->Wait(restart.client->PushDense(kDense, dense.data(), clock)).ok());
  }
  EXPECT_EQ(restart.transport->sent().size(), sent + 1) << "only step 6, to server 1";
  EXPECT_EQ(restart.client->pushes_suppressed(), 5u);
  EXPECT_EQ(restart.Clocks(0)[2], 6);
  EXPECT_EQ(restart.Clocks(1)[2], 6);
}

}  // namespace
}  // namespace osprey::worker
