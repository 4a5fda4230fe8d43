// The RdmaTransport's protocol over LoopbackVerbsForTesting (the verbs test double: no RDMA NIC
// here): ring wrap-around, credit exhaustion and return, rendezvous reads, the MR cache,
// completion errors that tear down one peer only, dropped connections and reconnects, delayed
// completions and a CQ overrun. The Transport contract itself is rdma_conformance_test.
#include <atomic>
#include <chrono>
#include <cstring>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>

#include <gtest/gtest.h>

#include "common/rdma/loopback_verbs_for_testing.h"
#include "common/rdma/rdma_transport.h"
#include "tests/common/transport_test_util.h"

namespace osprey::rdma {
namespace {

using osprey::testing::Collector;
using osprey::testing::Eventually;
using osprey::testing::MakeMessage;
using osprey::testing::Str;

class RdmaProtocolTest : public ::testing::Test {
 protected:
  std::unique_ptr<RdmaTransport> New(const RdmaOptions& o,
                                     std::shared_ptr<LoopbackVerbsForTesting>* verbs = nullptr) {
    auto v = fabric_->NewVerbs();
    if (verbs != nullptr) *verbs = v;
    return std::make_unique<RdmaTransport>(o, v);
  }
  // A started echo listener; *endpoint is where it listens.
  std::unique_ptr<RdmaTransport> Echo(const RdmaOptions& o, std::string* endpoint,
                                      std::shared_ptr<LoopbackVerbsForTesting>* verbs = nullptr) {
    auto s = New(o, verbs);
    auto ep = s->Listen("rdma://10.0.0.1:0");
    EXPECT_TRUE(ep.ok()) << ep.status().ToString();
    *endpoint = *ep;
    RdmaTransport* t = s.get();
    s->SetHandler([t](Message&& m) { (void)t->Send(std::move(m)); });
    EXPECT_TRUE(s->Start().ok());
    return s;
  }
  std::shared_ptr<LoopbackFabricForTesting> fabric_ = std::make_shared<LoopbackFabricForTesting>();
};

TEST_F(RdmaProtocolTest, RingWrapsAroundManyTimesInOrder) {
  RdmaOptions o;
  o.ring_slots = 4;
  o.slot_bytes = 1024;
  std::string ep;
  auto server = Echo(o, &ep);
  Collector replies;
  auto client = New(o);
  client->SetHandler(replies.handler());
  PeerId peer = *client->Connect(ep);
  ASSERT_TRUE(client->Start().ok());
  constexpr int kN = 300;  // 75 trips round a 4-slot ring
  for (int i = 0; i < kN; ++i) {
    ASSERT_TRUE(client->Send(MakeMessage(peer, "h" + std::to_string(i), std::string(i % 500, 'k'),
                                         std::to_string(i * 31))).ok());
  }
  ASSERT_TRUE(replies.WaitFor(kN));
  auto got = replies.Take();
  for (int i = 0; i < kN; ++i) {
    ASSERT_EQ(Str(got[i].header), "h" + std::to_string(i));
    EXPECT_EQ(got[i].keys.size(), static_cast<size_t>(i % 500));
    EXPECT_EQ(Str(got[i].values), std::to_string(i * 31));
  }
  EXPECT_GE(client->rdma_stats().writes, static_cast<uint64_t>(kN));
  EXPECT_GT(client->rdma_stats().credit_stalls, 0u);  // 300 sends into 4 slots must wait
}

TEST_F(RdmaProtocolTest, SenderWaitsForCreditAndNeverOverwritesASlot) {
  RdmaOptions o;
  o.ring_slots = 4;
  o.slot_bytes = 512;
  auto server = New(o);
  auto ep = server->Listen("rdma://10.0.0.1:0");
  ASSERT_TRUE(ep.ok());
  std::atomic<bool> release{false};
  Collector received;
  auto collect = received.handler();
  server->SetHandler([&](Message&& m) {
    // The first message blocks the poller: the receiver frees no slot and returns no credit.
    if (received.size() == 0) {
      while (!release.load()) std::this_thread::yield();
    }
    collect(std::move(m));
  });
  ASSERT_TRUE(server->Start().ok());
  auto client = New(o);
  client->SetHandler([](Message&&) {});
  PeerId peer = *client->Connect(*ep);
  ASSERT_TRUE(client->Start().ok());
  constexpr int kN = 20;
  for (int i = 0; i < kN; ++i) {
    ASSERT_TRUE(client->Send(MakeMessage(peer, std::to_string(i), "", std::string(100, 'a' + i % 26)))
                    .ok());  // Send never blocks: the rest wait in the queue
  }
  // The ring takes 4. The receiver frees a slot when it copies it out, which it does for each
  // completion of the batch it polled before its handler blocked (at most the 4 in its ring), so
  // the sender gets at most 4 more credits, then must wait -- 16 messages stay queued.
  ASSERT_TRUE(Eventually([&] { return client->rdma_stats().credit_stalls > 0; }));
  ASSERT_TRUE(Eventually([&] { return client->rdma_stats().writes >= 4; }));
  EXPECT_LE(client->rdma_stats().writes, 8u);
  release = true;
  ASSERT_TRUE(received.WaitFor(kN));
  auto got = received.Take();
  for (int i = 0; i < kN; ++i) {
    EXPECT_EQ(Str(got[i].header), std::to_string(i));
    EXPECT_EQ(Str(got[i].values), std::string(100, 'a' + i % 26));  // no slot overwritten
  }
  EXPECT_GT(server->rdma_stats().control_writes, 0u);  // credits went back
}

TEST_F(RdmaProtocolTest, LargeFramesGoByRdmaReadFromTheSendersRegisteredBuffer) {
  RdmaOptions o;
  o.rendezvous_threshold = 4096;
  std::string ep;
  Collector received;
  auto server = New(o);
  ep = *server->Listen("rdma://10.0.0.1:0");
  server->SetHandler(received.handler());
  ASSERT_TRUE(server->Start().ok());
  auto client = New(o);
  client->SetHandler([](Message&&) {});
  PeerId peer = *client->Connect(ep);
  ASSERT_TRUE(client->Start().ok());

  Buffer big = Buffer::Allocate(1 << 20);
  for (size_t i = 0; i < big.size(); ++i) big.mutable_data()[i] = static_cast<uint8_t>(i * 13);
  for (int i = 0; i < 3; ++i) {
    Message m = MakeMessage(peer, "big", "small keys", "");
    m.values = big;  // the same registered buffer each time
    ASSERT_TRUE(client->Send(std::move(m)).ok());
  }
  ASSERT_TRUE(received.WaitFor(3));
  for (const Message& m : received.Take()) {
    EXPECT_EQ(Str(m.keys), "small keys");
    ASSERT_EQ(m.values.size(), big.size());
    EXPECT_EQ(std::memcmp(m.values.data(), big.data(), big.size()), 0);
  }
  EXPECT_EQ(fabric_->reads(), 3u);
  EXPECT_EQ(client->rdma_stats().rendezvous_frames, 3u);
  MrCacheStats c = client->mr_cache_stats();
  EXPECT_EQ(c.misses, 1u);  // registered once ...
  EXPECT_EQ(c.hits, 2u);    // ... and found in the cache after
}

TEST(MrCacheTest, HitsEvictionsAndInvalidation) {
  auto fabric = std::make_shared<LoopbackFabricForTesting>();
  std::shared_ptr<Verbs> verbs = fabric->NewVerbs();
  MrCache cache(verbs, /*capacity=*/2);
  std::vector<Buffer> bufs;
  for (int i = 0; i < 3; ++i) bufs.push_back(Buffer::Allocate(3 * 4096));
  auto a = cache.Acquire(bufs[0].data(), 100);
  ASSERT_TRUE(a.ok());
  cache.Release(*a);
  auto a2 = cache.Acquire(bufs[0].data() + 50, 50);  // inside the same region
  ASSERT_TRUE(a2.ok());
  EXPECT_EQ(a2->rkey, a->rkey);
  cache.Release(*a2);
  EXPECT_EQ(cache.stats().hits, 1u);
  for (int i = 1; i < 3; ++i) cache.Release(*cache.Acquire(bufs[i].data(), 100));
  EXPECT_EQ(cache.size(), 2u);
  EXPECT_EQ(cache.stats().evictions, 1u);  // bufs[0]'s, the least recently used
  auto again = cache.Acquire(bufs[0].data(), 100);
  EXPECT_EQ(cache.stats().misses, 4u);
  // Invalidation while in use: dropped from the cache, deregistered when released. Only the
  // 100 bytes in use: the cache registers whole pages, so invalidating all of bufs[0] would also
  // (rightly) drop bufs[1]'s region whenever the allocator put bufs[1] within a page of its end.
  cache.Invalidate(bufs[0].data(), 100);
  EXPECT_EQ(cache.stats().invalidations, 1u);
  cache.Release(*again);
  auto fresh = cache.Acquire(bufs[0].data(), 100);
  EXPECT_EQ(cache.stats().misses, 5u);
  EXPECT_NE(fresh->rkey, again->rkey);
  cache.Release(*fresh);
  // A region whose Buffer owner died is not trusted again.
  Buffer owned = Buffer::Allocate(8192);
  const void* where = owned.data();
  cache.Release(*cache.Acquire(where, 64, owned.owner()));
  owned = Buffer();
  auto after = cache.Acquire(where, 64);
  EXPECT_GE(cache.stats().invalidations, 2u);
  cache.Release(*after);
}

TEST_F(RdmaProtocolTest, CompletionErrorTearsDownOnlyThatPeer) {
  RdmaOptions o;
  o.reconnect_interval_ms = 3600 * 1000;  // no reconnect within this test
  std::string ep;
  auto server = Echo(o, &ep);
  std::shared_ptr<LoopbackVerbsForTesting> bad_verbs;
  Collector bad_replies, good_replies;
  auto bad = New(o, &bad_verbs), good = New(o);
  bad->SetHandler(bad_replies.handler());
  good->SetHandler(good_replies.handler());
  PeerId bp = *bad->Connect(ep), gp = *good->Connect(ep);
  ASSERT_TRUE(bad->Start().ok());
  ASSERT_TRUE(good->Start().ok());
  ASSERT_TRUE(bad->Send(MakeMessage(bp, "before", "", "")).ok());
  ASSERT_TRUE(bad_replies.WaitFor(1));

  bad_verbs->FailNextWrites(1);
  ASSERT_TRUE(bad->Send(MakeMessage(bp, "lost", "", "")).ok());  // queued: the write fails
  ASSERT_TRUE(Eventually([&] { return !bad->PeerStatus(bp).ok(); }));
  Status why = bad->PeerStatus(bp);
  EXPECT_EQ(why.code(), StatusCode::kUnavailable);
  EXPECT_NE(why.message().find("injected completion error"), std::string::npos) << why.ToString();
  Status send = bad->Send(MakeMessage(bp, "after", "", ""));
  EXPECT_EQ(send.code(), StatusCode::kUnavailable);
  EXPECT_NE(send.message().find("injected completion error"), std::string::npos) << send.ToString();

  for (int i = 0; i < 50; ++i) ASSERT_TRUE(good->Send(MakeMessage(gp, "g", std::to_string(i), "")).ok());
  ASSERT_TRUE(good_replies.WaitFor(50));  // the other peer goes on
  EXPECT_TRUE(good->PeerStatus(gp).ok());
  EXPECT_EQ(bad_replies.size(), 1u);
}

TEST_F(RdmaProtocolTest, DroppedConnectionReconnectsWithTheSamePeerIds) {
  RdmaOptions o;
  o.reconnect_interval_ms = 5;
  std::string ep;
  std::mutex mu;
  std::set<PeerId> server_peers;
  auto server = New(o);
  ep = *server->Listen("rdma://10.0.0.1:0");
  RdmaTransport* s = server.get();
  server->SetHandler([&, s](Message&& m) {
    {
      std::lock_guard<std::mutex> lock(mu);
      server_peers.insert(m.peer);
    }
    (void)s->Send(std::move(m));
  });
  ASSERT_TRUE(server->Start().ok());
  std::shared_ptr<LoopbackVerbsForTesting> cv;
  Collector replies;
  auto client = New(o, &cv);
  client->SetHandler(replies.handler());
  PeerId peer = *client->Connect(ep);
  ASSERT_TRUE(client->Start().ok());
  ASSERT_TRUE(client->Send(MakeMessage(peer, "one", "", "")).ok());
  ASSERT_TRUE(replies.WaitFor(1));

  cv->DropConnections();
  ASSERT_TRUE(Eventually([&] { return client->rdma_stats().reconnects >= 1; }));
  ASSERT_TRUE(Eventually([&] { return client->PeerStatus(peer).ok(); }));
  ASSERT_TRUE(Eventually([&] { return client->Send(MakeMessage(peer, "two", "", "")).ok(); }));
  ASSERT_TRUE(replies.WaitFor(2));
  EXPECT_EQ(Str(replies.Take()[1].header), "two");
  EXPECT_GE(server->rdma_stats().reconnects, 1u);
  std::lock_guard<std::mutex> lock(mu);
  EXPECT_EQ(server_peers.size(), 1u);  // the listener kept the dialer's PeerId
}

TEST_F(RdmaProtocolTest, DelayedCompletionsKeepOrder) {
  RdmaOptions o;
  o.ring_slots = 8;
  std::string ep;
  std::shared_ptr<LoopbackVerbsForTesting> sv;
  auto server = Echo(o, &ep, &sv);
  sv->DelayCompletions(std::chrono::milliseconds(20));
  Collector replies;
  auto client = New(o);
  client->SetHandler(replies.handler());
  PeerId peer = *client->Connect(ep);
  ASSERT_TRUE(client->Start().ok());
  for (int i = 0; i < 40; ++i) {
    ASSERT_TRUE(client->Send(MakeMessage(peer, std::to_string(i), "", "")).ok());
  }
  ASSERT_TRUE(replies.WaitFor(40));
  auto got = replies.Take();
  for (int i = 0; i < 40; ++i) EXPECT_EQ(Str(got[i].header), std::to_string(i));
}

TEST_F(RdmaProtocolTest, CqOverrunFailsEveryPeerClearlyWithoutHanging) {
  RdmaOptions o;
  std::string ep;
  std::shared_ptr<LoopbackVerbsForTesting> sv;
  auto server = New(o, &sv);
  ep = *server->Listen("rdma://10.0.0.1:0");
  std::atomic<bool> release{false};
  server->SetHandler([&](Message&&) {
    while (!release.load()) std::this_thread::yield();  // the CQ fills while this blocks
  });
  ASSERT_TRUE(server->Start().ok());
  sv->SetCqCapacity(4);
  auto client = New(o);
  client->SetHandler([](Message&&) {});
  PeerId peer = *client->Connect(ep);
  ASSERT_TRUE(client->Start().ok());
  for (int i = 0; i < 10; ++i) ASSERT_TRUE(client->Send(MakeMessage(peer, "x", "", "")).ok());
  ASSERT_TRUE(Eventually([&] { return client->rdma_stats().writes >= 6; }));
  release = true;
  ASSERT_TRUE(Eventually([&] { return !server->PeerStatus(0).ok(); }));
  EXPECT_NE(server->PeerStatus(0).message().find("completion queue overrun"), std::string::npos)
      << server->PeerStatus(0).ToString();
  server->Stop();
  client->Stop();
}

TEST_F(RdmaProtocolTest, AnOversizedRendezvousFrameTearsThePeerDownBeforeAllocating) {
  RdmaOptions small;
  small.max_frame_bytes = 100000;
  small.reconnect_interval_ms = 3600 * 1000;
  Collector received;
  auto server = New(small);
  std::string ep = *server->Listen("rdma://10.0.0.1:0");
  server->SetHandler(received.handler());
  ASSERT_TRUE(server->Start().ok());
  auto client = New(small);
  client->SetHandler([](Message&&) {});
  PeerId peer = *client->Connect(ep);
  ASSERT_TRUE(client->Start().ok());
  ASSERT_TRUE(client->Send(MakeMessage(peer, "ok", "", std::string(50000, 'v'))).ok());
  ASSERT_TRUE(received.WaitFor(1));
  ASSERT_TRUE(client->Send(MakeMessage(peer, "big", "", std::string(200000, 'v'))).ok());
  ASSERT_TRUE(Eventually([&] { return !server->PeerStatus(0).ok(); }));
  EXPECT_EQ(server->PeerStatus(0).code(), StatusCode::kDataLoss);
  EXPECT_NE(server->PeerStatus(0).message().find("max_frame_bytes"), std::string::npos);
  EXPECT_EQ(server->stats().malformed_received, 1u);
  EXPECT_EQ(received.size(), 1u);
}

TEST_F(RdmaProtocolTest, BadEndpointsAndOptionsAreRefusedByName) {
  auto t = New(RdmaOptions{});
  auto st = t->Listen("tcp://127.0.0.1:5").status();
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("tcp://127.0.0.1:5"), std::string::npos);
  EXPECT_EQ(t->Connect("rdma://nohost").status().code(), StatusCode::kInvalidArgument);
  RdmaOptions o;
  o.ring_slots = 5000;
  EXPECT_NE(CheckRdmaOptions(o).message().find("ring_slots"), std::string::npos);
  o = RdmaOptions{};
  o.slot_bytes = 1 << 20;
  EXPECT_NE(CheckRdmaOptions(o).message().find("slot_bytes"), std::string::npos);
  EXPECT_TRUE(CheckRdmaOptions(RdmaOptions{}).ok());
}

}  // namespace
}  // namespace osprey::rdma
