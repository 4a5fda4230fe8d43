// WorkersHoldingBarrier (server/barrier_workers.h): which workers a server's step barrier waits
// for, from the coordinator's ClusterState.
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
  AddNode(&st, proto::ROLE_WORKER, 2, false, false);  // dead
  AddNode(&st, proto::ROLE_WORKER, 3, true, false);
  EXPECT_EQ(WorkersHoldingBarrier(st), (std::vector<int>{0, 3}));
}

TEST(BarrierWorkersTest, WhenEveryLiveWorkerLeftAllOfThemHoldIt) {
  proto::ClusterState st;
  AddNode(&st, proto::ROLE_WORKER, 0, true, true);
  AddNode(&st, proto::ROLE_WORKER, 1, true, true);
  AddNode(&st, proto::ROLE_WORKER, 2, false, true);
  EXPECT_EQ(WorkersHoldingBarrier(st), (std::vector<int>{0, 1}));
  EXPECT_TRUE(WorkersHoldingBarrier(proto::ClusterState()).empty());
}

}  // namespace
}  // namespace osprey::server
