// ZmqTransport specifics: frames from foreign (raw ZeroMQ) peers, zero-copy ownership, sends to
// vanished peers, queueing before the listener exists.
#include "common/zmq_transport.h"

#include <stdlib.h>
#include <unistd.h>
#include <zmq.h>

#include <atomic>
#include <chrono>
#include <string>

#include <gtest/gtest.h>

#include "tests/common/transport_test_util.h"

namespace osprey {
namespace {

using testing::Collector;
using testing::MakeMessage;
using testing::Str;

// A bare ZeroMQ DEALER, to send what Osprey's own transport never would.
class RawDealer {
 public:
  explicit RawDealer(const std::string& endpoint) {
    int zero = 0, timeout_ms = 10000;
    zmq_setsockopt(socket_, ZMQ_LINGER, &zero, sizeof(zero));
    zmq_setsockopt(socket_, ZMQ_RCVTIMEO, &timeout_ms, sizeof(timeout_ms));
    EXPECT_EQ(zmq_connect(socket_, endpoint.c_str()), 0);
  }
  ~RawDealer() {
    zmq_close(socket_);
    zmq_ctx_term(ctx_);
  }
  void SendFrames(int count) {
    for (int i = 0; i < count; ++i) {
      std::string f = "frame" + std::to_string(i);
      ASSERT_GE(zmq_send(socket_, f.data(), f.size(), i + 1 < count ? ZMQ_SNDMORE : 0), 0);
    }
  }
  // Receives one message; returns its frame count, or -1 after the 10 s receive timeout.
  int Receive() {
    int n = 0;
    while (true) {
      zmq_msg_t m;
      zmq_msg_init(&m);
      if (zmq_msg_recv(&m, socket_, 0) < 0) {
        zmq_msg_close(&m);
        return -1;
      }
      bool more = zmq_msg_more(&m);
      zmq_msg_close(&m);
      ++n;
      if (!more) return n;
    }
  }

