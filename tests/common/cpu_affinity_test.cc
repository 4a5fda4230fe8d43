// CPU lists and pinning (common/cpu_affinity.h): the cpuset syntax both ways, bad lists refused
// by name, and a real sched_setaffinity on this process (restored afterwards).
#include "common/cpu_affinity.h"

#include <gtest/gtest.h>

#include <thread>

namespace osprey {
namespace {

TEST(CpuAffinityTest, ParsesAndFormatsCpusetLists) {
  auto cpus = ParseCpuList("8,0-3,2,10-11");
  ASSERT_TRUE(cpus.ok()) << cpus.status().ToString();
  EXPECT_EQ(*cpus, (std::vector<int>{0, 1, 2, 3, 8, 10, 11}));
  EXPECT_EQ(FormatCpuList(*cpus), "0-3,8,10-11");
  EXPECT_TRUE(ParseCpuList("")->empty());
  EXPECT_EQ(FormatCpuList({5}), "5");
}

TEST(CpuAffinityTest, RefusesBadListsNamingTheItem) {
  auto range = ParseCpuList("0,3-1");
  ASSERT_FALSE(range.ok());
  EXPECT_NE(range.status().message().find("'3-1' is not a range"), std::string::npos) << range.status().ToString();
  auto word = ParseCpuList("0,x");
  ASSERT_FALSE(word.ok());
  EXPECT_NE(word.status().message().find("'x' is not a CPU number"), std::string::npos);
  EXPECT_FALSE(ParseCpuList("0,").ok());
  EXPECT_FALSE(ParseCpuList("-1").ok());
  EXPECT_FALSE(ParseCpuList("1024").ok());
}

TEST(CpuAffinityTest, PinsThisProcessAndItsNewThreads) {
  const std::vector<int> before = AllowedCpus();
  ASSERT_FALSE(before.empty());
  const int one = before.back();
  ASSERT_TRUE(PinProcessTo({one}).ok());
  EXPECT_EQ(AllowedCpus(), std::vector<int>{one});
  std::vector<int> in_thread;
  std::thread([&] { in_thread = AllowedCpus(); }).join();
  EXPECT_EQ(in_thread, std::vector<int>{one});  // inherited
  // Back to every CPU it had: widening within the cpuset works.
  ASSERT_TRUE(PinProcessTo(before).ok());
  EXPECT_EQ(AllowedCpus(), before);
  // A CPU the machine does not have is named, and nothing changes.
  Status s = PinProcessTo({1023});
  EXPECT_EQ(s.code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(s.message().find("CPU 1023 not on this machine (CPUs 0-"), std::string::npos) << s.ToString();
  EXPECT_EQ(AllowedCpus(), before);
}

}  // namespace
}  // namespace osprey
