// Fail fast through the real binaries with the real libibverbs: this machine has no RDMA device
// (ibv_get_device_list returns 0), so with cluster.transport=rdma every binary must exit 2 at
// start -- before connecting anywhere -- with one message naming what it looked for and found.
#include <gtest/gtest.h>

#include <chrono>
#include <string>

#include "common/rdma/real_verbs.h"
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

}  // namespace
}  // namespace osprey
