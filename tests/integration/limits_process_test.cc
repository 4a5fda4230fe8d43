// Limits against a real osprey-server process over real sockets (issue #13): the test starts
// osprey-coordinator and one osprey-server (configs/bsp.yaml with a small `limits` section),
// registers two workers itself (worker 1 never sends anything, so bsp pulls of a later clock
// are held), then, as a stranger would: a frame over limits.max_frame_bytes (never read: ZeroMQ
// drops the connection), a header claiming 10^9 keys, a flood of held pulls beyond
// limits.max_inflight_per_peer, 10k unparsable frames. Each is refused by name, the server keeps
// serving a good pull, its log has a bounded number of bad-request lines, and at SIGTERM its
// final statistics count the refusals. Memory stays bounded: a 256 MiB frame at the server and
// one at the coordinator (limits.max_control_frame_bytes) raise neither process's peak RSS
// (VmHWM) by more than a few MiB, and the coordinator goes on answering.
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <future>
#include <regex>
#include <string>
#include <vector>

#include "common/zmq_transport.h"
#include "coordinator/coordinator_client.h"
#include "tests/coordinator/process_test_util.h"
#include "tests/testing/cluster_fixture.h"
#include "tests/testing/free_port.h"
#include "tests/testing/test_env.h"
#include "tests/testing/wait.h"

