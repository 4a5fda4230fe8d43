// The derived metrics of #16's second round: the coordinator's per-worker rates and scaling
// efficiency (coordinator/scaling_efficiency.h, a pure tracker with the clock passed in), and the
// worker's pull staleness, model FLOPs and hot-row cache counters (worker/worker_metrics.h), read
// back from the registry's real text exposition.
#include <gtest/gtest.h>

#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "common/metrics/metrics.h"
#include "coordinator/scaling_efficiency.h"
#include "worker/worker_metrics.h"

namespace osprey {
namespace {

using coordinator::ThroughputTracker;
using std::chrono::seconds;

TEST(ThroughputTrackerTest, RatesAverageSinceFirstSamples) {
  ThroughputTracker t(0);
  const auto t0 = ThroughputTracker::Clock::time_point() + seconds(100);
  t.Observe(0, 0, t0);  // not training yet: no start
  EXPECT_TRUE(t.Rates().empty());
  EXPECT_FALSE(t.Efficiency().has_value());
  t.Observe(0, 1000, t0 + seconds(1));
  t.Observe(1, 500, t0 + seconds(1));
  EXPECT_TRUE(t.Rates().empty());  // one observation each: no time span yet
  t.Observe(0, 5000, t0 + seconds(3));  // 4000 samples in 2 s
  t.Observe(1, 2500, t0 + seconds(3));  // 2000 in 2 s
  const auto rates = t.Rates();
  ASSERT_EQ(rates.size(), 2u);
  EXPECT_DOUBLE_EQ(rates.at(0), 2000);
  EXPECT_DOUBLE_EQ(rates.at(1), 1000);
  // Relative to the fastest worker: mean 1500 / 2000.
  ASSERT_TRUE(t.Efficiency().has_value());
  EXPECT_DOUBLE_EQ(*t.Efficiency(), 0.75);
}

TEST(ThroughputTrackerTest, ConfiguredBaselineRestartAndForget) {
  ThroughputTracker t(4000);  // one worker alone did 4000 samples/s
  const auto t0 = ThroughputTracker::Clock::time_point() + seconds(10);
  t.Observe(0, 100, t0);
  t.Observe(0, 3100, t0 + seconds(1));  // 3000/s
  t.Observe(1, 100, t0);
  t.Observe(1, 2100, t0 + seconds(1));  // 2000/s
  EXPECT_DOUBLE_EQ(*t.Efficiency(), 2500.0 / 4000);
  t.Observe(1, 50, t0 + seconds(2));  // restarted: starts over, no rate until the next heartbeat
  EXPECT_EQ(t.Rates().count(1), 0u);
  EXPECT_DOUBLE_EQ(*t.Efficiency(), 3000.0 / 4000);
  t.Forget(0);
  EXPECT_FALSE(t.Efficiency().has_value());
}

// The value of the exposition line that contains every one of `parts` (-1 when none does).
double ValueOf(const std::string& text, const std::vector<std::string>& parts) {
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty() || line[0] == '#') continue;
    bool all = true;
    for (const std::string& p : parts) all = all && line.find(p) != std::string::npos;
    if (all) return std::stod(line.substr(line.rfind(' ') + 1));
  }
  return -1;
}

TEST(WorkerMetricsTest, DlrmFlopsPerSampleFromLayerSizes) {
  models::DlrmConfig c;  // 13 dense, bottom {64, 16}, 26 sparse of dim 16, top {64, 1}
  // MACs: 13*64 + 64*16 (bottom) + 351 pairs * 16 (dots) + 367*64 + 64*1 (top) = 31024.
  EXPECT_DOUBLE_EQ(worker::DlrmFlopsPerSample(c), 6.0 * 31024);
  c.top_mlp = {128, 1};
  EXPECT_DOUBLE_EQ(worker::DlrmFlopsPerSample(c), 6.0 * (1856 + 5616 + 367 * 128 + 128));
}

TEST(WorkerMetricsTest, StalenessFlopsAndPhasesFromManyThreads) {
  metrics::Registry reg;
  worker::StepMetrics m(&reg, /*flops_per_sample=*/100, /*peak_flops=*/1e12);
  m.OnPull(5, /*sparse_version=*/3, /*dense_version=*/7);  // lags 2 and 0 (a newer version is not negative)
  m.OnPull(0, 0, 0);
  // Like the GPU loop's threads: each adds its own phase and samples concurrently.
  std::vector<std::thread> threads;
  for (int i = 0; i < 4; ++i) {
    threads.emplace_back([&m] {
      for (int k = 0; k < 1000; ++k) {
        m.AddPhase(worker::StepMetrics::kCompute, 0.001);
        m.AddSamples(2);
      }
    });
  }
  for (std::thread& t : threads) t.join();
  m.ObserveStep(0.01);
  const std::string text = reg.Serialize();
  EXPECT_EQ(ValueOf(text, {"osprey_worker_pull_staleness_bucket", "table=\"sparse\"", "le=\"1\""}), 1);  // the 0
  EXPECT_EQ(ValueOf(text, {"osprey_worker_pull_staleness_bucket", "table=\"sparse\"", "le=\"2\""}), 2);
  EXPECT_EQ(ValueOf(text, {"osprey_worker_pull_staleness_bucket", "table=\"dense\"", "le=\"0\""}), 2);
  EXPECT_EQ(ValueOf(text, {"osprey_worker_pull_staleness_sum", "table=\"sparse\""}), 2);
  EXPECT_EQ(ValueOf(text, {"osprey_worker_model_flops_total"}), 100.0 * 2 * 4000);
  EXPECT_EQ(ValueOf(text, {"osprey_worker_peak_flops_per_second"}), 1e12);
  EXPECT_NEAR(ValueOf(text, {"osprey_worker_step_phase_seconds_total", "phase=\"compute\""}), 4.0, 1e-9);
  EXPECT_EQ(ValueOf(text, {"osprey_worker_step_duration_seconds_count"}), 1);
}

TEST(WorkerMetricsTest, NoFlopsFamiliesWithoutAModelOrPeak) {
  metrics::Registry reg;
  worker::StepMetrics m(&reg);
  m.AddSamples(10);
  const std::string text = reg.Serialize();
  EXPECT_EQ(text.find("osprey_worker_model_flops_total"), std::string::npos);
  EXPECT_EQ(text.find("osprey_worker_peak_flops_per_second"), std::string::npos);
}

TEST(WorkerMetricsTest, CacheCountersAddTheIncrease) {
  metrics::Registry reg;
  worker::CacheMetrics c(&reg);
  c.Update(100, 60, 0);
  c.Update(250, 180, 7);
  const std::string text = reg.Serialize();
  EXPECT_EQ(ValueOf(text, {"osprey_worker_cache_lookups_total"}), 250);
  EXPECT_EQ(ValueOf(text, {"osprey_worker_cache_hits_total"}), 180);
  EXPECT_EQ(ValueOf(text, {"osprey_worker_cache_evictions_total"}), 7);
}

}  // namespace
}  // namespace osprey
