// CURVE on ZmqTransport over real tcp sockets: the ZAP handler admits the job's keys (and tells
// the receiver the sender's role) and refuses an unknown key and a peer without CURVE; key files.
#include "common/zmq_curve.h"

#include <stdlib.h>
#include <sys/stat.h>
#include <zmq.h>

#include <filesystem>
#include <string>

#include <gtest/gtest.h>

#include "common/zmq_transport.h"
#include "tests/common/transport_test_util.h"

namespace osprey {
namespace {

using testing::Collector;
using testing::Eventually;
using testing::MakeMessage;
using testing::Str;

class CurveTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!CurveAvailable()) GTEST_SKIP() << "libzmq without CURVE";
    char tmpl[] = "/tmp/osprey-curve-XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    ASSERT_TRUE(WriteCurveKeys(dir_, /*force=*/false).ok());
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  TransportOptions As(PeerRole self, PeerRole dials) {
    auto curve = LoadCurveOptions(dir_, self, dials);
    EXPECT_TRUE(curve.ok()) << curve.status().ToString();
    TransportOptions o;
    if (curve.ok()) o.curve = *curve;
    return o;
  }

  std::string dir_;
};

// A server-role listener; returns its bound endpoint.
std::string StartListener(ZmqTransport* t, Collector* got) {
  auto bound = t->Listen("tcp://127.0.0.1:0");
  EXPECT_TRUE(bound.ok()) << bound.status().ToString();
  t->SetHandler(got->handler());
  EXPECT_TRUE(t->Start().ok());
  return bound.ok() ? *bound : std::string();
}

TEST_F(CurveTest, AdmitsAListedKeyAndReportsItsRole) {
  ZmqTransport server(As(PeerRole::kServer, PeerRole::kUnauthenticated));
  Collector at_server;
  const std::string endpoint = StartListener(&server, &at_server);
  ZmqTransport worker(As(PeerRole::kWorker, PeerRole::kServer));
  Collector at_worker;
  worker.SetHandler(at_worker.handler());
  ASSERT_TRUE(worker.Start().ok());
  auto peer = worker.Connect(endpoint);
  ASSERT_TRUE(peer.ok());
  ASSERT_TRUE(worker.Send(MakeMessage(*peer, "h", "k", "secret values")).ok());
  ASSERT_TRUE(at_server.WaitFor(1));
  std::vector<Message> got = at_server.Take();
  EXPECT_EQ(Str(got[0].values), "secret values");
  EXPECT_EQ(got[0].peer_role, PeerRole::kWorker);
  // And the encrypted reply finds its way back.
  ASSERT_TRUE(server.Send(MakeMessage(got[0].peer, "r", "", "")).ok());
  ASSERT_TRUE(at_worker.WaitFor(1));
  EXPECT_EQ(Str(at_worker.Take()[0].header), "r");
  EXPECT_EQ(server.stats().auth_refused, 0u);
}

TEST_F(CurveTest, RefusesAnUnknownKey) {
  ZmqTransport server(As(PeerRole::kServer, PeerRole::kUnauthenticated));
  Collector at_server;
  const std::string endpoint = StartListener(&server, &at_server);
  // A stranger who knows the server's public key but whose own key is not the job's.
  TransportOptions stranger = As(PeerRole::kWorker, PeerRole::kServer);
  char pub[41], sec[41];
  ASSERT_EQ(zmq_curve_keypair(pub, sec), 0);
  stranger.curve.public_key = pub;
  stranger.curve.secret_key = sec;
  ZmqTransport t(stranger);
  Collector unused;
  t.SetHandler(unused.handler());
  ASSERT_TRUE(t.Start().ok());
  auto peer = t.Connect(endpoint);
  ASSERT_TRUE(peer.ok());
  ASSERT_TRUE(t.Send(MakeMessage(*peer, "h", "k", "v")).ok());
  ASSERT_TRUE(Eventually([&] { return server.stats().auth_refused >= 1; }));
  EXPECT_EQ(at_server.size(), 0u);
  EXPECT_EQ(server.stats().messages_received, 0u);
}

TEST_F(CurveTest, RefusesAPeerWithoutCurve) {
  ZmqTransport server(As(PeerRole::kServer, PeerRole::kUnauthenticated));
  Collector at_server;
  const std::string endpoint = StartListener(&server, &at_server);
  ZmqTransport plain(TransportOptions{});
  Collector unused;
  plain.SetHandler(unused.handler());
  ASSERT_TRUE(plain.Start().ok());
  auto peer = plain.Connect(endpoint);
  ASSERT_TRUE(peer.ok());
  ASSERT_TRUE(plain.Send(MakeMessage(*peer, "h", "k", "v")).ok());
  ASSERT_TRUE(Eventually([&] { return server.stats().auth_refused >= 1; }));
  EXPECT_EQ(at_server.size(), 0u);
}

