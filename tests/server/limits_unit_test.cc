// HoldBudget and LogLimiter on their own: the accounting and the clock-driven rate limit.
#include <gtest/gtest.h>

#include "server/hold_budget.h"
#include "server/log_limiter.h"

namespace osprey::server {
namespace {

config::LimitsConfig Limits(int per_peer, uint64_t bytes) {
  config::LimitsConfig l;
  l.max_inflight_per_peer = per_peer;
  l.max_held_bytes = bytes;
  return l;
}

TEST(HoldBudgetTest, RefusesBeyondPerPeerCountNamingTheLimit) {
  HoldBudget b(Limits(2, 1 << 20));
  EXPECT_TRUE(b.Admit(7, 10).ok());
  EXPECT_TRUE(b.Admit(7, 10).ok());
  Status s = b.Admit(7, 10);
  EXPECT_EQ(s.code(), StatusCode::kResourceExhausted);
  EXPECT_NE(s.message().find("limits.max_inflight_per_peer is 2"), std::string::npos) << s.message();
  EXPECT_TRUE(b.Admit(8, 10).ok()) << "another peer has its own count";
  EXPECT_EQ(b.held_by(7), 2u);
  EXPECT_EQ(b.held_requests(), 3u);
  EXPECT_EQ(b.refused(), 1u);
  b.Release(7, 10);
  EXPECT_TRUE(b.Admit(7, 10).ok()) << "a released slot is free again";
}

TEST(HoldBudgetTest, RefusesBeyondTotalBytesAndReleasesExactly) {
  HoldBudget b(Limits(100, 1000));
  EXPECT_TRUE(b.Admit(1, 600).ok());
  Status s = b.Admit(2, 500);
  EXPECT_EQ(s.code(), StatusCode::kResourceExhausted);
  EXPECT_NE(s.message().find("limits.max_held_bytes is 1000"), std::string::npos) << s.message();
  EXPECT_TRUE(b.Check(2, 400).ok());
  EXPECT_EQ(b.held_requests(), 1u) << "Check reserves nothing";
  EXPECT_TRUE(b.Admit(2, 400).ok());
  EXPECT_EQ(b.held_bytes(), 1000u);
  b.Release(1, 600);
  b.Release(2, 400);
  EXPECT_EQ(b.held_bytes(), 0u);
  EXPECT_EQ(b.held_requests(), 0u);
  b.Release(3, 50);  // never admitted: ignored, no underflow
  EXPECT_EQ(b.held_bytes(), 0u);
}

TEST(LogLimiterTest, OneLinePerPeerAndKindPerIntervalWithSuppressedCount) {
  LogLimiter l(1000000);
  uint64_t sup = 99;
  EXPECT_TRUE(l.Admit(1, 0, 0, &sup));
  EXPECT_EQ(sup, 0u);
  for (int i = 1; i <= 5; ++i) EXPECT_FALSE(l.Admit(1, 0, i * 1000, &sup));
  EXPECT_TRUE(l.Admit(1, 1, 6000, &sup)) << "another kind of the same peer";
  EXPECT_TRUE(l.Admit(2, 0, 6000, &sup)) << "another peer";
  EXPECT_FALSE(l.Admit(1, 0, 999999, &sup));
  EXPECT_TRUE(l.Admit(1, 0, 1000000, &sup));
  EXPECT_EQ(sup, 6u) << "the line says how many were not written";
  EXPECT_FALSE(l.Admit(1, 0, 1000001, &sup));
  EXPECT_TRUE(l.Admit(1, 0, 5000000, &sup));
  EXPECT_EQ(sup, 1u);
}

TEST(LogLimiterTest, KeysAreBoundedAndIdleOnesForgotten) {
  LogLimiter l(1000, /*max_keys=*/3);
  uint64_t sup = 0;
  for (int p = 0; p < 3; ++p) EXPECT_TRUE(l.Admit(p, 0, 0, &sup));
  EXPECT_FALSE(l.Admit(3, 0, 10, &sup)) << "every key is recent: a new one is suppressed";
  EXPECT_EQ(l.overflow_suppressed(), 1u);
  EXPECT_EQ(l.num_keys(), 3u);
  EXPECT_TRUE(l.Admit(4, 0, 5000, &sup)) << "idle keys are pruned to make room";
  EXPECT_LE(l.num_keys(), 3u);
}

TEST(LogLimiterTest, TenThousandCallsInOneSecondWriteOneLine) {
  LogLimiter l;
  uint64_t sup = 0;
  int lines = 0;
  for (int i = 0; i < 10000; ++i) lines += l.Admit(5, 2, i * 100, &sup) ? 1 : 0;  // 0..1 s
  EXPECT_EQ(lines, 1);
  EXPECT_TRUE(l.Admit(5, 2, 1000000, &sup));
  EXPECT_EQ(sup, 9999u);
}

}  // namespace
}  // namespace osprey::server
