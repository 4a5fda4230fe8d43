// The adaptive per-node ratio's part of the launcher's report (issue 18): what density each
// worker ran, how far it moved, and the step times it compared.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>

#include "tools/report.h"

namespace osprey::tools {
namespace {

std::string Number(double v) {
  if (!std::isfinite(v)) return "null";
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.6g", v);
  return buf;
}

}  // namespace

std::vector<JobReport::AdaptiveWorker> AdaptiveWorkers(const proto::ClusterState& state) {
  std::vector<JobReport::AdaptiveWorker> out;
  for (const proto::WorkerReport& w : state.reports()) {
    if (!w.adaptive_ratio()) continue;
    JobReport::AdaptiveWorker a;
    a.rank = w.rank();
    a.final_density = w.adaptive_final_density();
    a.min_density = w.adaptive_min_density();
    a.max_density = w.adaptive_max_density();
    a.changes = w.adaptive_changes();
    a.cheap_select = w.adaptive_cheap_select();
    a.step_seconds = w.adaptive_step_seconds();
    a.median_step_seconds = w.adaptive_median_step_seconds();
    a.samples_per_sec = w.train_seconds() > 0 ? static_cast<double>(w.samples()) / w.train_seconds() : 0;
    a.barrier_exits = w.adaptive_barrier_exits();
    a.steps_outside_barrier = w.adaptive_steps_outside_barrier();
    a.clocks_skipped = w.adaptive_clocks_skipped();
    out.push_back(a);
  }
  std::sort(out.begin(), out.end(), [](const auto& x, const auto& y) { return x.rank < y.rank; });
  return out;
}

std::string AdaptiveText(const JobReport& r) {
  std::string out;
  for (const JobReport::AdaptiveWorker& a : r.adaptive) {
    char buf[256];
    std::snprintf(buf, sizeof(buf),
                  "  adaptive ratio    worker %d: density %.4g (range %.4g-%.4g, %llu changes%s), step %.1f ms "
                  "vs median %.1f ms, %.0f samples/s",
                  a.rank, a.final_density, a.min_density, a.max_density, static_cast<unsigned long long>(a.changes),
                  a.cheap_select ? ", sampled selection" : "", 1e3 * a.step_seconds, 1e3 * a.median_step_seconds,
                  a.samples_per_sec);
    out += buf;
    if (a.barrier_exits > 0) {
      std::snprintf(buf, sizeof(buf), ", left the barrier %llux: %llu steps outside it, %llu clocks skipped",
                    static_cast<unsigned long long>(a.barrier_exits),
                    static_cast<unsigned long long>(a.steps_outside_barrier),
                    static_cast<unsigned long long>(a.clocks_skipped));
      out += buf;
    }
    out += "\n";
  }
  return out;
}

std::string AdaptiveJson(const JobReport& r) {
  std::string items;
  for (const JobReport::AdaptiveWorker& a : r.adaptive) {
    items += std::string(items.empty() ? "" : ", ") + "{\"rank\": " + std::to_string(a.rank) +
             ", \"final_density\": " + Number(a.final_density) + ", \"min_density\": " + Number(a.min_density) +
             ", \"max_density\": " + Number(a.max_density) + ", \"changes\": " + std::to_string(a.changes) +
             ", \"cheap_select\": " + (a.cheap_select ? "true" : "false") +
             ", \"step_seconds\": " + Number(a.step_seconds) +
             ", \"median_step_seconds\": " + Number(a.median_step_seconds) +
             ", \"samples_per_sec\": " + Number(a.samples_per_sec) +
             ", \"barrier_exits\": " + std::to_string(a.barrier_exits) +
             ", \"steps_outside_barrier\": " + std::to_string(a.steps_outside_barrier) +
             ", \"clocks_skipped\": " + std::to_string(a.clocks_skipped) + "}";
  }
  return ", \"adaptive_ratio\": [" + items + "]";
}

}  // namespace osprey::tools
