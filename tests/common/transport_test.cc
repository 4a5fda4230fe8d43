// The Transport contract, checked for every implementation: ZeroMQ over tcp (port 0) and ipc (a
// temp dir), and the in-process transport. Built a second time with OSPREY_TRANSPORT_TEST_RDMA
// (tests/rdma: rdma_conformance_test) for RdmaTransport over the loopback verbs test double. Implementation-specific behaviour (malformed frames
// from a raw ZeroMQ peer, zero-copy ownership, the hub, fault injection) is tested in
// zmq_transport_test.cc and inproc_transport_test.cc.
#include <stdlib.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <map>
#include <set>
#include <thread>

#include <gtest/gtest.h>

#include "common/inproc_transport.h"
#include "tests/common/transport_test_util.h"
#ifdef OSPREY_TRANSPORT_TEST_RDMA
#include "common/rdma/loopback_verbs_for_testing.h"
#include "common/rdma/rdma_transport.h"
#endif

namespace osprey {
namespace {

using testing::Bytes;
using testing::Collector;
using testing::MakeMessage;
using testing::Str;

class TransportTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    hub_ = std::make_shared<InprocHub>();
    if (GetParam() == "ipc") {
      char tmpl[] = "/tmp/osprey-transport-test-XXXXXX";
      ASSERT_NE(mkdtemp(tmpl), nullptr);
      dir_ = tmpl;
    }
  }
  void TearDown() override {
    if (!dir_.empty()) {
      for (const std::string& f : ipc_files_) ::unlink(f.c_str());
      ::rmdir(dir_.c_str());
    }
  }

  std::unique_ptr<Transport> Make() {
#ifdef OSPREY_TRANSPORT_TEST_RDMA
    if (GetParam() == "rdma") {
      return std::make_unique<rdma::RdmaTransport>(rdma::RdmaOptions{}, fabric_->NewVerbs());
    }
#endif
    TransportOptions o;
    o.kind = GetParam() == "inproc" ? "inproc" : "zmq";
    o.hub = hub_;
    auto t = MakeTransport(o);
    EXPECT_TRUE(t.ok()) << t.status().ToString();
    return std::move(t).value();
  }
  // A listen endpoint for this implementation; `name` keeps ipc paths and inproc names apart.
  std::string Endpoint(const std::string& name) {
    if (GetParam() == "tcp") return "tcp://127.0.0.1:0";
    if (GetParam() == "rdma") return "rdma://127.0.0.1:0";
    if (GetParam() == "ipc") {
      ipc_files_.push_back(dir_ + "/" + name);
      return "ipc://" + dir_ + "/" + name;
    }
    return "inproc://" + name;
  }

  // A started listener whose handler sends every message back to its sender.
  std::unique_ptr<Transport> StartEchoServer(std::string* endpoint) {
    auto server = Make();
    auto ep = server->Listen(Endpoint("echo"));
    EXPECT_TRUE(ep.ok()) << ep.status().ToString();
    *endpoint = *ep;
    Transport* t = server.get();
    server->SetHandler([t](Message&& m) { EXPECT_TRUE(t->Send(std::move(m)).ok()); });
    EXPECT_TRUE(server->Start().ok());
    return server;
  }

  std::shared_ptr<InprocHub> hub_;
#ifdef OSPREY_TRANSPORT_TEST_RDMA
  std::shared_ptr<rdma::LoopbackFabricForTesting> fabric_ =
      std::make_shared<rdma::LoopbackFabricForTesting>();
#endif
  std::string dir_;
  std::vector<std::string> ipc_files_;
};

TEST_P(TransportTest, RoundTripKeepsAllThreeFrames) {
  std::string ep;
  auto server = StartEchoServer(&ep);
  Collector replies;
  auto client = Make();
  client->SetHandler(replies.handler());
  auto peer = client->Connect(ep);
  ASSERT_TRUE(peer.ok()) << peer.status().ToString();
  ASSERT_TRUE(client->Start().ok());

  std::string values(100000, 'v');  // above the zero-copy threshold
  for (size_t i = 0; i < values.size(); ++i) values[i] = static_cast<char>(i * 7);
  ASSERT_TRUE(client->Send(MakeMessage(*peer, "header", "keys0123", values)).ok());
  ASSERT_TRUE(client->Send(MakeMessage(*peer, "", "", "")).ok());
  ASSERT_TRUE(replies.WaitFor(2));
  auto got = replies.Take();
  EXPECT_EQ(got[0].peer, *peer);
  EXPECT_EQ(Str(got[0].header), "header");
  EXPECT_EQ(Str(got[0].keys), "keys0123");
  EXPECT_EQ(Str(got[0].values), values);
  EXPECT_EQ(got[1].bytes(), 0u);
  client->Stop();
  server->Stop();
}

