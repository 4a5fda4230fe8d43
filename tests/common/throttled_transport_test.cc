// ThrottledTransport (common/throttled_transport.h), the slow uplink of the adaptive-ratio tests:
// messages with values take at least bytes / rate on the wire, back to back; others pass at once.
#include "common/throttled_transport.h"

#include <gtest/gtest.h>

#include <chrono>
#include <string>

#include "common/inproc_transport.h"
#include "tests/common/transport_test_util.h"

namespace osprey {
namespace {

using testing::Collector;
using testing::MakeMessage;
using testing::Str;
using Clock = std::chrono::steady_clock;

TEST(ThrottledTransportTest, ValuesWaitForTheWireAndControlMessagesDoNot) {
  auto hub = std::make_shared<InprocHub>();
  Collector got;
  InprocTransport server(hub);
  ASSERT_TRUE(server.Listen("inproc://slow").ok());
  server.SetHandler(got.handler());
  ASSERT_TRUE(server.Start().ok());
  // 1 MB/s: two 100 kB pushes need >= 0.2 s of wire between them.
  ThrottledTransport client(std::make_unique<InprocTransport>(hub), 1e6);
  client.SetHandler([](Message&&) {});
  auto peer = client.Connect("inproc://slow");
  ASSERT_TRUE(peer.ok());
  ASSERT_TRUE(client.Start().ok());

  const auto t0 = Clock::now();
  ASSERT_TRUE(client.Send(MakeMessage(*peer, "pull", "k", "")).ok());
  const double control = std::chrono::duration<double>(Clock::now() - t0).count();
  ASSERT_TRUE(client.Send(MakeMessage(*peer, "push1", "", std::string(100000, 'v'))).ok());
  ASSERT_TRUE(client.Send(MakeMessage(*peer, "push2", "", std::string(100000, 'v'))).ok());
  const double pushes = std::chrono::duration<double>(Clock::now() - t0).count();
  ASSERT_TRUE(got.WaitFor(3));
  auto messages = got.Take();
  EXPECT_EQ(Str(messages[0].header), "pull");
  EXPECT_EQ(Str(messages[2].header), "push2");
  EXPECT_LT(control, 0.1) << "a message without values is not throttled";
  EXPECT_GE(pushes, 0.2) << "200 kB at 1 MB/s";
  EXPECT_GE(client.throttled_seconds(), 0.2);
  client.Stop();
  server.Stop();
}

}  // namespace
}  // namespace osprey
