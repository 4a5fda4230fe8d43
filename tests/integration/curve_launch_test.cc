// `osprey launch configs/local-curve.yaml` as real processes on real sockets, attacked while it
// trains: a peer with an unknown key, a peer without CURVE, a worker key sending control ops,
// asking to scale or importing rows, an admin asking for a checkpoint in a foreign directory, a
// worker key registering as a server, a stranger on a server's plain sealed-data port. Each is
// refused, counted (the servers' statistics), logged once; the job completes. And CURVE does not
// change what the job learns.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>
#include <zmq.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <regex>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "common/config/security_config.h"
#include "common/zmq_curve.h"
#include "coordinator/coordinator_client.h"
#include "coordinator/rpc_client.h"
#include "proto/wire.h"
#include "tests/testing/launch_util.h"
#include "tests/testing/wait.h"

namespace osprey {
namespace {

namespace fs = std::filesystem;
using testing::ReadFile;

pid_t StartLaunch(const std::string& config, const std::string& base, const std::string& steps) {
  return testing::StartLaunch(config, base, {"--set", "train.steps=" + steps, "--set", "checkpoint.dir=" + base + "/ckpt"});
}

int WaitExit(pid_t pid) { return testing::WaitLaunch(pid); }

StatusOr<std::unique_ptr<coordinator::RpcClient>> Dial(const std::string& keys, PeerRole as,
                                                       PeerRole dials, const std::string& to) {
  TransportOptions options;
  if (!keys.empty()) {
    OSPREY_ASSIGN_OR_RETURN(options, config::MakeTransportOptions(
                                         {config::SecurityMode::kCurve, keys}, as, dials));
  }
  OSPREY_ASSIGN_OR_RETURN(auto t, MakeTransport(options));
  return coordinator::RpcClient::Create(std::move(t), to);
}

// Sends one message and does not wait: a refused connection never answers.
void SendBlind(TransportOptions options, const std::string& to) {
  auto t = MakeTransport(options);
  ASSERT_TRUE(t.ok());
  (*t)->SetHandler([](Message&&) {});
  ASSERT_TRUE((*t)->Start().ok());
  auto peer = (*t)->Connect(to);
  ASSERT_TRUE(peer.ok());
  proto::Header h;
  h.set_op(proto::OP_SERVER_STATS);
  Message m;
  m.peer = *peer;
  m.header = SerializeHeader(h);
  ASSERT_TRUE((*t)->Send(std::move(m)).ok());
  (*t)->Stop();  // linger 0; the handshake already started or is dropped: both refused
}

proto::ServerStats AdminStats(const std::string& keys, const std::string& server) {
  proto::ServerStats st;
  auto rpc = Dial(keys, PeerRole::kAdmin, PeerRole::kServer, server);
  if (rpc.ok()) {
    EXPECT_TRUE((*rpc)->CallRaw(proto::OP_SERVER_STATS, "", &st, 5000).ok());
    (*rpc)->Stop();
  }
  return st;
}

TEST(CurveLaunchTest, StrangersAndWrongRolesAreRefusedAndTheJobCompletes) {
  if (!CurveAvailable()) GTEST_SKIP() << "libzmq without CURVE";
  const std::string base = ::testing::TempDir() + "/osprey-curve-launch-" + std::to_string(getpid());
  fs::remove_all(base);
  fs::create_directories(base);
  pid_t launcher = StartLaunch("local-curve.yaml", base, "1500");
  const std::string keys = base + "/logs/keys";
  // The coordinator endpoint (printed first), then the registered servers.
  std::string coord;
  ASSERT_TRUE(testing::WaitUntil([&] {
    std::smatch m;
    std::string text = ReadFile(base + "/launch.out");
    if (std::regex_search(text, m, std::regex("coordinator (tcp://[0-9.]+:[0-9]+)"))) coord = m[1];
    return !coord.empty() && fs::exists(keys + "/admin.secret");
  }, std::chrono::seconds(30)));
  std::string server;
  ASSERT_TRUE(testing::WaitUntil([&] {
    auto rpc = Dial(keys, PeerRole::kAdmin, PeerRole::kCoordinator, coord);
    proto::ClusterState st;
    if (rpc.ok() && (*rpc)->Call(proto::OP_CLUSTER_STATE, nullptr, &st, 2000).ok()) {
      for (const auto& n : st.nodes()) {
        if (n.role() == proto::ROLE_SERVER && n.rank() == 0) server = n.endpoint();
      }
    }
    return !server.empty();
  }, std::chrono::seconds(30)));

  // 1. Unknown key, 2. no CURVE: refused at the handshake, counted by the server's transport.
  TransportOptions stranger = *config::MakeTransportOptions(
      {config::SecurityMode::kCurve, keys}, PeerRole::kWorker, PeerRole::kServer);
  char pub[41], sec[41];
  ASSERT_EQ(zmq_curve_keypair(pub, sec), 0);
  stranger.curve.public_key = pub;
  stranger.curve.secret_key = sec;
  SendBlind(stranger, server);
  SendBlind(TransportOptions{}, server);
  EXPECT_TRUE(testing::WaitUntil([&] { return AdminStats(keys, server).auth_refused() >= 2; },
                                 std::chrono::seconds(20)));
  // 3. A worker's key sending control ops (twice: logged once), to a server and the coordinator.
  auto as_worker = Dial(keys, PeerRole::kWorker, PeerRole::kServer, server);
  ASSERT_TRUE(as_worker.ok());
  for (int i = 0; i < 2; ++i) {
    Status s = (*as_worker)->CallRaw(proto::OP_CHECKPOINT, "", nullptr, 5000);
    EXPECT_EQ(s.code(), StatusCode::kPermissionDenied) << s.ToString();
  }
  // ... nor import rows into a server (a scale step's OP_MIGRATE_ROWS is server to server).
  Status migrate = (*as_worker)->CallRaw(proto::OP_MIGRATE_ROWS, "", nullptr, 5000);
  EXPECT_EQ(migrate.code(), StatusCode::kPermissionDenied) << migrate.ToString();
  (*as_worker)->Stop();
  auto worker_to_coord = Dial(keys, PeerRole::kWorker, PeerRole::kCoordinator, coord);
  ASSERT_TRUE(worker_to_coord.ok());
  Status shut = (*worker_to_coord)->CallRaw(proto::OP_SHUTDOWN, "stranger", nullptr, 5000);
  EXPECT_EQ(shut.code(), StatusCode::kPermissionDenied) << shut.ToString();
  // ... nor scale the job (osprey scale dials as admin).
  Status scale = (*worker_to_coord)->CallRaw(proto::OP_SCALE, "", nullptr, 5000);
  EXPECT_EQ(scale.code(), StatusCode::kPermissionDenied) << scale.ToString();
  EXPECT_NE(scale.message().find("only the admin key"), std::string::npos) << scale.ToString();
  // ... nor take a server's place in the shard map.
  proto::RegisterRequest as_server;
  as_server.set_role(proto::ROLE_SERVER);
  as_server.set_endpoint("tcp://127.0.0.1:1");
  Status reg = (*worker_to_coord)->Call(proto::OP_REGISTER, &as_server, nullptr, 5000);
  EXPECT_EQ(reg.code(), StatusCode::kPermissionDenied) << reg.ToString();
  (*worker_to_coord)->Stop();
  // 4. The admin naming a foreign checkpoint directory.
  auto as_admin = Dial(keys, PeerRole::kAdmin, PeerRole::kServer, server);
  ASSERT_TRUE(as_admin.ok());
  Status foreign = (*as_admin)->CallRaw(proto::OP_CHECKPOINT, base + "/x", nullptr, 5000);
  EXPECT_EQ(foreign.code(), StatusCode::kPermissionDenied) << foreign.ToString();
  (*as_admin)->Stop();
  EXPECT_FALSE(fs::exists(base + "/x"));
  proto::ServerStats st = AdminStats(keys, server);
  EXPECT_EQ(st.refused(), 4u);  // two checkpoints and a migration from a worker, a foreign dir
  // 5. A stranger on the server's plain sealed-data port (its log names it): a plain message
  // and a forged sealed header, each refused and counted in auth_refused.
  const uint64_t refused_before = st.auth_refused();
  std::string data_port;
  ASSERT_TRUE(testing::WaitUntil([&] {
    std::smatch m;
    const std::string logs = ReadFile(base + "/logs/server-0.log") + ReadFile(base + "/logs/server-1.log");
    const std::regex re("listener tcp://[^ ]*:" + server.substr(server.rfind(':') + 1) +
                        ": sealed data plane on port ([0-9]+)");
    if (std::regex_search(logs, m, re)) data_port = m[1];
    return !data_port.empty();
  }, std::chrono::seconds(10)));
  void* ctx = zmq_ctx_new();
  void* plain = zmq_socket(ctx, ZMQ_DEALER);
  const std::string data = server.substr(0, server.rfind(':') + 1) + data_port;
  ASSERT_EQ(zmq_connect(plain, data.c_str()), 0);
  for (const std::vector<std::string>& frames :
       {std::vector<std::string>{"h", "k", "v"},
        std::vector<std::string>{std::string("OSD1") + std::string(17, '\2'), "x", "y", "z"}}) {
    for (size_t i = 0; i < frames.size(); ++i) {
      zmq_send(plain, frames[i].data(), frames[i].size(), i + 1 < frames.size() ? ZMQ_SNDMORE : 0);
    }
  }
  EXPECT_TRUE(testing::WaitUntil(
      [&] { return AdminStats(keys, server).auth_refused() >= refused_before + 2; },
      std::chrono::seconds(20)));
  zmq_close(plain);
  zmq_ctx_term(ctx);

  ASSERT_EQ(WaitExit(launcher), 0) << ReadFile(base + "/launch.out");
  // Log file names follow the launch order, not the rank: the attacked server is in one of them.
  const std::string log = ReadFile(base + "/logs/server-0.log") + ReadFile(base + "/logs/server-1.log");
  auto count = [&](const std::string& what) {
    size_t n = 0;
    for (size_t at = log.find(what); at != std::string::npos; at = log.find(what, at + 1)) ++n;
    return n;
  };
  EXPECT_EQ(count("from role 'worker' (only the coordinator or admin may)"), 1u) << log;
  EXPECT_EQ(count("is outside the configured checkpoint.dir"), 1u) << log;
  EXPECT_EQ(count("curve: refused a connection"), 1u) << log;
  EXPECT_EQ(count("refused a message on the sealed data port"), 1u) << log;
  const std::string report = ReadFile(base + "/report.json");
  EXPECT_GT(testing::JsonNumber(report, "auc"), 0.7);
  // The servers' final reports carry the counts into the job's report.
  EXPECT_EQ(testing::JsonNumber(report, "server_refused"), 4) << report;
  EXPECT_GE(testing::JsonNumber(report, "server_auth_refused"), 2) << report;
}

// CURVE changes the bytes on the wire, not what is computed: same seeds, same AUC (within what
// the asynchronous interleaving of two workers moves it between any two runs).
TEST(CurveLaunchTest, EncryptedDefaultJobLearnsTheSame) {
  if (!CurveAvailable()) GTEST_SKIP() << "libzmq without CURVE";
  const std::string base = ::testing::TempDir() + "/osprey-curve-auc-" + std::to_string(getpid());
  double auc[2];
  const char* configs[2] = {"local.yaml", "local-curve.yaml"};
  for (int i = 0; i < 2; ++i) {
    const std::string dir = base + "/" + std::to_string(i);
    fs::remove_all(dir);
    fs::create_directories(dir);
    ASSERT_EQ(WaitExit(StartLaunch(configs[i], dir, "500")), 0) << ReadFile(dir + "/launch.out");
    auc[i] = testing::JsonNumber(ReadFile(dir + "/report.json"), "auc");
  }
  EXPECT_GT(auc[0], 0.7);
  EXPECT_NEAR(auc[1], auc[0], 0.01) << "none " << auc[0] << " vs curve " << auc[1];
}

}  // namespace
}  // namespace osprey
