#include "worker/worker_metrics.h"

namespace osprey::worker {
namespace {

constexpr const char* kPhases[] = {"wait_input", "compute", "push", "nccl",
                                   "read",       "dedupe",  "cache", "pull"};

std::array<double, 8> Phases(const StepTimes& t) {
  return {t.wait_input, t.compute, t.push, t.nccl, t.read, t.dedupe, t.cache, t.pull};
}

}  // namespace

double DlrmFlopsPerSample(const models::DlrmConfig& c) {
  double macs = 0;
  int in = c.num_dense;
  for (int out : c.bottom_mlp) {
    macs += static_cast<double>(in) * out;
    in = out;
  }
  const double f = c.num_sparse;
  macs += (f + 1) * f / 2 * c.embedding_dim;  // the dot interaction
  in = static_cast<int>(c.embedding_dim + (f + 1) * f / 2);
  for (int out : c.top_mlp) {
    macs += static_cast<double>(in) * out;
    in = out;
  }
  return 2 * macs * 3;  // 2 FLOPs per multiply-add; forward + backward (twice the forward)
}

StepMetrics::StepMetrics(metrics::Registry* registry, double flops_per_sample, double peak_flops)
    : flops_per_sample_(flops_per_sample) {
  step_ = registry->AddHistogram("osprey_worker_step_duration_seconds", "Time of one training step.",
                                 {}, metrics::LatencyBuckets());
  for (size_t i = 0; i < phases_.size(); ++i) {
    phases_[i] = registry->AddCounter("osprey_worker_step_phase_seconds_total",
                                      "Step time by phase (wait_input, compute, push, nccl: the "
                                      "critical path; read, dedupe, cache, pull: the input side).",
                                      {{"phase", kPhases[i]}});
  }
  const std::vector<double> steps = {0, 1, 2, 4, 8, 16, 32, 64};
  const char* help = "Steps by which a pull's parameters lag the step it was for: max(0, clock - newest "
                     "table version seen in replies).";
  stale_sparse_ = registry->AddHistogram("osprey_worker_pull_staleness", help, {{"table", "sparse"}}, steps);
  stale_dense_ = registry->AddHistogram("osprey_worker_pull_staleness", help, {{"table", "dense"}}, steps);
  if (flops_per_sample > 0) {
    flops_ = registry->AddCounter("osprey_worker_model_flops_total",
                                  "Model FLOPs trained (samples x the DLRM's forward+backward FLOPs per sample).");
  }
  if (peak_flops > 0) {
    registry->AddValue(metrics::Kind::kGauge, "osprey_worker_peak_flops_per_second",
                       "The device's peak FLOP/s (metrics.peak_flops_per_sec), for MFU.",
                       [peak_flops] { return peak_flops; });
  }
}

void StepMetrics::AddPhase(Phase phase, double seconds) const {
  if (seconds > 0) phases_[phase].Inc(seconds);
}

void StepMetrics::OnPull(int64_t clock, uint64_t sparse_version, uint64_t dense_version) const {
  auto lag = [clock](uint64_t v) {
    return clock > 0 && static_cast<uint64_t>(clock) > v ? static_cast<double>(static_cast<uint64_t>(clock) - v) : 0.0;
  };
  stale_sparse_.Observe(lag(sparse_version));
  stale_dense_.Observe(lag(dense_version));
}

CacheMetrics::CacheMetrics(metrics::Registry* registry) {
  lookups_ = registry->AddCounter("osprey_worker_cache_lookups_total", "Hot-row cache lookups (GPU workers).");
  hits_ = registry->AddCounter("osprey_worker_cache_hits_total", "Hot-row cache hits (fresh rows reused).");
  evictions_ = registry->AddCounter("osprey_worker_cache_evictions_total", "Rows evicted from the hot-row cache.");
}

void CacheMetrics::Update(uint64_t lookups, uint64_t hits, uint64_t evictions) {
  const uint64_t now[3] = {lookups, hits, evictions};
  const metrics::Counter* c[3] = {&lookups_, &hits_, &evictions_};
  for (int i = 0; i < 3; ++i) {
    if (now[i] > last_[i]) c[i]->Inc(static_cast<double>(now[i] - last_[i]));
    last_[i] = now[i];
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
