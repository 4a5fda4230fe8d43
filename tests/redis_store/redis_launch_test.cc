// `osprey launch` with the Redis store through the real binaries: configs/local-redis.yaml (a
// redis-server the launcher starts) and configs/local-redis-cluster.yaml (a 3-master Redis
// Cluster the launcher starts) train the default job to the AUC of configs/local.yaml (the native
// store), within 0.002; the launcher stops its Redis with the job.
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <string>

#include <gtest/gtest.h>

#include "tests/testing/launch_util.h"

namespace osprey {
namespace {

namespace fs = std::filesystem;
using testing::ReadFile;

int Launch(const std::string& config, const std::string& dir, const std::string& steps) {
  return testing::WaitLaunch(testing::StartLaunch(config, dir, {"--set", "train.steps=" + steps}));
}

TEST(RedisLaunchTest, RedisStoresTrainToTheNativeAuc) {
  const std::string base = ::testing::TempDir() + "/osprey-redis-auc-" + std::to_string(getpid());
  const char* configs[3] = {"local.yaml", "local-redis.yaml", "local-redis-cluster.yaml"};
  double auc[3];
  for (int i = 0; i < 3; ++i) {
    const std::string dir = base + "/" + std::to_string(i);
    fs::remove_all(dir);
    fs::create_directories(dir);
    ASSERT_EQ(Launch(configs[i], dir, "500"), 0) << ReadFile(dir + "/launch.out");
    auc[i] = testing::JsonNumber(ReadFile(dir + "/report.json"), "auc");
    std::printf("%-26s AUC %.4f\n", configs[i], auc[i]);
    if (i > 0) {
      const std::string out = ReadFile(dir + "/launch.out");
      EXPECT_NE(out.find("local redis"), std::string::npos) << out;
      EXPECT_NE(out.find(i == 1 ? "store redis\n" : "store redis-cluster\n"), std::string::npos) << out;
      // The launcher stopped its Redis: nothing answers on the endpoints any more is hard to
      // check portably; the Redis log dir exists under the job's logs.
      EXPECT_TRUE(fs::exists(dir + "/logs/redis")) << out;
    }
  }
  EXPECT_GT(auc[0], 0.7);
  EXPECT_NEAR(auc[1], auc[0], 0.002) << "native " << auc[0] << " vs redis " << auc[1];
  EXPECT_NEAR(auc[2], auc[0], 0.002) << "native " << auc[0] << " vs redis cluster " << auc[2];
  fs::remove_all(base);
}

}  // namespace
}  // namespace osprey
