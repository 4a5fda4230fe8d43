// Fail fast through the real binaries with the real libibverbs: this machine has no RDMA device
// (ibv_get_device_list returns 0), so with cluster.transport=rdma every binary must exit 2 at
// start -- before connecting anywhere -- with one message naming what it looked for and found.
#include <gtest/gtest.h>

#include <chrono>
#include <string>

#include "common/rdma/data_transport.h"
#include "common/rdma/real_verbs.h"
#include "common/rdma/startup_check.h"
#include "tests/testing/launch_util.h"

namespace osprey {
namespace {

using testing::BinDir;
using testing::ReadFile;
using testing::RunCommand;
using testing::SourceDir;

bool NoDeviceHere() {
  auto stack = rdma::QueryRdmaStack();
  return stack.ok() && stack->devices.empty();
}

// Runs `cmd` with stderr to a file; its exit status, stderr and wall time.
int RunTimed(const std::string& cmd, std::string* err, double* seconds) {
  const std::string out = ::testing::TempDir() + "/rdma_fail_fast.err";
  auto t0 = std::chrono::steady_clock::now();
  int rc = RunCommand(cmd + " >/dev/null 2>" + out);
  *seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  *err = ReadFile(out);
  return rc;
}

TEST(RdmaFailFastTest, EveryBinaryExits2NamingWhatItLookedFor) {
  if (!NoDeviceHere()) GTEST_SKIP() << "this machine has an RDMA device";
  const std::string config = SourceDir() + "/configs/local.yaml";
  const std::string set = " --set cluster.transport=rdma --set rdma.device=mlx5_0";
  for (const std::string& cmd :
       {BinDir() + "/osprey launch " + config + set, BinDir() + "/osprey-coordinator --config " +
        config + set, BinDir() + "/osprey-server --config " + config + set,
        BinDir() + "/osprey-worker --config " + config + set}) {
    std::string err;
    double seconds = 0;
    EXPECT_EQ(RunTimed(cmd, &err, &seconds), 2) << cmd << "\n" << err;
    EXPECT_LT(seconds, 1.0) << cmd;
    EXPECT_NE(err.find("looked for RDMA device 'mlx5_0' port 1"), std::string::npos) << err;
    EXPECT_NE(err.find("found 0 devices"), std::string::npos) << err;
  }
}

TEST(RdmaFailFastTest, CheckNamesAMissingDeviceADownPortAndAMissingGid) {
  rdma::StackInfo stack;
  rdma::DeviceInfo d;
  d.name = "mlx5_0";
  rdma::PortInfo p;
  p.port = 1;
  p.state = "down";
  p.link_layer = "Ethernet";
  d.ports.push_back(p);
  stack.devices.push_back(d);
  Status st = rdma::CheckRdmaDevice({"mlx5_9", 1, 0}, stack);
  EXPECT_NE(st.message().find("found only mlx5_0"), std::string::npos) << st.ToString();
  st = rdma::CheckRdmaDevice({"mlx5_0", 1, 0}, stack);
  EXPECT_NE(st.message().find("port 1 down"), std::string::npos) << st.ToString();
  stack.devices[0].ports[0].state = "active";
  st = rdma::CheckRdmaDevice({"", 1, 3}, stack);
  EXPECT_NE(st.message().find("no GID at that index"), std::string::npos) << st.ToString();
  stack.devices[0].ports[0].gids.push_back({3, "fe80::1"});
  EXPECT_TRUE(rdma::CheckRdmaDevice({"", 1, 3}, stack).ok());
  EXPECT_EQ(rdma::CheckRdmaDevice({"", 2, 0}, stack).code(), StatusCode::kFailedPrecondition);
}

TEST(RdmaFailFastTest, CurveWithRdmaIsRefusedAtStart) {
  config::PsConfig c;
  c.cluster.transport = "rdma";
  c.security.mode = config::SecurityMode::kCurve;
  Status st = rdma::CheckTransportAtStart(c);
  EXPECT_EQ(st.code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(st.message().find("security.mode curve"), std::string::npos) << st.ToString();
  c.cluster.transport = "tcp";
  EXPECT_TRUE(rdma::CheckTransportAtStart(c).ok());
}

// The mains' data transport: ZeroMQ for tcp; for rdma the real verbs, which find no device here
// and say so (rather than a transport that fails on its first connect).
TEST(RdmaFailFastTest, DataTransportIsZmqForTcpAndNamesTheMissingDeviceForRdma) {
  config::PsConfig c;
  TransportOptions zmq;
  auto tcp = rdma::MakeDataTransport(c, zmq);
  ASSERT_TRUE(tcp.ok()) << tcp.status().ToString();
  auto bound = (*tcp)->Listen("tcp://127.0.0.1:0");
  EXPECT_TRUE(bound.ok()) << bound.status().ToString();
  if (!NoDeviceHere()) GTEST_SKIP() << "this machine has an RDMA device";
  c.cluster.transport = "rdma";
  c.rdma.device = "mlx5_0";
  auto r = rdma::MakeDataTransport(c, zmq);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(r.status().message().find("mlx5_0"), std::string::npos) << r.status().ToString();
  EXPECT_EQ(rdma::DefaultRdmaEndpoint(c.cluster), "rdma://127.0.0.1:0");
}

}  // namespace
}  // namespace osprey
