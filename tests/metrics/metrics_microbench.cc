// metrics_microbench: what the hot-path updates cost (README "Metrics and monitoring"):
// ns per Counter::Inc, Histogram::Observe, a null handle, the CPU trainer's per-step
// StepMetrics::OnStep and the server's per-request ServerMetrics::OnRequest; median of 5 runs of
// 2M calls each. Not a ctest test: run build/tests/metrics_microbench.
#include <chrono>
#include <cstdio>
#include <vector>

#include "common/metrics/metrics.h"
#include "common/stats.h"
#include "server/server_metrics.h"
#include "worker/worker_metrics.h"

namespace {

template <typename F>
double NsPerCall(F f) {
  constexpr int kCalls = 2000000;
  std::vector<double> runs;
  for (int r = 0; r < 5; ++r) {
    auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < kCalls; ++i) f(i);
    runs.push_back(std::chrono::duration<double, std::nano>(std::chrono::steady_clock::now() - t0).count() / kCalls);
  }
  return osprey::Median(runs);
}

}  // namespace

int main() {
  using namespace osprey;
  metrics::Registry reg;
  metrics::Counter c = reg.AddCounter("osprey_bench_total", "Bench.");
  metrics::Histogram h = reg.AddHistogram("osprey_bench_seconds", "Bench.", {}, metrics::LatencyBuckets());
  metrics::Counter null_counter;
  worker::StepMetrics step(&reg);
  server::ServerMetrics srv(&reg, {"embeddings", "mlp"});
  worker::StepTimes before, after;
  std::printf("null Counter::Inc         %6.1f ns\n", NsPerCall([&](int) { null_counter.Inc(); }));
  std::printf("Counter::Inc              %6.1f ns\n", NsPerCall([&](int) { c.Inc(); }));
  std::printf("Histogram::Observe        %6.1f ns\n", NsPerCall([&](int i) { h.Observe(i * 1e-7); }));
  std::printf("StepMetrics::OnStep       %6.1f ns (once per training step)\n", NsPerCall([&](int i) {
    after.compute += 1e-3;
    after.wait_input += 1e-3;
    step.OnStep(before, after, i * 1e-7);
    before = after;
  }));
  std::printf("ServerMetrics::OnRequest  %6.1f ns (once per request)\n",
              NsPerCall([&](int i) { srv.OnRequest(proto::OP_PUSH_SPARSE, 0, i * 1e-7); }));
  return 0;
}
