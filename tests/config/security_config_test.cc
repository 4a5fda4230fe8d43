// The `security` section: parsed into an enum with clear errors; the transport options it yields.
#include "common/config/security_config.h"

#include <stdlib.h>

#include <filesystem>

#include <gtest/gtest.h>

#include "common/zmq_curve.h"
#include "job/job_config.h"
#include "tests/config/minimal_job.h"

namespace osprey::config {
namespace {

const char* const kMinimal = kMinimalJobYaml;

TEST(SecurityConfigTest, DefaultsToNone) {
  auto job = ParseJobConfig(kMinimal, "test.yaml");
  ASSERT_TRUE(job.ok()) << job.status().ToString();
  EXPECT_EQ(job->security.mode, SecurityMode::kNone);
  auto options = MakeTransportOptions(job->security, PeerRole::kWorker, PeerRole::kServer);
  ASSERT_TRUE(options.ok());
  EXPECT_FALSE(options->curve.enabled);
}

TEST(SecurityConfigTest, ParsesCurveAndKeysDir) {
  if (!CurveAvailable()) GTEST_SKIP() << "libzmq without CURVE";
  auto job = ParseJobConfig(std::string(kMinimal) + "security:\n  mode: curve\n  keys_dir: /k\n",
                            "test.yaml");
  ASSERT_TRUE(job.ok()) << job.status().ToString();
  EXPECT_EQ(job->security.mode, SecurityMode::kCurve);
  EXPECT_EQ(job->security.keys_dir, "/k");
}

TEST(SecurityConfigTest, UnknownModeNamesTheChoices) {
  auto job = ParseJobConfig(std::string(kMinimal) + "security:\n  mode: tls\n", "test.yaml");
  ASSERT_FALSE(job.ok());
  EXPECT_NE(job.status().message().find("security.mode: 'tls' is not one of: none, curve"),
            std::string::npos) << job.status().message();
}

TEST(SecurityConfigTest, UnknownKeyIsRefused) {
  auto job = ParseJobConfig(std::string(kMinimal) + "security:\n  key_dir: /k\n", "test.yaml");
  ASSERT_FALSE(job.ok());
  EXPECT_NE(job.status().message().find("security.key_dir: unknown key"), std::string::npos)
      << job.status().message();
}

TEST(SecurityConfigTest, CurveWithoutKeysSaysWhatToDo) {
  SecurityConfig s;
  s.mode = SecurityMode::kCurve;
  auto options = MakeTransportOptions(s, PeerRole::kWorker, PeerRole::kServer);
  ASSERT_FALSE(options.ok());
  EXPECT_NE(options.status().message().find("osprey keygen"), std::string::npos);
  s.keys_dir = "/nonexistent/osprey-keys";
  options = MakeTransportOptions(s, PeerRole::kWorker, PeerRole::kServer);
  ASSERT_FALSE(options.ok());
  EXPECT_NE(options.status().message().find("/nonexistent/osprey-keys/coordinator.pub"),
            std::string::npos) << options.status().message();
}

TEST(SecurityConfigTest, CurveLoadsThisRolesKeysAndTheServerKey) {
  if (!CurveAvailable()) GTEST_SKIP() << "libzmq without CURVE";
  char tmpl[] = "/tmp/osprey-seccfg-XXXXXX";
  ASSERT_NE(::mkdtemp(tmpl), nullptr);
  ASSERT_TRUE(WriteCurveKeys(tmpl, false).ok());
  SecurityConfig s{SecurityMode::kCurve, tmpl};
  auto worker = MakeTransportOptions(s, PeerRole::kWorker, PeerRole::kServer);
  auto server = MakeTransportOptions(s, PeerRole::kServer, PeerRole::kCoordinator);
  ASSERT_TRUE(worker.ok() && server.ok());
  EXPECT_TRUE(worker->curve.enabled);
  EXPECT_EQ(worker->curve.server_key, server->curve.public_key);
  EXPECT_NE(worker->curve.secret_key, server->curve.secret_key);
  EXPECT_EQ(worker->curve.allowed.size(), 4u);
  std::filesystem::remove_all(tmpl);
}

}  // namespace
}  // namespace osprey::config
