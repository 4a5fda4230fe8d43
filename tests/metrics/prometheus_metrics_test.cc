// common/metrics: the registry's text exposition and the HTTP exposer, over a real socket.
#include "common/metrics/metrics.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <atomic>
#include <string>

namespace osprey::metrics {
namespace {

// GET /metrics from 127.0.0.1:port with a plain socket; the whole response ("" on failure).
std::string HttpGet(int port) {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return "";
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = htons(static_cast<uint16_t>(port));
  std::string out;
  if (::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) == 0) {
    const std::string req = "GET /metrics HTTP/1.0\r\nHost: localhost\r\n\r\n";
    if (::send(fd, req.data(), req.size(), 0) == static_cast<ssize_t>(req.size())) {
      char buf[4096];
      ssize_t n;
      while ((n = ::recv(fd, buf, sizeof(buf), 0)) > 0) out.append(buf, static_cast<size_t>(n));
    }
  }
  ::close(fd);
  return out;
}

TEST(MetricsTest, CountersGaugesAndHistogramsSerialize) {
  Registry reg;
  Counter a = reg.AddCounter("osprey_test_pushes_total", "Pushes.", {{"table", "emb"}});
  Counter b = reg.AddCounter("osprey_test_pushes_total", "Pushes.", {{"table", "mlp"}});
  a.Inc();
  a.Inc(2);
  b.Inc();
  EXPECT_EQ(a.Value(), 3);
  reg.AddGauge("osprey_test_rows", "Rows.").Set(7);
  reg.AddHistogram("osprey_test_seconds", "Time.", {}, {0.1, 1}).Observe(0.5);
  const std::string text = reg.Serialize();
  EXPECT_NE(text.find("# TYPE osprey_test_pushes_total counter"), std::string::npos) << text;
  EXPECT_NE(text.find("osprey_test_pushes_total{table=\"emb\"} 3"), std::string::npos) << text;
  EXPECT_NE(text.find("osprey_test_pushes_total{table=\"mlp\"} 1"), std::string::npos) << text;
  EXPECT_NE(text.find("osprey_test_rows 7"), std::string::npos) << text;
  EXPECT_NE(text.find("osprey_test_seconds_bucket{le=\"0.1\"} 0"), std::string::npos) << text;
  EXPECT_NE(text.find("osprey_test_seconds_bucket{le=\"1\"} 1"), std::string::npos) << text;
  EXPECT_NE(text.find("osprey_test_seconds_count 1"), std::string::npos) << text;
}

TEST(MetricsTest, NullHandlesDoNothing) {
  Counter c;
  c.Inc();
  Histogram h;
  h.Observe(1);
  Gauge g;
  g.Set(1);
  EXPECT_EQ(c.Value(), 0);
}

TEST(MetricsTest, CallbacksAreReadAtScrapeTimeAndHistogramsAccumulate) {
  Registry reg;
  std::atomic<int> calls{0};
  reg.AddValue(Kind::kCounter, "osprey_test_samples_total", "Samples.", [&] { return 10.0 * ++calls; });
  reg.AddCallback(Kind::kHistogram, "osprey_test_staleness", "Staleness.", [] {
    Sample s;
    s.bounds = {0, 1, 3};
    s.buckets = {5, 2, 1, 4};  // the last one: +Inf
    s.value = 20;
    return std::vector<Sample>{s};
  });
  reg.AddCallback(Kind::kGauge, "osprey_test_empty", "Left out.", [] { return std::vector<Sample>{}; });
  std::string first = reg.Serialize();
  std::string second = reg.Serialize();
  EXPECT_NE(first.find("osprey_test_samples_total 10"), std::string::npos) << first;
  EXPECT_NE(second.find("osprey_test_samples_total 20"), std::string::npos) << second;
  EXPECT_NE(first.find("osprey_test_staleness_bucket{le=\"1\"} 7"), std::string::npos) << first;
  EXPECT_NE(first.find("osprey_test_staleness_bucket{le=\"+Inf\"} 12"), std::string::npos) << first;
  EXPECT_NE(first.find("osprey_test_staleness_count 12"), std::string::npos) << first;
  EXPECT_EQ(first.find("osprey_test_empty"), std::string::npos) << first;
}

TEST(MetricsTest, ExposerServesOnAPickedPortAndReportsATakenOne) {
  Registry reg;
  reg.AddCounter("osprey_test_requests_total", "Requests.").Inc(5);
  auto exposer = Exposer::Start({"127.0.0.1", 0}, &reg);
  ASSERT_TRUE(exposer.ok()) << exposer.status().ToString();
  const int port = (*exposer)->port();
  ASSERT_GT(port, 0);
  EXPECT_EQ((*exposer)->url(), "http://127.0.0.1:" + std::to_string(port) + "/metrics");
  const std::string body = HttpGet(port);
  EXPECT_NE(body.find("200 OK"), std::string::npos) << body;
  EXPECT_NE(body.find("osprey_test_requests_total 5"), std::string::npos) << body;

  auto second = Exposer::Start({"127.0.0.1", port}, &reg);
  ASSERT_FALSE(second.ok());
  EXPECT_EQ(second.status().code(), StatusCode::kUnavailable);
  EXPECT_NE(second.status().message().find("127.0.0.1:" + std::to_string(port)), std::string::npos)
      << second.status().ToString();
  EXPECT_EQ(Exposer::Start({"127.0.0.1", 70000}, &reg).status().code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace osprey::metrics