namespace osprey {
namespace {

using testing::RawPeer;
using testing::VecBuf;
namespace proc = tools::testing;

using testing::FreePort;

proto::Header Req(proto::Op op, const proto::ShardMap& map, uint32_t table, uint64_t num_keys,
                  uint64_t value_bytes, uint64_t id) {
  proto::Header h;
  h.set_op(op);
  h.set_table(table);
  h.set_request_id(id);
  h.set_epoch(map.epoch());
  h.set_num_keys(num_keys);
  h.set_value_bytes(value_bytes);
  return h;
}

// The peak resident set of process `pid` (VmHWM in /proc/PID/status), in bytes; -1 if unreadable.
int64_t PeakRssBytes(pid_t pid) {
  const std::string status = testing::ReadFile("/proc/" + std::to_string(pid) + "/status");
  const size_t at = status.find("VmHWM:");
  if (at == std::string::npos) return -1;
  long long kb = -1;
  if (std::sscanf(status.c_str() + at, "VmHWM: %lld kB", &kb) != 1) return -1;
  return kb * 1024;
}

constexpr int64_t kMiB = int64_t{1} << 20;

// Registers a worker (identified by `pid`: the coordinator refuses a pid registered twice).
StatusOr<proto::RegisterReply> RegisterWorker(std::unique_ptr<coordinator::CoordinatorClient>* out,
                                              const std::string& endpoint, pid_t pid) {
  OSPREY_ASSIGN_OR_RETURN(auto t, MakeTransport(TransportOptions{}));
  OSPREY_ASSIGN_OR_RETURN(*out, coordinator::CoordinatorClient::Create(std::move(t), endpoint));
  proto::RegisterRequest req;
  req.set_role(proto::ROLE_WORKER);
  req.set_host("localhost");
  req.set_pid(pid);
  req.set_requested_rank(-1);
  return (*out)->Register(req, 30000);
}

TEST(LimitsProcessTest, RealServerRefusesByNameAndKeepsServing) {
  proc::TempDir dir;
  std::filesystem::create_directories(dir.path() + "/coordinator");
  std::filesystem::create_directories(dir.path() + "/server");
  const std::string coord = "tcp://127.0.0.1:" + std::to_string(FreePort());
  std::vector<std::string> args = {"--config", testing::SourceDir() + "/configs/bsp.yaml"};
  for (const char* s : {"cluster.servers=1", "cluster.workers=2", "cluster.heartbeat_timeout_ms=120000",
                        "limits.max_frame_bytes=65536", "limits.max_keys_per_request=4096",
                        "limits.max_inflight_per_peer=50"}) {
    args.insert(args.end(), {"--set", s});
  }
  args.insert(args.end(), {"--set", "cluster.coordinator=" + coord});
  auto with = [&](const std::string& bin) {
    std::vector<std::string> a = {testing::BinDir() + "/" + bin};
    a.insert(a.end(), args.begin(), args.end());
    return a;
  };
  proc::Proc coordinator = proc::Spawn(with("osprey-coordinator"), dir.path() + "/coordinator");
  proc::Proc server = proc::Spawn(with("osprey-server"), dir.path() + "/server");

  std::unique_ptr<coordinator::CoordinatorClient> w0, w1;
  auto r1 = std::async(std::launch::async, [&] { return RegisterWorker(&w1, coord, getppid()); });
  auto r0 = RegisterWorker(&w0, coord, getpid());
  ASSERT_TRUE(r0.ok()) << r0.status().ToString();
  ASSERT_TRUE(r1.get().ok());
  const proto::ShardMap& map = r0->shard_map();
  ASSERT_EQ(map.server_endpoints_size(), 1);
  const uint32_t sparse = map.tables(0).type() == proto::TABLE_SPARSE ? 0 : 1;
  const int me = r0->rank();

  RawPeer good(std::make_unique<ZmqTransport>(TransportOptions{}), map.server_endpoints(0));
  auto pull_ok = [&](RawPeer* p, uint64_t id) {
    proto::Header h = Req(proto::OP_PULL_SPARSE, map, sparse, 1, 0, id);
    h.set_worker_rank(me);
    p->Send(h, VecBuf<uint64_t>({3}), Buffer());
    proto::Header r;
    return p->Next(&r, nullptr) && r.op() == proto::OP_REPLY;
  };
  ASSERT_TRUE(pull_ok(&good, 1));

  // 10^9 claimed keys: refused by the count.
  good.Send(Req(proto::OP_PULL_SPARSE, map, sparse, 1000000000, 0, 2), VecBuf<uint64_t>({3}), Buffer());
  proto::Header r;
  ASSERT_TRUE(good.Next(&r, nullptr));
  EXPECT_EQ(r.op(), proto::OP_ERROR);
  EXPECT_NE(r.error().find("claims 1000000000 keys: limits.max_keys_per_request is 4096"), std::string::npos) << r.error();

  // A 1 MiB frame: never read, never answered; the sender is served again once reconnected.
  RawPeer big(std::make_unique<ZmqTransport>(TransportOptions{}), map.server_endpoints(0));
  std::vector<float> huge(256 << 10, 0.5f);
  big.Send(Req(proto::OP_PUSH_SPARSE, map, sparse, 1, huge.size() * 4, 3), VecBuf<uint64_t>({3}), VecBuf(huge));
  EXPECT_TRUE(testing::WaitUntil([&] { return pull_ok(&big, 4); }, std::chrono::seconds(60)));

  // 256 MiB frames at the server and at the coordinator: dropped by ZeroMQ after the size field,
  // never buffered (without the limit each would raise the peak RSS by 256 MiB).
  {
    const int64_t server_before = PeakRssBytes(server.pid), coord_before = PeakRssBytes(coordinator.pid);
    ASSERT_GT(server_before, 0);
    ASSERT_GT(coord_before, 0);
    std::vector<uint8_t> giant(256 * kMiB, 0x5a);
    RawPeer at_server(std::make_unique<ZmqTransport>(TransportOptions{}), map.server_endpoints(0));
    at_server.Send(Req(proto::OP_PUSH_SPARSE, map, sparse, 1, giant.size(), 7), VecBuf<uint64_t>({3}), VecBuf(giant));
    RawPeer at_coord(std::make_unique<ZmqTransport>(TransportOptions{}), coord);
    at_coord.Send(Buffer::Copy(giant.data(), 16), Buffer(), VecBuf(giant));
    // The coordinator still answers (its state), and the server still serves the sender.
    EXPECT_TRUE(testing::WaitUntil([&] { return pull_ok(&at_server, 8); }, std::chrono::seconds(60)));
    auto state = w0->GetState(30000);
    EXPECT_TRUE(state.ok()) << state.status().ToString();
    const int64_t server_after = PeakRssBytes(server.pid), coord_after = PeakRssBytes(coordinator.pid);
    std::printf("peak RSS: server %lld -> %lld MiB, coordinator %lld -> %lld MiB\n",
                static_cast<long long>(server_before / kMiB), static_cast<long long>(server_after / kMiB),
                static_cast<long long>(coord_before / kMiB), static_cast<long long>(coord_after / kMiB));
    EXPECT_LT(server_after - server_before, 32 * kMiB) << "the server buffered a frame beyond limits.max_frame_bytes";
    EXPECT_LT(coord_after - coord_before, 32 * kMiB)
        << "the coordinator buffered a frame beyond limits.max_control_frame_bytes";
  }

  // Held pulls (clock 5; worker 1 is at clock 0): 50 held, the other 150 refused by name.
  RawPeer flooder(std::make_unique<ZmqTransport>(TransportOptions{}), map.server_endpoints(0));
  proto::Header held = Req(proto::OP_PULL_SPARSE, map, sparse, 1, 0, 5);
  held.set_worker_rank(me);
  held.set_clock(5);
  for (int i = 0; i < 200; ++i) flooder.Send(held, VecBuf<uint64_t>({3}), Buffer());
  for (int i = 0; i < 150; ++i) {
    ASSERT_TRUE(flooder.Next(&r, nullptr)) << "refusal " << i;
    EXPECT_NE(r.error().find("limits.max_inflight_per_peer is 50"), std::string::npos) << r.error();
  }

  // 10k unparsable frames: each refused, a bounded number of log lines.
  const auto start = std::chrono::steady_clock::now();
  RawPeer junk(std::make_unique<ZmqTransport>(TransportOptions{}), map.server_endpoints(0));
  const uint8_t bytes[] = {0xff, 0xff, 0xff};
  for (int i = 0; i < 10000; ++i) junk.Send(Buffer::Copy(bytes, 3), Buffer(), Buffer());
  for (int i = 0; i < 10000; ++i) ASSERT_TRUE(junk.Next(&r, nullptr)) << "reply " << i;
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_TRUE(pull_ok(&good, 6)) << "a good worker is still served";

  ::kill(server.pid, SIGTERM);
  ASSERT_TRUE(proc::WaitExit(server.pid, std::chrono::seconds(30)).has_value());
  ::kill(coordinator.pid, SIGTERM);
  (void)proc::WaitExit(coordinator.pid, std::chrono::seconds(30));
  const std::string log = testing::ReadFile(server.err_path);
  size_t lines = 0;
  for (size_t at = log.find("bad request"); at != std::string::npos; at = log.find("bad request", at + 1)) ++lines;
  // One line per peer and kind per second: the junk peer (header kind), the flooder and the
  // good peer (limit kind).
  EXPECT_LE(lines, 3 * (static_cast<size_t>(seconds) + 2)) << log.substr(0, 3000);
  std::smatch m;
  ASSERT_TRUE(std::regex_search(log, m, std::regex(R"((\d+) bad: (\d+) unparsable headers, (\d+) beyond a limit)")))
      << log.substr(log.size() > 3000 ? log.size() - 3000 : 0);
  EXPECT_EQ(std::stoul(m[2]), 10000u);
  EXPECT_EQ(std::stoul(m[3]), 151u);  // 10^9 keys + 150 held pulls
}

}  // namespace
}  // namespace osprey
