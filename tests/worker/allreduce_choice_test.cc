// worker.host_allreduce (worker/gpu/allreduce_choice.h): fixed paths, the auto table from
// calibration timings, nearest size in log scale, and bad timings refused by name.
#include "worker/gpu/allreduce_choice.h"

#include <gtest/gtest.h>

#include <limits>

namespace osprey::worker::gpu {
namespace {

constexpr size_t KiB = 1024, MiB = 1024 * 1024;

TEST(AllreduceChoiceTest, FixedModesTakeOnePathForEverySize) {
  auto nccl = AllreduceChoice::Fixed("nccl");
  ASSERT_TRUE(nccl.ok());
  EXPECT_EQ(nccl->For(4 * KiB), AllreducePath::kNccl);
  EXPECT_EQ(nccl->For(256 * MiB), AllreducePath::kNccl);
  EXPECT_FALSE(nccl->uses_ipc());
  EXPECT_EQ(nccl->Describe(), "nccl");
  auto ipc = AllreduceChoice::Fixed("ipc");
  ASSERT_TRUE(ipc.ok());
  EXPECT_EQ(ipc->For(1), AllreducePath::kIpc);
  EXPECT_TRUE(ipc->uses_ipc());
  auto bad = AllreduceChoice::Fixed("nvls");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("'nvls' (one of auto, nccl, ipc)"), std::string::npos);
  EXPECT_FALSE(AllreduceChoice::Fixed("auto").ok());  // needs timings
}

TEST(AllreduceChoiceTest, AutoTakesTheFasterPathAtTheNearestCalibratedSize) {
  // IPC wins small and medium messages, NCCL the large ones (the shape the seed measured).
  auto c = AllreduceChoice::FromTimings({{64 * KiB, 20, 9}, {256 * KiB, 24, 14}, {1 * MiB, 40, 31},
                                         {4 * MiB, 90, 95}, {16 * MiB, 300, 340}});
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->For(4 * KiB), AllreducePath::kIpc);     // below the first: the first
  EXPECT_EQ(c->For(300 * KiB), AllreducePath::kIpc);   // nearest 256 KiB
  EXPECT_EQ(c->For(1536 * KiB), AllreducePath::kIpc);  // log-nearest 1 MiB (1.5x vs 2.7x)
  EXPECT_EQ(c->For(3 * MiB), AllreducePath::kNccl);    // nearest 4 MiB
  EXPECT_EQ(c->For(1024 * MiB), AllreducePath::kNccl);  // above the last: the last
  EXPECT_TRUE(c->uses_ipc());
  EXPECT_EQ(c->Describe().substr(0, 35), "auto: 64 KiB ipc 9.0 us (nccl 20.0)");
  EXPECT_NE(c->Describe().find("16 MiB nccl 300.0 us (ipc 340.0)"), std::string::npos) << c->Describe();
  auto never = AllreduceChoice::FromTimings({{64 * KiB, 10, 11}, {1 * MiB, 30, 30}});
  ASSERT_TRUE(never.ok());
  EXPECT_FALSE(never->uses_ipc());  // a tie goes to NCCL
}

TEST(AllreduceChoiceTest, RefusesTimingsThatCannotBeRight) {
  EXPECT_FALSE(AllreduceChoice::FromTimings({}).ok());
  auto order = AllreduceChoice::FromTimings({{1 * MiB, 1, 1}, {64 * KiB, 1, 1}});
  ASSERT_FALSE(order.ok());
  EXPECT_NE(order.status().message().find("entry 1"), std::string::npos) << order.status().ToString();
  auto nan = AllreduceChoice::FromTimings({{64 * KiB, std::numeric_limits<double>::quiet_NaN(), 1}});
  ASSERT_FALSE(nan.ok());
  EXPECT_NE(nan.status().message().find("64 KiB"), std::string::npos) << nan.status().ToString();
  EXPECT_FALSE(AllreduceChoice::FromTimings({{64 * KiB, 0, 1}}).ok());
}

TEST(AllreduceChoiceTest, CalibrationSizesGoUpByFourToTheLargestMessage) {
  EXPECT_EQ(CalibrationSizes(2 * MiB), (std::vector<size_t>{64 * KiB, 256 * KiB, 1 * MiB, 2 * MiB}));
  EXPECT_EQ(CalibrationSizes(16 * MiB), (std::vector<size_t>{64 * KiB, 256 * KiB, 1 * MiB, 4 * MiB, 16 * MiB}));
  EXPECT_EQ(CalibrationSizes(32 * KiB), (std::vector<size_t>{32 * KiB}));
}

}  // namespace
}  // namespace osprey::worker::gpu