TEST_P(TransportTest, RoundTripOf64MiBFrame) {
  std::string ep;
  auto server = StartEchoServer(&ep);
  Collector replies;
  auto client = Make();
  client->SetHandler(replies.handler());
  auto peer = client->Connect(ep);
  ASSERT_TRUE(peer.ok());
  ASSERT_TRUE(client->Start().ok());

  const size_t n = 64 << 20;
  Buffer big = Buffer::Allocate(n);
  for (size_t i = 0; i < n; i += 8) {
    uint64_t v = i * 0x9e3779b97f4a7c15ull;
    std::memcpy(big.mutable_data() + i, &v, 8);
  }
  Message m = MakeMessage(*peer, "big", "k", "");
  m.values = big;
  ASSERT_TRUE(client->Send(std::move(m)).ok());
  ASSERT_TRUE(replies.WaitFor(1, std::chrono::seconds(60)));
  auto got = replies.Take();
  ASSERT_EQ(got[0].values.size(), n);
  EXPECT_EQ(std::memcmp(got[0].values.data(), big.data(), n), 0);
  EXPECT_EQ(Str(got[0].header), "big");
  client->Stop();
  server->Stop();
}

TEST_P(TransportTest, RepliesReachTheDialerThatAsked) {
  std::string ep;
  std::mutex mu;
  std::set<PeerId> server_peers;
  auto server = Make();
  auto bound = server->Listen(Endpoint("many"));
  ASSERT_TRUE(bound.ok());
  Transport* s = server.get();
  server->SetHandler([&, s](Message&& m) {
    {
      std::lock_guard<std::mutex> lock(mu);
      server_peers.insert(m.peer);
    }
    EXPECT_TRUE(s->Send(std::move(m)).ok());
  });
  ASSERT_TRUE(server->Start().ok());

  constexpr int kClients = 4, kPerClient = 50;
  std::vector<std::unique_ptr<Transport>> clients;
  std::vector<std::unique_ptr<Collector>> replies;
  std::vector<PeerId> peers;
  for (int c = 0; c < kClients; ++c) {
    replies.push_back(std::make_unique<Collector>());
    clients.push_back(Make());
    clients[c]->SetHandler(replies[c]->handler());
    auto p = clients[c]->Connect(*bound);
    ASSERT_TRUE(p.ok());
    peers.push_back(*p);
    ASSERT_TRUE(clients[c]->Start().ok());
  }
  for (int i = 0; i < kPerClient; ++i) {
    for (int c = 0; c < kClients; ++c) {
      std::string tag = "client" + std::to_string(c);
      ASSERT_TRUE(clients[c]->Send(MakeMessage(peers[c], tag, std::to_string(i), "")).ok());
    }
  }
  for (int c = 0; c < kClients; ++c) {
    ASSERT_TRUE(replies[c]->WaitFor(kPerClient)) << "client " << c;
    auto got = replies[c]->Take();
    ASSERT_EQ(got.size(), static_cast<size_t>(kPerClient));
    for (int i = 0; i < kPerClient; ++i) {
      EXPECT_EQ(Str(got[i].header), "client" + std::to_string(c));
      EXPECT_EQ(Str(got[i].keys), std::to_string(i));  // in order per peer
    }
  }
  for (auto& c : clients) c->Stop();
  server->Stop();
  EXPECT_EQ(server_peers.size(), static_cast<size_t>(kClients));
}

