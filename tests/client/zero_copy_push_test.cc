// The zero-copy sparse push: keys and rows handed over as Buffers go out as the message's frames
// themselves (the frame the transport is given points at the caller's memory), and the client
// keeps the caller's memory alive until the transport has sent it.
#include <gtest/gtest.h>

#include <atomic>
#include <numeric>

#include "common/placement.h"
#include "tests/testing/cluster_fixture.h"
#include "tests/testing/observed_transport.h"
#include "worker/client/client.h"

namespace osprey::worker {
namespace {

using testing::InprocCluster;
using testing::ObservedTransport;

// A Buffer over a fresh copy of `v` whose owner sets *freed when the last view lets go.
template <typename T>
Buffer TrackedBuffer(const std::vector<T>& v, std::atomic<bool>* freed) {
  auto* bytes = new std::vector<T>(v);
  std::shared_ptr<const void> owner(bytes, [freed](const std::vector<T>* p) {
    delete p;
    freed->store(true);
  });
  return Buffer(owner, bytes->data(), bytes->size() * sizeof(T));
}

struct ObservedClient {
  explicit ObservedClient(InprocCluster* cluster) {
    auto t = std::make_unique<ObservedTransport>(cluster->NewTransport());
    transport = t.get();
    client = std::make_unique<Client>(ClientOptions{}, std::move(t), cluster->map());
  }
  ObservedTransport* transport = nullptr;
  std::unique_ptr<Client> client;
};

TEST(ZeroCopyPushTest, OneServerSendsTheCallersBuffersAsTheFrames) {
  InprocCluster cluster(1);
  ASSERT_TRUE(cluster.ActivateAll().ok());
  ObservedClient c(&cluster);
  ASSERT_TRUE(c.client->Start().ok());
  std::vector<uint64_t> keys = {5, 9, 2, 5};
  std::vector<float> before(16), after(16), grads(16, 1.0f);
  ASSERT_TRUE(c.client->Wait(c.client->Pull(0, keys.data(), keys.size(), before.data())).ok());
  Buffer kb = Buffer::Copy(keys.data(), keys.size() * sizeof(uint64_t));
  Buffer rb = Buffer::Copy(grads.data(), grads.size() * sizeof(float));
  ASSERT_TRUE(c.client->Wait(c.client->Push(0, kb, rb)).ok());
  const testing::SentFrame last = c.transport->sent().back();
  EXPECT_EQ(last.keys, kb.data()) << "the keys frame is a copy";
  EXPECT_EQ(last.keys_size, kb.size());
  EXPECT_EQ(last.values, rb.data()) << "the rows frame is a copy";
  EXPECT_EQ(last.values_size, rb.size());
  ASSERT_TRUE(c.client->Wait(c.client->Pull(0, keys.data(), keys.size(), after.data())).ok());
  EXPECT_FLOAT_EQ(after[0], before[0] - 1.0f);  // key 5 twice: two SGD steps of 0.5
  EXPECT_FLOAT_EQ(after[4], before[4] - 0.5f);
  // Sizes that do not make n keys and n rows are refused before anything is sent.
  const size_t sent = c.transport->sent().size();
  Status s = c.client->Wait(c.client->Push(0, kb, rb.Slice(0, rb.size() - 4)));
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s.ToString();
  EXPECT_EQ(c.client->Wait(c.client->Push(1, kb, rb)).code(), StatusCode::kInvalidArgument);  // dense
  EXPECT_EQ(c.transport->sent().size(), sent);
}

TEST(ZeroCopyPushTest, PushByServerSendsSlicesOfTheCallersBuffers) {
  InprocCluster cluster(3);
  ASSERT_TRUE(cluster.ActivateAll().ok());
  ObservedClient c(&cluster);
  ASSERT_TRUE(c.client->Start().ok());
  const int dim = cluster.map().tables(0).dim();
  std::vector<uint64_t> keys;
  std::vector<int32_t> counts(3, 0);
  for (int s = 0; s < 3; ++s) {
    for (uint64_t k = 100; k < 160; ++k) {
      if (ServerForKey(0, k, 3) != s) continue;
      keys.push_back(k);
      ++counts[s];
    }
  }
  ASSERT_GT(*std::min_element(counts.begin(), counts.end()), 0);
  std::vector<float> grads(keys.size() * dim, 2.0f), before(grads.size()), after(grads.size());
  ASSERT_TRUE(c.client->Wait(c.client->Pull(0, keys.data(), keys.size(), before.data())).ok());
  Buffer kb = Buffer::Copy(keys.data(), keys.size() * sizeof(uint64_t));
  Buffer rb = Buffer::Copy(grads.data(), grads.size() * sizeof(float));
  const size_t first_sent = c.transport->sent().size();
  ASSERT_TRUE(c.client->Wait(c.client->PushByServer(0, kb, rb, counts.data())).ok());
  const std::vector<testing::SentFrame> sent = c.transport->sent();
  ASSERT_EQ(sent.size(), first_sent + 3);
  size_t first = 0;
  for (int s = 0; s < 3; ++s) {
    const testing::SentFrame& f = sent[first_sent + s];
    EXPECT_EQ(f.keys, kb.data() + first * sizeof(uint64_t)) << "server " << s;
    EXPECT_EQ(f.values, rb.data() + first * dim * sizeof(float)) << "server " << s;
    EXPECT_EQ(f.values_size, counts[s] * dim * sizeof(float)) << "server " << s;
    first += counts[s];
  }
  ASSERT_TRUE(c.client->Wait(c.client->Pull(0, keys.data(), keys.size(), after.data())).ok());
  for (size_t i = 0; i < grads.size(); ++i) ASSERT_FLOAT_EQ(after[i], before[i] - 1.0f) << "float " << i;
  // Cast rows cannot be the caller's memory; the keys still are.
  StatusOr<std::unique_ptr<PushEncoder>> bf16 = MakeRowCastEncoder(proto::CODEC_BF16);
  ASSERT_TRUE(bf16.ok());
  ASSERT_TRUE(c.client->SetEncoder(0, std::move(*bf16)).ok());
  ASSERT_TRUE(c.client->Wait(c.client->PushByServer(0, kb, rb, counts.data())).ok());
  const testing::SentFrame cast = c.transport->sent().back();
  EXPECT_EQ(cast.keys, kb.data() + (counts[0] + counts[1]) * sizeof(uint64_t));
  EXPECT_EQ(cast.values_size, counts[2] * dim * sizeof(uint16_t));
}

// The caller drops its Buffers right after the call; while the transport still holds the
// message the memory must stay alive, and the server must receive the caller's values.
TEST(ZeroCopyPushTest, KeepsTheCallersBuffersAliveUntilSent) {
  std::atomic<bool> keys_freed{false}, rows_freed{false};
  {
    InprocCluster cluster(1);
    ASSERT_TRUE(cluster.ActivateAll().ok());
    ObservedClient c(&cluster);
    ASSERT_TRUE(c.client->Start().ok());
    std::vector<uint64_t> keys = {11, 12, 13};
    std::vector<float> before(12), after(12);
    ASSERT_TRUE(c.client->Wait(c.client->Pull(0, keys.data(), keys.size(), before.data())).ok());
    c.transport->HoldSends(true);
    Ticket t;
    {
      Buffer kb = TrackedBuffer(keys, &keys_freed);
      Buffer rb = TrackedBuffer(std::vector<float>(12, 4.0f), &rows_freed);
      t = c.client->Push(0, kb, rb);
    }
    ASSERT_EQ(c.transport->held(), 1u);
    EXPECT_FALSE(keys_freed.load()) << "the keys were freed before they were sent";
    EXPECT_FALSE(rows_freed.load()) << "the rows were freed before they were sent";
    c.transport->HoldSends(false);
    ASSERT_TRUE(c.transport->ReleaseHeld().ok());
    ASSERT_TRUE(c.client->Wait(t).ok());
    ASSERT_TRUE(c.client->Wait(c.client->Pull(0, keys.data(), keys.size(), after.data())).ok());
    for (size_t i = 0; i < after.size(); ++i) ASSERT_FLOAT_EQ(after[i], before[i] - 2.0f) << "float " << i;
    c.client->Stop();
  }
  // Nothing keeps them once client, transport and servers are gone.
  EXPECT_TRUE(keys_freed.load());
  EXPECT_TRUE(rows_freed.load());
}

}  // namespace
}  // namespace osprey::worker
