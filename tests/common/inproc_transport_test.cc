// InprocTransport and InprocHub specifics, and the FaultInjectingTransport test seam.
#include "common/inproc_transport.h"

#include <atomic>
#include <string>

#include <gtest/gtest.h>

#include "tests/common/transport_test_util.h"

namespace osprey {
namespace {

using testing::Collector;
using testing::MakeMessage;
using testing::Str;

std::unique_ptr<Transport> EchoServer(const std::shared_ptr<InprocHub>& hub,
                                      const std::string& endpoint) {
  auto server = std::make_unique<InprocTransport>(hub);
  EXPECT_TRUE(server->Listen(endpoint).ok());
  Transport* t = server.get();
  server->SetHandler([t](Message&& m) { (void)t->Send(std::move(m)); });
  EXPECT_TRUE(server->Start().ok());
  return server;
}

TEST(InprocTransportTest, FramesMoveWithoutCopy) {
  auto hub = std::make_shared<InprocHub>();
  auto server = EchoServer(hub, "inproc://s");
  Collector replies;
  InprocTransport client(hub);
  client.SetHandler(replies.handler());
  auto peer = client.Connect("inproc://s");
  ASSERT_TRUE(peer.ok());
  ASSERT_TRUE(client.Start().ok());
  Message m = MakeMessage(*peer, "h", "k", std::string(1000, 'v'));
  const uint8_t* values = m.values.data();
  ASSERT_TRUE(client.Send(std::move(m)).ok());
  ASSERT_TRUE(replies.WaitFor(1));
  EXPECT_EQ(replies.Take()[0].values.data(), values);  // the same bytes went there and back
  client.Stop();
  server->Stop();
}

TEST(InprocTransportTest, MessagesWaitForALateListenerAndSurviveItsRestart) {
  auto hub = std::make_shared<InprocHub>();
  Collector replies;
  InprocTransport client(hub);
  client.SetHandler(replies.handler());
  auto peer = client.Connect("inproc://late");
  ASSERT_TRUE(peer.ok());
  ASSERT_TRUE(client.Start().ok());
  ASSERT_TRUE(client.Send(MakeMessage(*peer, "1", "", "")).ok());
  ASSERT_TRUE(client.Send(MakeMessage(*peer, "2", "", "")).ok());
  EXPECT_EQ(hub->pending_messages(), 2u);
  auto server = EchoServer(hub, "inproc://late");
  ASSERT_TRUE(replies.WaitFor(2));
  auto got = replies.Take();
  EXPECT_EQ(Str(got[0].header), "1");
  EXPECT_EQ(Str(got[1].header), "2");

  server->Stop();  // the name is free again; a new listener takes over like a reconnect
  server = EchoServer(hub, "inproc://late");
  ASSERT_TRUE(client.Send(MakeMessage(*peer, "3", "", "")).ok());
  ASSERT_TRUE(replies.WaitFor(1));
  EXPECT_EQ(Str(replies.Take()[0].header), "3");
  client.Stop();
  server->Stop();
}

TEST(InprocTransportTest, ReplyToDestroyedDialerIsUnavailable) {
  auto hub = std::make_shared<InprocHub>();
  std::atomic<PeerId> from{-1};
  InprocTransport server(hub);
  ASSERT_TRUE(server.Listen("inproc://s").ok());
  server.SetHandler([&](Message&& m) { from = m.peer; });
  ASSERT_TRUE(server.Start().ok());
  {
    InprocTransport client(hub);
    client.SetHandler([](Message&&) {});
    auto peer = client.Connect("inproc://s");
    ASSERT_TRUE(peer.ok());
    ASSERT_TRUE(client.Start().ok());
    ASSERT_TRUE(client.Send(MakeMessage(*peer, "hi", "", "")).ok());
    ASSERT_TRUE(testing::Eventually([&] { return from.load() >= 0; }));
  }
  EXPECT_EQ(server.Send(MakeMessage(from.load(), "late", "", "")).code(),
            StatusCode::kUnavailable);
  EXPECT_EQ(server.stats().send_failures, 1u);
  server.Stop();
}

TEST(InprocTransportTest, HubsAreIndependent) {
  auto hub1 = std::make_shared<InprocHub>(), hub2 = std::make_shared<InprocHub>();
  InprocTransport a(hub1), b(hub2);
  EXPECT_TRUE(a.Listen("inproc://same").ok());
  EXPECT_TRUE(b.Listen("inproc://same").ok());
}

TEST(FaultInjectingTransportTest, DropsAndFailsOnCommand) {
  auto hub = std::make_shared<InprocHub>();
  auto server = EchoServer(hub, "inproc://s");
  Collector replies;
  FaultInjectingTransport client(std::make_unique<InprocTransport>(hub));
  client.SetHandler(replies.handler());
  auto peer = client.Connect("inproc://s");
  ASSERT_TRUE(peer.ok());
  ASSERT_TRUE(client.Start().ok());

  client.DropNextSends(2);
  for (int i = 0; i < 3; ++i) {
    ASSERT_TRUE(client.Send(MakeMessage(*peer, std::to_string(i), "", "")).ok());
  }
  ASSERT_TRUE(replies.WaitFor(1));
  EXPECT_EQ(Str(replies.Take()[0].header), "2");  // the first two were lost
  EXPECT_EQ(client.dropped_sends(), 2u);

  client.FailSends(true);
  EXPECT_EQ(client.Send(MakeMessage(*peer, "x", "", "")).code(), StatusCode::kUnavailable);
  client.FailSends(false);

  client.DropNextReceives(1);
  ASSERT_TRUE(client.Send(MakeMessage(*peer, "a", "", "")).ok());
  ASSERT_TRUE(client.Send(MakeMessage(*peer, "b", "", "")).ok());
  ASSERT_TRUE(replies.WaitFor(1));
  ASSERT_TRUE(testing::Eventually([&] { return client.dropped_receives() == 1; }));
  auto got = replies.Take();
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(Str(got[0].header), "b");
  EXPECT_EQ(client.stats().messages_sent, 3u);  // the inner transport's view: 1 + a + b
  client.Stop();
  server->Stop();
}

}  // namespace
}  // namespace osprey
