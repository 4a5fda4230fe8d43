// The client over real ZeroMQ sockets (ipc) with ClientOptions::receive_in_wait, the default: a
// Wait or WaitAll takes the replies itself when no other thread does, else sleeps until they are
// taken for it. Several threads waiting at once, pipelined tickets waited together, a failed
// ticket among them, and the same results with receive_in_wait off.
#include <unistd.h>

#include <algorithm>
#include <numeric>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "common/zmq_transport.h"
#include "tests/testing/cluster_fixture.h"
#include "worker/client/client.h"

namespace osprey::worker {
namespace {

using testing::InprocCluster;

std::string Endpoint(int server) {
  return "ipc://" + ::testing::TempDir() + "/receive-in-wait-" + std::to_string(::getpid()) + "-" +
         std::to_string(server) + ".sock";
}

class ReceiveInWaitTest : public ::testing::TestWithParam<bool> {
 protected:
  void SetUp() override {
    ASSERT_TRUE(cluster_.ActivateAll().ok());
    ClientOptions o;
    o.timeout_ms = 20000;
    o.max_inflight = 8;
    o.receive_in_wait = GetParam();
    client_ = std::make_unique<Client>(o, cluster_.NewTransport(), cluster_.map());
    ASSERT_TRUE(client_->Start().ok());
  }
  void TearDown() override { client_->Stop(); }

  InprocCluster cluster_{3, testing::TestTables(),
                         [] { return std::make_unique<ZmqTransport>(TransportOptions{}); }, Endpoint};
  std::unique_ptr<Client> client_;
};

// Four threads, each with several pulls in flight waited together and single pulls waited alone;
// every pull must give exactly the rows a lone pull of the same keys gives.
TEST_P(ReceiveInWaitTest, ThreadsWaitingAtOnceGetTheirOwnRows) {
  constexpr int kThreads = 4, kKeys = 200, kRounds = 15, kInFlight = 3;
  std::vector<std::vector<uint64_t>> keys(kThreads);
  for (int t = 0; t < kThreads; ++t) {
    for (int i = 0; i < kKeys; ++i) keys[t].push_back(uint64_t{7919} * (t * kKeys + i) % 4001);
  }
  // Rows differ per key: push a key-dependent gradient once.
  for (int t = 0; t < kThreads; ++t) {
    std::vector<float> g(kKeys * 4);
    for (int i = 0; i < kKeys * 4; ++i) g[i] = static_cast<float>(keys[t][i / 4] % 97) * 0.01f + i % 4;
    ASSERT_TRUE(client_->Wait(client_->Push(0, keys[t].data(), kKeys, g.data())).ok());
  }
  std::vector<std::vector<float>> expect(kThreads, std::vector<float>(kKeys * 4));
  for (int t = 0; t < kThreads; ++t) {
    ASSERT_TRUE(client_->Wait(client_->Pull(0, keys[t].data(), kKeys, expect[t].data())).ok());
  }
  std::vector<int> mismatches(kThreads, 0), failures(kThreads, 0);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      std::vector<std::vector<float>> outs(kInFlight, std::vector<float>(kKeys * 4));
      for (int r = 0; r < kRounds; ++r) {
        std::vector<Ticket> tickets;
        for (auto& o : outs) {
          std::fill(o.begin(), o.end(), -1.0f);
          tickets.push_back(client_->Pull(0, keys[t].data(), kKeys, o.data()));
        }
        Status s = r % 2 == 0 ? client_->WaitAll(tickets) : Status::OK();
        if (r % 2 == 1) {
          for (Ticket k : tickets) {
            Status one = client_->Wait(k);
            if (s.ok()) s = one;
          }
        }
        if (!s.ok()) ++failures[t];
        for (auto& o : outs) mismatches[t] += o != expect[t] ? 1 : 0;
      }
    });
  }
  for (auto& th : threads) th.join();
  for (int t = 0; t < kThreads; ++t) {
    EXPECT_EQ(failures[t], 0) << "thread " << t;
    EXPECT_EQ(mismatches[t], 0) << "thread " << t;
  }
}

// WaitAll waits every ticket (each is gone afterwards) and returns the first error: a push to the
// dense table through the sparse call fails at once among pipelined dense pushes that succeed.
TEST_P(ReceiveInWaitTest, WaitAllReturnsTheFirstErrorAndWaitsEveryTicket) {
  std::vector<float> grads(10, 0.5f), before(10), after(10);
  ASSERT_TRUE(client_->Wait(client_->PullDense(1, before.data())).ok());
  const uint64_t key = 1;
  std::vector<float> row(4, 1.0f);
  std::vector<Ticket> tickets;
  for (int i = 0; i < 6; ++i) tickets.push_back(client_->PushDense(1, grads.data()));
  tickets.insert(tickets.begin() + 3, client_->Push(1, &key, 1, row.data()));  // wrong table kind
  Status s = client_->WaitAll(tickets);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s.ToString();
  for (Ticket t : tickets) EXPECT_EQ(client_->Wait(t).code(), StatusCode::kInvalidArgument) << "waited twice";
  // The six good pushes were applied (SGD lr 0.5): each element moved by 6 x 0.5 x 0.5.
  ASSERT_TRUE(client_->Wait(client_->PullDense(1, after.data())).ok());
  for (int i = 0; i < 10; ++i) EXPECT_FLOAT_EQ(after[i], before[i] - 6 * 0.25f) << "element " << i;
  EXPECT_TRUE(client_->WaitAll({}).ok());
}

INSTANTIATE_TEST_SUITE_P(ReceiveInWait, ReceiveInWaitTest, ::testing::Bool(),
                         [](const ::testing::TestParamInfo<bool>& p) { return p.param ? "On" : "Off"; });

}  // namespace
}  // namespace osprey::worker