// The bulk data plane: once the CURVE handshake has handed the worker a session, its messages
// and the server's replies travel sealed on the plain data port, intact and with the role.
TEST_F(CurveTest, DataTravelsSealedOnTheDataPortWithTheCurveRole) {
  ZmqTransport server(As(PeerRole::kServer, PeerRole::kUnauthenticated));
  Collector at_server;
  const std::string endpoint = StartListener(&server, &at_server);
  ASSERT_FALSE(server.sealed_data_port().empty());
  ZmqTransport worker(As(PeerRole::kWorker, PeerRole::kServer));
  Collector at_worker;
  worker.SetHandler(at_worker.handler());
  ASSERT_TRUE(worker.Start().ok());
  auto peer = worker.Connect(endpoint);
  ASSERT_TRUE(peer.ok());
  const std::string big(1 << 20, 'v');
  size_t sent = 0;
  // The first messages may go over CURVE, until the session offer has arrived.
  ASSERT_TRUE(Eventually([&] {
    EXPECT_TRUE(worker.Send(MakeMessage(*peer, "h" + std::to_string(sent), "k", big)).ok());
    ++sent;
    return server.sealed_received() >= 1;
  }));
  ASSERT_TRUE(at_server.WaitFor(sent));
  std::vector<Message> got = at_server.Take();
  for (size_t i = 0; i < got.size(); ++i) {
    EXPECT_EQ(Str(got[i].header), "h" + std::to_string(i));  // in order, across the switch
    EXPECT_EQ(Str(got[i].values), big);
    EXPECT_EQ(got[i].peer_role, PeerRole::kWorker);
    EXPECT_EQ(got[i].peer, got[0].peer);  // one PeerId, whichever path
  }
  ASSERT_TRUE(server.Send(MakeMessage(got.back().peer, "reply", "", big)).ok());
  ASSERT_TRUE(at_worker.WaitFor(1));
  EXPECT_EQ(Str(at_worker.Take()[0].values), big);
  EXPECT_GE(worker.sealed_received(), 1u);
  EXPECT_EQ(server.stats().auth_refused, 0u);
  EXPECT_EQ(worker.stats().auth_refused, 0u);
}

// A stranger on the plain data port: plain frames, a forged sealed header, a wrong frame count.
// Each is refused and counted in auth_refused; nothing reaches the handler; the worker goes on.
TEST_F(CurveTest, RefusesAStrangerOnTheDataPort) {
  ZmqTransport server(As(PeerRole::kServer, PeerRole::kUnauthenticated));
  Collector at_server;
  const std::string endpoint = StartListener(&server, &at_server);
  const std::string data = "tcp://127.0.0.1:" + server.sealed_data_port();
  void* ctx = zmq_ctx_new();
  void* s = zmq_socket(ctx, ZMQ_DEALER);
  ASSERT_EQ(zmq_connect(s, data.c_str()), 0);
  auto send = [&](const std::vector<std::string>& frames) {
    for (size_t i = 0; i < frames.size(); ++i) {
      zmq_send(s, frames[i].data(), frames[i].size(), i + 1 < frames.size() ? ZMQ_SNDMORE : 0);
    }
  };
  send({"h", "k", "v"});                                       // a plain Message
  send({std::string("OSD1") + std::string(17, '\1'), "x", "y", "z"});  // unknown session
  send({"a", "b", "c", "d", "e"});                             // wrong frame count
  ASSERT_TRUE(Eventually([&] { return server.stats().auth_refused >= 3; }));
  EXPECT_EQ(at_server.size(), 0u);
  EXPECT_EQ(server.stats().messages_received, 0u);
  zmq_close(s);
  zmq_ctx_term(ctx);
  // A worker of the job is served as before.
  ZmqTransport worker(As(PeerRole::kWorker, PeerRole::kServer));
  Collector at_worker;
  worker.SetHandler(at_worker.handler());
  ASSERT_TRUE(worker.Start().ok());
  auto peer = worker.Connect(endpoint);
  ASSERT_TRUE(peer.ok());
  ASSERT_TRUE(Eventually([&] {
    EXPECT_TRUE(worker.Send(MakeMessage(*peer, "h", "k", "v")).ok());
    return server.sealed_received() >= 1;
  }));
  EXPECT_EQ(server.stats().auth_refused, 3u);
}

TEST_F(CurveTest, ASecondZapHandlerOnOneContextCannotStart) {
  void* ctx = zmq_ctx_new();
  {
    auto curve = LoadCurveOptions(dir_, PeerRole::kServer, PeerRole::kUnauthenticated);
    ASSERT_TRUE(curve.ok());
    ZapHandler first(ctx, curve->allowed), second(ctx, curve->allowed);
    ASSERT_TRUE(first.Start(nullptr).ok());
    Status s = second.Start(nullptr);
    EXPECT_EQ(s.code(), StatusCode::kUnavailable);
    EXPECT_NE(s.message().find("would admit any key"), std::string::npos) << s.ToString();
  }
  zmq_ctx_term(ctx);
}

TEST_F(CurveTest, KeygenRefusesToOverwriteAndKeepsSecretsPrivate) {
  Status again = WriteCurveKeys(dir_, /*force=*/false);
  EXPECT_EQ(again.code(), StatusCode::kAlreadyExists);
  EXPECT_NE(again.message().find("--force"), std::string::npos);
  struct stat st;
  ASSERT_EQ(::stat((dir_ + "/worker.secret").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  const std::string old_pub = LoadCurveOptions(dir_, PeerRole::kAdmin, PeerRole::kServer)->public_key;
  ASSERT_TRUE(WriteCurveKeys(dir_, /*force=*/true).ok());
  EXPECT_NE(LoadCurveOptions(dir_, PeerRole::kAdmin, PeerRole::kServer)->public_key, old_pub);
  ::chmod((dir_ + "/admin.secret").c_str(), 0644);
  auto loaded = LoadCurveOptions(dir_, PeerRole::kAdmin, PeerRole::kServer);
  EXPECT_EQ(loaded.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(loaded.status().message().find("chmod 600"), std::string::npos);
  std::filesystem::remove(dir_ + "/server.pub");
  auto missing = LoadCurveOptions(dir_, PeerRole::kWorker, PeerRole::kServer);
  EXPECT_EQ(missing.status().code(), StatusCode::kNotFound);
  EXPECT_NE(missing.status().message().find("server.pub"), std::string::npos);
}

}  // namespace
}  // namespace osprey