 private:
  void* ctx_ = zmq_ctx_new();
  void* socket_ = zmq_socket(ctx_, ZMQ_DEALER);
};

std::unique_ptr<ZmqTransport> StartEchoServer(std::string* endpoint) {
  auto server = std::make_unique<ZmqTransport>(TransportOptions{});
  auto ep = server->Listen("tcp://127.0.0.1:0");
  EXPECT_TRUE(ep.ok()) << ep.status().ToString();
  *endpoint = *ep;
  ZmqTransport* t = server.get();
  server->SetHandler([t](Message&& m) { (void)t->Send(std::move(m)); });
  EXPECT_TRUE(server->Start().ok());
  return server;
}

TEST(ZmqTransportTest, ListenOnPortZeroReturnsTheRealPort) {
  ZmqTransport t(TransportOptions{});
  auto ep = t.Listen("tcp://127.0.0.1:0");
  ASSERT_TRUE(ep.ok());
  EXPECT_EQ(ep->rfind("tcp://127.0.0.1:", 0), 0u);
  EXPECT_NE(*ep, "tcp://127.0.0.1:0");
}

TEST(ZmqTransportTest, MalformedMessagesAreCountedAndDropped) {
  std::string ep;
  auto server = StartEchoServer(&ep);
  RawDealer raw(ep);
  raw.SendFrames(2);
  raw.SendFrames(4);
  raw.SendFrames(1);
  raw.SendFrames(3);  // well formed: echoed
  EXPECT_EQ(raw.Receive(), 3);
  TransportStats s = server->stats();
  EXPECT_EQ(s.malformed_received, 3u);
  EXPECT_EQ(s.messages_received, 1u);
  // Still serving.
  raw.SendFrames(5);
  raw.SendFrames(3);
  EXPECT_EQ(raw.Receive(), 3);
  EXPECT_EQ(server->stats().malformed_received, 4u);
  server->Stop();
}

TEST(ZmqTransportTest, ZeroCopySendKeepsPayloadAliveThenReleasesIt) {
  std::string ep;
  auto server = StartEchoServer(&ep);
  Collector replies;
  ZmqTransport client(TransportOptions{});
  client.SetHandler(replies.handler());
  auto peer = client.Connect(ep);
  ASSERT_TRUE(peer.ok());
  ASSERT_TRUE(client.Start().ok());

  auto released = std::make_shared<std::atomic<bool>>(false);
  const size_t n = 1 << 20;
  {
    // An owner whose deleter tells us when ZeroMQ (and everyone else) let go of the bytes.
    uint8_t* raw = static_cast<uint8_t*>(std::malloc(n));
    for (size_t i = 0; i < n; ++i) raw[i] = static_cast<uint8_t>(i % 251);
    std::shared_ptr<const void> owner(raw, [released](const void* p) {
      std::free(const_cast<void*>(p));
      released->store(true);
    });
    Message m = MakeMessage(*peer, "zc", "", "");
    m.values = Buffer(std::move(owner), raw, n);
    ASSERT_TRUE(client.Send(std::move(m)).ok());
  }  // our last reference is gone; ZeroMQ's copy of the owner keeps the bytes alive
  ASSERT_TRUE(replies.WaitFor(1));
  auto got = replies.Take();
  ASSERT_EQ(got[0].values.size(), n);
  for (size_t i = 0; i < n; i += 4093) ASSERT_EQ(got[0].values.data()[i], i % 251);
  EXPECT_TRUE(testing::Eventually([&] { return released->load(); }));
  client.Stop();
  server->Stop();
}

TEST(ZmqTransportTest, ReplyToVanishedDialerIsUnavailable) {
  std::mutex mu;
  PeerId from = -1;
  ZmqTransport server(TransportOptions{});
  auto ep = server.Listen("tcp://127.0.0.1:0");
  ASSERT_TRUE(ep.ok());
  server.SetHandler([&](Message&& m) {
    std::lock_guard<std::mutex> lock(mu);
    from = m.peer;
  });
  ASSERT_TRUE(server.Start().ok());
  {
    ZmqTransport client(TransportOptions{});
    client.SetHandler([](Message&&) {});
    auto peer = client.Connect(*ep);
    ASSERT_TRUE(peer.ok());
    ASSERT_TRUE(client.Start().ok());
    ASSERT_TRUE(client.Send(MakeMessage(*peer, "hi", "", "")).ok());
    ASSERT_TRUE(testing::Eventually([&] {
      std::lock_guard<std::mutex> lock(mu);
      return from >= 0;
    }));
  }  // client closed: the server notices the disconnect asynchronously
  PeerId gone;
  {
    std::lock_guard<std::mutex> lock(mu);
    gone = from;
  }
  EXPECT_TRUE(testing::Eventually([&] {
    return server.Send(MakeMessage(gone, "late", "", "")).code() == StatusCode::kUnavailable;
  }));
  EXPECT_GE(server.stats().send_failures, 1u);
  server.Stop();
}

TEST(ZmqTransportTest, MessagesSentBeforeTheListenerExistsArriveOnceItBinds) {
  char tmpl[] = "/tmp/osprey-zmq-test-XXXXXX";
  ASSERT_NE(mkdtemp(tmpl), nullptr);
  const std::string path = std::string(tmpl) + "/late.sock";
  Collector received;
  ZmqTransport client(TransportOptions{});
  client.SetHandler([](Message&&) {});
  auto peer = client.Connect("ipc://" + path);
  ASSERT_TRUE(peer.ok());
  ASSERT_TRUE(client.Start().ok());
  ASSERT_TRUE(client.Send(MakeMessage(*peer, "early", "", "")).ok());
  {
    ZmqTransport server(TransportOptions{});
    ASSERT_TRUE(server.Listen("ipc://" + path).ok());
    server.SetHandler(received.handler());
    ASSERT_TRUE(server.Start().ok());
    ASSERT_TRUE(received.WaitFor(1));
    EXPECT_EQ(Str(received.Take()[0].header), "early");
    server.Stop();
    EXPECT_NE(::access(path.c_str(), F_OK), 0) << "Stop leaves no socket file behind";
  }
  client.Stop();
  ::unlink(path.c_str());
  ::rmdir(tmpl);
}

TEST(ZmqTransportTest, ConnectAfterStartIsPolled) {
  std::string ep;
  auto server = StartEchoServer(&ep);
  Collector replies;
  ZmqTransport client(TransportOptions{});
  client.SetHandler(replies.handler());
  ASSERT_TRUE(client.Start().ok());
  auto peer = client.Connect(ep);  // the running I/O thread must pick the new socket up
  ASSERT_TRUE(peer.ok());
  ASSERT_TRUE(client.Send(MakeMessage(*peer, "after", "", "")).ok());
  ASSERT_TRUE(replies.WaitFor(1));
  EXPECT_EQ(Str(replies.Take()[0].header), "after");
  client.Stop();
  server->Stop();
}

}  // namespace
}  // namespace osprey
