// The pure parts of `osprey doctor`: the cpu-list parser, the report's text and JSON, and the
// NCCL_* verdicts (GpuChecks with an injected environment; on this machine NVML and the CUDA
// driver are absent, so their rows are skips).
#include <gtest/gtest.h>

#include <map>
#include <string>

#include "tools/doctor/checks.h"
#include "tools/doctor/sysfs.h"

namespace osprey::tools::doctor {
namespace {

TEST(DoctorParts, ParsesCpuLists) {
  EXPECT_EQ(ParseCpuList("0-3,8,10-11"), (std::vector<int>{0, 1, 2, 3, 8, 10, 11}));
  EXPECT_EQ(ParseCpuList("5"), (std::vector<int>{5}));
  EXPECT_TRUE(ParseCpuList("").empty());
  EXPECT_TRUE(ParseCpuList("x-2").empty());
}

TEST(DoctorParts, ReportTextAndJson) {
  DoctorReport r;
  r.Add("cpu", "cores", Verdict::kWarn, "2 \"online\"\n", "more cores");
  r.AddDetail("a\tdetail");
  r.Add("cpu", "numa", Verdict::kOk, "1", "never shown");
  r.Add("gpu", "nvml", Verdict::kFail, "broken", "fix it");
  EXPECT_EQ(r.failures(), 1);
  const std::string text = r.Text();
  EXPECT_NE(text.find("cpu:\n  [warn] cores"), std::string::npos) << text;
  EXPECT_NE(text.find("fix: more cores"), std::string::npos) << text;
  EXPECT_EQ(text.find("never shown"), std::string::npos) << "an ok check prints no fix: " << text;
  EXPECT_NE(text.find("summary: 1 ok, 1 warn, 1 fail, 0 skipped"), std::string::npos) << text;
  const std::string json = r.Json();
  EXPECT_NE(json.find("\"found\": \"2 \\\"online\\\"\\n\""), std::string::npos) << json;
  EXPECT_NE(json.find("\"details\": [\"a\\tdetail\"]"), std::string::npos) << json;
  EXPECT_NE(json.find("\"summary\": {\"ok\": 1, \"warn\": 1, \"fail\": 1, \"skip\": 0}"),
            std::string::npos) << json;
  EXPECT_EQ(json.find("\"network\""), std::string::npos) << json;
}

const Check* Find(const DoctorReport& r, const std::string& name) {
  for (const Check& c : r.checks()) {
    if (c.name == name) return &c;
  }
  return nullptr;
}

TEST(DoctorParts, NcclEnvironmentVerdicts) {
  DoctorReport bad;
  GpuChecks({{"NCCL_P2P_LEVEL", "BOGUS"}, {"NCCL_SOCKET_IFNAME", "nosuchnic"},
             {"NCCL_DEBUG", "INFO"}}, &bad);
  ASSERT_NE(Find(bad, "NCCL_P2P_LEVEL"), nullptr);
  EXPECT_EQ(Find(bad, "NCCL_P2P_LEVEL")->verdict, Verdict::kFail);
  EXPECT_EQ(Find(bad, "NCCL_SOCKET_IFNAME")->verdict, Verdict::kFail);
  EXPECT_NE(Find(bad, "NCCL_SOCKET_IFNAME")->found.find("nosuchnic"), std::string::npos);
  EXPECT_EQ(Find(bad, "NCCL_DEBUG")->verdict, Verdict::kWarn);

  DoctorReport good;
  GpuChecks({{"NCCL_P2P_LEVEL", "NVL"}, {"NCCL_SOCKET_IFNAME", "lo"}, {"NCCL_DEBUG", "WARN"}},
            &good);
  EXPECT_EQ(Find(good, "NCCL_P2P_LEVEL")->verdict, Verdict::kOk);
  EXPECT_EQ(Find(good, "NCCL_SOCKET_IFNAME")->verdict, Verdict::kOk);
  EXPECT_EQ(Find(good, "NCCL_DEBUG")->verdict, Verdict::kOk);
  ASSERT_NE(Find(good, "NVML"), nullptr);  // a verdict whether or not a driver is there
}

}  // namespace
}  // namespace osprey::tools::doctor
