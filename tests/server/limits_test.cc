// Limits (issue #13): an oversized frame, a header claiming 10^9 keys and a flood of held pulls
// are refused with an error naming the limit, the memory held stays bounded, the server keeps
// serving a good peer, and 10k bad frames write a bounded number of log lines. Over the
// in-process transport and over real ZeroMQ sockets (where the frame limit is ZMQ_MAXMSGSIZE).
#include <gtest/gtest.h>
#include <spdlog/sinks/ostream_sink.h>
#include <spdlog/spdlog.h>

#include <chrono>
#include <sstream>

#include "common/zmq_transport.h"
#include "server/native_store.h"
#include "server/server.h"
#include "tests/server/fault_injecting_store.h"
#include "tests/testing/cluster_fixture.h"
#include "tests/testing/wait.h"

namespace osprey::server {
namespace {

using ::osprey::testing::RawPeer;
using ::osprey::testing::VecBuf;

proto::Header Req(proto::Op op, uint32_t table, uint64_t num_keys, uint64_t value_bytes,
                  uint64_t id = 42) {
  proto::Header h;
  h.set_op(op);
  h.set_table(table);
  h.set_request_id(id);
  h.set_epoch(1);
  h.set_num_keys(num_keys);
  h.set_value_bytes(value_bytes);
  return h;
}

// One active server (tables of ::osprey::testing::TestTables, the sparse one bsp) with `limits`, over
// `transport`; endpoint() is where it listens.
class LimitedServer {
 public:
  LimitedServer(std::unique_ptr<Transport> transport, const std::string& endpoint,
                const config::LimitsConfig& limits) {
    tables_ = ::osprey::testing::TestTables();
    tables_[0].consistency.mode = config::ConsistencyMode::kBsp;
    server_ = std::make_unique<Server>(std::move(transport), std::move(*MakeStore("native")));
    server_->SetLimits(limits);
    endpoint_ = *server_->Listen(endpoint);
    server_->SetLiveWorkers({0, 1});  // worker 1 never pushes: bsp pulls of clock > 0 are held
    Status s = server_->Activate(0, ::osprey::testing::MakeShardMap({endpoint_}, tables_), tables_);
    if (!s.ok()) throw std::runtime_error(s.ToString());
  }
  Server& server() { return *server_; }
  const std::string& endpoint() const { return endpoint_; }

