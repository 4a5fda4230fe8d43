#include "worker/worker_metrics.h"

namespace osprey::worker {
namespace {

constexpr const char* kPhases[] = {"wait_input", "compute", "push", "nccl",
                                   "read",       "dedupe",  "cache", "pull"};

std::array<double, 8> Phases(const StepTimes& t) {
  return {t.wait_input, t.compute, t.push, t.nccl, t.read, t.dedupe, t.cache, t.pull};
}

}  // namespace

StepMetrics::StepMetrics(metrics::Registry* registry) {
  step_ = registry->AddHistogram("osprey_worker_step_duration_seconds", "Time of one training step.",
                                 {}, metrics::LatencyBuckets());
  for (size_t i = 0; i < phases_.size(); ++i) {
    phases_[i] = registry->AddCounter("osprey_worker_step_phase_seconds_total",
                                      "Step time by phase (wait_input, compute, push, nccl: the "
                                      "critical path; read, dedupe, cache, pull: the input side).",
                                      {{"phase", kPhases[i]}});
  }
}

void StepMetrics::OnStep(const StepTimes& before, const StepTimes& after, double seconds) const {
  step_.Observe(seconds);
  const std::array<double, 8> b = Phases(before), a = Phases(after);
  for (size_t i = 0; i < phases_.size(); ++i) {
    if (a[i] > b[i]) phases_[i].Inc(a[i] - b[i]);
  }
}

void ExportWorkerMetrics(const TrainLoop* loop, const Client* client,
                         std::vector<std::pair<std::string, uint32_t>> tables,
                         metrics::Registry* registry) {
  using metrics::Kind;
  registry->AddValue(Kind::kCounter, "osprey_worker_samples_total", "Samples trained.",
                     [loop] { return static_cast<double>(loop->progress().samples); });
  registry->AddValue(Kind::kGauge, "osprey_worker_clock", "Steps done (the worker's clock).",
                     [loop] { return static_cast<double>(loop->progress().step); });
  registry->AddValue(Kind::kGauge, "osprey_worker_loss", "Moving average of the batch loss.",
                     [loop] { return loop->progress().loss; });
  registry->AddValue(Kind::kCounter, "osprey_worker_requests_total", "Requests sent to servers.",
                     [client] { return static_cast<double>(client->stats().requests); });
  registry->AddValue(Kind::kCounter, "osprey_worker_request_errors_total",
                     "Requests that failed or had a bad reply.",
                     [client] { return static_cast<double>(client->stats().errors); });
  auto per_table = [client, tables](bool pushed) {
    ClientStats st = client->stats();
    const std::vector<uint64_t>& v = pushed ? st.bytes_pushed_by_table : st.bytes_pulled_by_table;
    std::vector<metrics::Sample> out;
    for (const auto& [name, id] : tables) {
      metrics::Sample s;
      s.labels = {{"table", name}};
      s.value = id < v.size() ? static_cast<double>(v[id]) : 0;
      out.push_back(s);
    }
    return out;
  };
  registry->AddCallback(Kind::kCounter, "osprey_worker_bytes_pushed_total",
                        "Bytes of push and init requests, by table.", [per_table] { return per_table(true); });
  registry->AddCallback(Kind::kCounter, "osprey_worker_bytes_pulled_total",
                        "Bytes of pull replies' values, by table.", [per_table] { return per_table(false); });
}

}  // namespace osprey::worker