TEST_P(TransportTest, ConcurrentSendersKeepPerThreadOrder) {
  std::string ep;
  Collector received;
  auto server = Make();
  auto bound = server->Listen(Endpoint("conc"));
  ASSERT_TRUE(bound.ok());
  server->SetHandler(received.handler());
  ASSERT_TRUE(server->Start().ok());
  auto client = Make();
  client->SetHandler([](Message&&) {});
  auto peer = client->Connect(*bound);
  ASSERT_TRUE(peer.ok());
  ASSERT_TRUE(client->Start().ok());

  constexpr int kThreads = 4, kPerThread = 250;
  std::vector<std::thread> threads;
  std::atomic<int> failures{0};
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < kPerThread; ++i) {
        std::string values(t == 0 ? 70000 : 16, 'x');  // one thread sends zero-copy frames
        if (!client->Send(MakeMessage(*peer, std::to_string(t), std::to_string(i), values)).ok()) {
          failures++;
        }
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(failures.load(), 0);
  ASSERT_TRUE(received.WaitFor(kThreads * kPerThread));
  std::map<std::string, int> next;
  for (const Message& m : received.Take()) {
    EXPECT_EQ(Str(m.keys), std::to_string(next[Str(m.header)]++));
  }
  EXPECT_EQ(next.size(), static_cast<size_t>(kThreads));
  client->Stop();
  server->Stop();
}

TEST_P(TransportTest, HandlersCanSendToEachOther) {
  // A ping-pong driven entirely from the two handlers (Send on the I/O thread).
  constexpr int kRounds = 200;
  std::atomic<int> pongs{0};
  auto server = Make();
  auto bound = server->Listen(Endpoint("pingpong"));
  ASSERT_TRUE(bound.ok());
  Transport* s = server.get();
  server->SetHandler([s](Message&& m) { EXPECT_TRUE(s->Send(std::move(m)).ok()); });
  ASSERT_TRUE(server->Start().ok());
  auto client = Make();
  Transport* c = client.get();
  client->SetHandler([&, c](Message&& m) {
    if (++pongs < kRounds) {
      EXPECT_TRUE(c->Send(std::move(m)).ok());
    }
  });
  auto peer = client->Connect(*bound);
  ASSERT_TRUE(peer.ok());
  ASSERT_TRUE(client->Start().ok());
  ASSERT_TRUE(client->Send(MakeMessage(*peer, "ping", "", "")).ok());
  EXPECT_TRUE(testing::Eventually([&] { return pongs.load() >= kRounds; }));
  client->Stop();
  server->Stop();
  EXPECT_EQ(pongs.load(), kRounds);
}