 private:
  std::vector<config::TableConfig> tables_;
  std::unique_ptr<Server> server_;
  std::string endpoint_;
};

proto::Header Call(RawPeer* peer, const proto::Header& h, Buffer keys, Buffer values) {
  peer->Send(h, std::move(keys), std::move(values));
  proto::Header reply;
  EXPECT_TRUE(peer->Next(&reply, nullptr)) << "no reply";
  return reply;
}

void ExpectLimitError(const proto::Header& r, const std::string& fragment) {
  EXPECT_EQ(r.op(), proto::OP_ERROR);
  EXPECT_EQ(r.status_code(), static_cast<int>(StatusCode::kResourceExhausted)) << r.error();
  EXPECT_NE(r.error().find(fragment), std::string::npos) << "error was: " << r.error();
}

// A good pull of key 3 (clock 0: answered at once) is served.
void ExpectServed(RawPeer* peer) {
  proto::Header r = Call(peer, Req(proto::OP_PULL_SPARSE, 0, 1, 0, 1000), VecBuf<uint64_t>({3}), Buffer());
  EXPECT_EQ(r.op(), proto::OP_REPLY) << r.error();
}

TEST(LimitsTest, OversizedFrameAndTenToTheNineKeysAreRefusedByName) {
  auto hub = std::make_shared<InprocHub>();
  config::LimitsConfig limits;
  limits.max_frame_bytes = 64 << 10;
  LimitedServer s(std::make_unique<InprocTransport>(hub), "inproc://limited", limits);
  RawPeer peer(std::make_unique<InprocTransport>(hub), s.endpoint());
  std::vector<float> big(100 << 10 >> 2, 0.1f);  // 100 KiB values frame
  ExpectLimitError(Call(&peer, Req(proto::OP_PUSH_DENSE, 1, 1, big.size() * 4), VecBuf<uint64_t>({0}),
                        VecBuf(big)),
                   "values frame of 102400 bytes: limits.max_frame_bytes is 65536");
  // 10^9 keys claimed with one key in the frame: refused by the count, before anything is sized.
  ExpectLimitError(Call(&peer, Req(proto::OP_PULL_SPARSE, 0, 1000000000, 0), VecBuf<uint64_t>({3}), Buffer()),
                   "claims 1000000000 keys: limits.max_keys_per_request is 16777216");
  // 2^61 keys: num_keys * 8 wraps to 0, an empty keys frame must not pass for it.
  config::LimitsConfig unlimited;
  unlimited.max_keys_per_request = uint64_t{1} << 62;
  unlimited.max_frame_bytes = uint64_t{1} << 62;
  LimitedServer u(std::make_unique<InprocTransport>(hub), "inproc://unlimited", unlimited);
  RawPeer upeer(std::make_unique<InprocTransport>(hub), u.endpoint());
  proto::Header r = Call(&upeer, Req(proto::OP_PULL_SPARSE, 0, uint64_t{1} << 61, 0), Buffer(), Buffer());
  EXPECT_EQ(r.op(), proto::OP_ERROR);
  EXPECT_NE(r.error().find("keys frame has 0 bytes"), std::string::npos) << r.error();
  // 4096 keys x dim 4 x 4 bytes = 64 KiB + 1 key's worth: a pull whose reply would pass the frame
  // limit, from a 32 KiB keys frame.
  std::vector<uint64_t> keys(4097);
  for (size_t i = 0; i < keys.size(); ++i) keys[i] = i;
  ExpectLimitError(Call(&peer, Req(proto::OP_PULL_SPARSE, 0, keys.size(), 0), VecBuf(keys), Buffer()),
                   "4097 keys need 65552 bytes of fp32 values (the reply): limits.max_frame_bytes is 65536");
  EXPECT_EQ(s.server().stats().limit_refusals, 3u);
  EXPECT_EQ(s.server().stats().bad_requests, 3u);
  ExpectServed(&peer);
}

TEST(LimitsTest, FloodOfHeldPullsIsBoundedPerPeerAndInBytes) {
  auto hub = std::make_shared<InprocHub>();
  config::LimitsConfig limits;
  limits.max_inflight_per_peer = 100;
  limits.max_held_bytes = 1 << 20;
  LimitedServer s(std::make_unique<InprocTransport>(hub), "inproc://held", limits);
  RawPeer flooder(std::make_unique<InprocTransport>(hub), s.endpoint());
  proto::Header held = Req(proto::OP_PULL_SPARSE, 0, 1, 0);
  held.set_clock(5);  // worker 1 is at clock 0: never ready
  for (int i = 0; i < 300; ++i) flooder.Send(held, VecBuf<uint64_t>({3}), Buffer());
  for (int i = 0; i < 200; ++i) {  // the 200 beyond the limit are answered at once
    proto::Header r;
    ASSERT_TRUE(flooder.Next(&r, nullptr)) << "refusal " << i << " missing";
    ExpectLimitError(r, "limits.max_inflight_per_peer is 100");
  }
  EXPECT_EQ(s.server().hold_budget().held_requests(), 100u);
  // Another peer holds big pulls (8192 keys, 64 KiB each) until the byte budget is spent.
  RawPeer big(std::make_unique<InprocTransport>(hub), s.endpoint());
  std::vector<uint64_t> keys(8192);
  for (size_t i = 0; i < keys.size(); ++i) keys[i] = i;
  proto::Header big_pull = Req(proto::OP_PULL_SPARSE, 0, keys.size(), 0);
  big_pull.set_clock(5);
  for (int i = 0; i < 40; ++i) big.Send(big_pull, VecBuf(keys), Buffer());
  proto::Header r;
  ASSERT_TRUE(big.Next(&r, nullptr));
  ExpectLimitError(r, "limits.max_held_bytes is 1048576");
  EXPECT_LE(s.server().hold_budget().held_bytes(), limits.max_held_bytes);
  EXPECT_GT(s.server().hold_budget().held_bytes(), limits.max_held_bytes / 2);
  EXPECT_EQ(s.server().stats().pulls_held, s.server().hold_budget().held_requests());
  // A good worker is still served.
  RawPeer good(std::make_unique<InprocTransport>(hub), s.endpoint());
  ExpectServed(&good);
}

TEST(LimitsTest, HeldAcksCountAgainstThePerPeerLimitAndAreFreedByTheApply) {
  // A write-through store: acks are held until the window is applied (bsp: when worker 1 pushes).
  auto store = std::make_unique<testing::FaultInjectingStore>(std::make_unique<NativeStore>());
  store->set_acks_after_apply(true);
  auto hub = std::make_shared<InprocHub>();
  auto tables = ::osprey::testing::TestTables();
  tables[0].consistency.mode = config::ConsistencyMode::kBsp;
  Server server(std::make_unique<InprocTransport>(hub), std::move(store));
  config::LimitsConfig limits;
  limits.max_inflight_per_peer = 3;
  server.SetLimits(limits);
  const std::string endpoint = *server.Listen("inproc://acks");
  server.SetLiveWorkers({0, 1});
  ASSERT_TRUE(server.Activate(0, ::osprey::testing::MakeShardMap({endpoint}, tables), tables).ok());
  RawPeer w0(std::make_unique<InprocTransport>(hub), endpoint);
  proto::Header push = Req(proto::OP_PUSH_SPARSE, 0, 1, 16);
  push.set_worker_rank(0);
  for (int clock = 0; clock < 4; ++clock) {  // windows 0..3 of worker 0, none can close
    push.set_clock(clock);
    push.set_request_id(10 + clock);
    w0.Send(push, VecBuf<uint64_t>({3}), VecBuf<float>({0.1f, 0.1f, 0.1f, 0.1f}));
  }
  proto::Header r;
  ASSERT_TRUE(w0.Next(&r, nullptr));
  EXPECT_EQ(r.request_id(), 13u) << "only the fourth push is answered now";
  ExpectLimitError(r, "limits.max_inflight_per_peer is 3");
  EXPECT_EQ(server.hold_budget().held_requests(), 3u);
  // Worker 1's push of clock 0 closes window 0: its ack and worker 0's are sent, the slot freed.
  RawPeer w1(std::make_unique<InprocTransport>(hub), endpoint);
  push.set_worker_rank(1);
  push.set_clock(0);
  push.set_request_id(20);
  w1.Send(push, VecBuf<uint64_t>({3}), VecBuf<float>({0.1f, 0.1f, 0.1f, 0.1f}));
  ASSERT_TRUE(w0.Next(&r, nullptr));
  EXPECT_EQ(r.op(), proto::OP_REPLY) << r.error();
  EXPECT_EQ(r.request_id(), 10u);
  EXPECT_TRUE(::osprey::testing::WaitUntil([&] { return server.hold_budget().held_requests() == 2u; }));
}

TEST(LimitsTest, RequestsBeforeActivationAreHeldWithinTheBudget) {
  auto hub = std::make_shared<InprocHub>();
  auto tables = ::osprey::testing::TestTables();
  Server server(std::make_unique<InprocTransport>(hub), std::move(*MakeStore("native")));
  config::LimitsConfig limits;
  limits.max_inflight_per_peer = 2;
  server.SetLimits(limits);
  const std::string endpoint = *server.Listen("inproc://early");
  RawPeer peer(std::make_unique<InprocTransport>(hub), endpoint);
  for (uint64_t id = 1; id <= 3; ++id) {
    peer.Send(Req(proto::OP_PULL_SPARSE, 0, 1, 0, id), VecBuf<uint64_t>({3}), Buffer());
  }
  proto::Header r;
  ASSERT_TRUE(peer.Next(&r, nullptr));
  EXPECT_EQ(r.request_id(), 3u);
  ExpectLimitError(r, "request before activation not held: peer 0 already has 2 requests held");
  EXPECT_EQ(server.num_early_requests(), 2u);
  ASSERT_TRUE(server.Activate(0, ::osprey::testing::MakeShardMap({endpoint}, tables), tables).ok());
  for (uint64_t id = 1; id <= 2; ++id) {
    ASSERT_TRUE(peer.Next(&r, nullptr));
    EXPECT_EQ(r.op(), proto::OP_REPLY) << r.error();
    EXPECT_EQ(r.request_id(), id);
  }
  EXPECT_EQ(server.hold_budget().held_requests(), 0u);
}

TEST(LimitsTest, TenThousandBadFramesWriteABoundedNumberOfLogLines) {
  std::ostringstream log;
  auto previous = spdlog::default_logger();
  spdlog::set_default_logger(std::make_shared<spdlog::logger>(
      "capture", std::make_shared<spdlog::sinks::ostream_sink_mt>(log)));
  auto hub = std::make_shared<InprocHub>();
  LimitedServer s(std::make_unique<InprocTransport>(hub), "inproc://flood", config::LimitsConfig{});
  RawPeer peer(std::make_unique<InprocTransport>(hub), s.endpoint());
  const auto start = std::chrono::steady_clock::now();
  const uint8_t junk[] = {0xff, 0xff, 0xff};
  for (int i = 0; i < 10000; ++i) peer.Send(Buffer::Copy(junk, sizeof(junk)), Buffer(), Buffer());
  for (int i = 0; i < 10000; ++i) {
    proto::Header r;
    ASSERT_TRUE(peer.Next(&r, nullptr)) << "reply " << i << " missing";
    ASSERT_EQ(r.op(), proto::OP_ERROR);
  }
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  spdlog::set_default_logger(previous);
  size_t lines = 0;
  for (size_t at = log.str().find("bad request"); at != std::string::npos;
       at = log.str().find("bad request", at + 1)) {
    ++lines;
  }
  EXPECT_EQ(s.server().stats().bad_requests, 10000u);
  EXPECT_EQ(s.server().stats().bad_headers, 10000u);
  EXPECT_GE(lines, 1u);
  EXPECT_LE(lines, static_cast<size_t>(seconds) + 2) << log.str().substr(0, 2000);
}

TEST(LimitsZmqTest, OversizedFrameIsNeverReadAndThePeerIsServedAfterwards) {
  config::LimitsConfig limits;
  limits.max_frame_bytes = 64 << 10;
  TransportOptions options;
  options.max_message_bytes = static_cast<int64_t>(limits.max_frame_bytes);
  LimitedServer s(std::make_unique<ZmqTransport>(options), "tcp://127.0.0.1:0", limits);
  RawPeer good(std::make_unique<ZmqTransport>(TransportOptions{}), s.endpoint());
  ExpectServed(&good);
  RawPeer bad(std::make_unique<ZmqTransport>(TransportOptions{}), s.endpoint());
  std::vector<float> huge(8 << 20 >> 2, 0.5f);  // 8 MiB
  bad.Send(Req(proto::OP_PUSH_DENSE, 1, 1, huge.size() * 4, 7), VecBuf<uint64_t>({0}), VecBuf(huge));
  // The bad peer reconnects by itself; its requests are served again (its big one never is).
  bool served = false;
  for (int attempt = 0; attempt < 10 && !served; ++attempt) {
    bad.Send(Req(proto::OP_PULL_SPARSE, 0, 1, 0, 100 + attempt), VecBuf<uint64_t>({3}), Buffer());
    proto::Header r;
    while (!served && bad.Next(&r, nullptr)) {
      EXPECT_NE(r.request_id(), 7u) << "the oversized push was answered: it was read";
      served = r.op() == proto::OP_REPLY;
    }
  }
  EXPECT_TRUE(served);
  EXPECT_LT(s.server().stats().bytes_in, uint64_t{1} << 20) << "the 8 MiB frame reached the server";
  ExpectLimitError(Call(&good, Req(proto::OP_PULL_SPARSE, 0, 1000000000, 0), VecBuf<uint64_t>({3}), Buffer()),
                   "limits.max_keys_per_request");
  ExpectServed(&good);
}

}  // namespace
}  // namespace osprey::server
