// WorkersAtBarrier (server/barrier_workers.h): which workers a server's step barrier waits for,
// and which left it, from the coordinator's ClusterState.
#include <gtest/gtest.h>

#include "server/barrier_workers.h"

namespace osprey::server {
namespace {

void AddNode(proto::ClusterState* st, proto::Role role, int rank, bool alive, bool exempt) {
  proto::NodeState* n = st->add_nodes();
  n->set_role(role);
  n->set_rank(rank);
  n->set_alive(alive);
  n->set_barrier_exempt(exempt);
}

TEST(BarrierWorkersTest, LiveWorkersLessThoseThatLeftTheBarrier) {
  proto::ClusterState st;
  AddNode(&st, proto::ROLE_SERVER, 0, true, false);
  AddNode(&st, proto::ROLE_WORKER, 0, true, false);
  AddNode(&st, proto::ROLE_WORKER, 1, true, true);    // left the barrier
  AddNode(&st, proto::ROLE_WORKER, 2, false, false);  // dead: neither
  AddNode(&st, proto::ROLE_WORKER, 4, false, true);   // dead: neither
  AddNode(&st, proto::ROLE_WORKER, 3, true, false);
  BarrierWorkers at = WorkersAtBarrier(st);
  EXPECT_EQ(at.holding, (std::vector<int>{0, 3}));
  EXPECT_EQ(at.left, (std::vector<int>{1}));
}

TEST(BarrierWorkersTest, WhenEveryLiveWorkerLeftAllOfThemHoldIt) {
  proto::ClusterState st;
  AddNode(&st, proto::ROLE_WORKER, 0, true, true);
  AddNode(&st, proto::ROLE_WORKER, 1, true, true);
  AddNode(&st, proto::ROLE_WORKER, 2, false, true);
  BarrierWorkers at = WorkersAtBarrier(st);
  EXPECT_EQ(at.holding, (std::vector<int>{0, 1}));
  EXPECT_TRUE(at.left.empty());
  EXPECT_TRUE(WorkersAtBarrier(proto::ClusterState()).holding.empty());
}

}  // namespace
}  // namespace osprey::server