TEST_P(TransportTest, ErrorsNameTheProblem) {
  auto t = Make();
  t->SetHandler([](Message&&) {});
  EXPECT_EQ(t->Send(MakeMessage(0, "", "", "")).code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(t->Listen("udp://127.0.0.1:5").status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(t->Connect("nonsense").status().code(), StatusCode::kInvalidArgument);
  auto wrong = GetParam() == "inproc" ? "tcp://127.0.0.1:0" : "inproc://x";
  auto st = t->Listen(wrong).status();
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find(wrong), std::string::npos) << st.ToString();
  ASSERT_TRUE(t->Start().ok());
  EXPECT_EQ(t->Start().code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(t->Send(MakeMessage(42, "", "", "")).code(), StatusCode::kNotFound);
  EXPECT_EQ(t->Listen(Endpoint("late")).status().code(), StatusCode::kFailedPrecondition);
  t->Stop();
  EXPECT_EQ(t->Send(MakeMessage(0, "", "", "")).code(), StatusCode::kFailedPrecondition);

  auto no_handler = Make();
  EXPECT_EQ(no_handler->Start().code(), StatusCode::kFailedPrecondition);
}

TEST_P(TransportTest, AddressInUseIsUnavailable) {
  auto a = Make();
  auto ep = a->Listen(Endpoint("taken"));
  ASSERT_TRUE(ep.ok());
  a->SetHandler([](Message&&) {});
  ASSERT_TRUE(a->Start().ok());
  auto b = Make();
  auto st = b->Listen(*ep).status();
  EXPECT_EQ(st.code(), StatusCode::kUnavailable) << st.ToString();
  EXPECT_NE(st.message().find(*ep), std::string::npos) << st.ToString();
  a->Stop();
}

TEST_P(TransportTest, StopWithQueuedMessagesDoesNotHang) {
  auto server = Make();
  auto ep = server->Listen(Endpoint("slow"));
  ASSERT_TRUE(ep.ok());
  server->SetHandler([](Message&&) { std::this_thread::sleep_for(std::chrono::milliseconds(20)); });
  ASSERT_TRUE(server->Start().ok());
  auto client = Make();
  client->SetHandler([](Message&&) {});
  auto peer = client->Connect(*ep);
  ASSERT_TRUE(peer.ok());
  ASSERT_TRUE(client->Start().ok());
  Buffer payload = Buffer::Allocate(1 << 20);
  std::memset(payload.mutable_data(), 1, payload.size());
  for (int i = 0; i < 200; ++i) {
    Message m = MakeMessage(*peer, "h", "", "");
    m.values = payload;
    ASSERT_TRUE(client->Send(std::move(m)).ok());
  }
  auto t0 = std::chrono::steady_clock::now();
  server->Stop();
  client->Stop();
  server.reset();
  client.reset();
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(5));
}

TEST_P(TransportTest, StatsCountMessagesAndBytes) {
  std::string ep;
  auto server = StartEchoServer(&ep);
  Collector replies;
  auto client = Make();
  client->SetHandler(replies.handler());
  auto peer = client->Connect(ep);
  ASSERT_TRUE(peer.ok());
  ASSERT_TRUE(client->Start().ok());
  for (int i = 0; i < 10; ++i) {
    ASSERT_TRUE(client->Send(MakeMessage(*peer, "hh", "kkkk", "vvvvvvvv")).ok());  // 14 bytes
  }
  ASSERT_TRUE(replies.WaitFor(10));
  TransportStats c = client->stats(), s = server->stats();
  EXPECT_EQ(c.messages_sent, 10u);
  EXPECT_EQ(c.bytes_sent, 140u);
  EXPECT_EQ(c.messages_received, 10u);
  EXPECT_EQ(c.bytes_received, 140u);
  EXPECT_EQ(s.messages_received, 10u);
  EXPECT_EQ(s.messages_sent, 10u);
  EXPECT_EQ(s.malformed_received, 0u);
  EXPECT_EQ(c.send_failures, 0u);
  client->Stop();
  server->Stop();
}

TEST_P(TransportTest, StopFromInsideHandlerDoesNotDeadlock) {
  std::string ep;
  auto server = StartEchoServer(&ep);
  auto client = Make();
  Transport* c = client.get();
  std::atomic<int> seen{0};
  client->SetHandler([&, c](Message&&) {
    seen++;
    c->Stop();  // only requests the stop from here
  });
  auto peer = client->Connect(ep);
  ASSERT_TRUE(peer.ok());
  ASSERT_TRUE(client->Start().ok());
  ASSERT_TRUE(client->Send(MakeMessage(*peer, "a", "", "")).ok());
  EXPECT_TRUE(testing::Eventually([&] { return seen.load() == 1; }));
  client->Stop();  // completes the stop: joins the I/O thread
  EXPECT_EQ(client->Send(MakeMessage(*peer, "b", "", "")).code(), StatusCode::kFailedPrecondition);
  server->Stop();
}

#ifdef OSPREY_TRANSPORT_TEST_RDMA
INSTANTIATE_TEST_SUITE_P(Kinds, TransportTest, ::testing::Values("rdma"),
                         [](const auto& info) { return info.param; });
#else
INSTANTIATE_TEST_SUITE_P(Kinds, TransportTest, ::testing::Values("tcp", "ipc", "inproc"),
                         [](const auto& info) { return info.param; });

TEST(MakeTransportTest, RejectsUnknownKindAndInprocWithoutHub) {
  TransportOptions o;
  o.kind = "carrier-pigeon";
  EXPECT_EQ(MakeTransport(o).status().code(), StatusCode::kInvalidArgument);
  o.kind = "inproc";
  EXPECT_EQ(MakeTransport(o).status().code(), StatusCode::kInvalidArgument);
  o.kind = "zmq";
  EXPECT_TRUE(MakeTransport(o).ok());
}
#endif  // OSPREY_TRANSPORT_TEST_RDMA

}  // namespace
}  // namespace osprey
