#include "tools/report.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>

namespace osprey::tools {
namespace {

// The shortest of %.15g / %.17g that reads back as the same double.
std::string JsonNumber(double v) {
  if (!std::isfinite(v)) return "null";
  char buf[40];
  std::snprintf(buf, sizeof(buf), "%.15g", v);
  if (std::strtod(buf, nullptr) != v) std::snprintf(buf, sizeof(buf), "%.17g", v);
  return buf;
}

std::string Fixed(double v, int digits) {
  if (!std::isfinite(v)) return "n/a";
  char buf[40];
  std::snprintf(buf, sizeof(buf), "%.*f", digits, v);
  return buf;
}

}  // namespace

JobReport SummarizeReports(const proto::ClusterState& state, double wall_seconds) {
  JobReport r;
  r.wall_seconds = wall_seconds;
  uint64_t samples = 0;
  double train_seconds = 0;
  for (const proto::WorkerReport& w : state.reports()) {
    ++r.num_reports;
    r.steps = std::max(r.steps, w.steps());
    samples += w.samples();
    train_seconds = std::max(train_seconds, w.train_seconds());
    r.bytes_pushed += w.bytes_pushed();
    r.bytes_pulled += w.bytes_pulled();
    r.dense_bytes_raw += w.dense_push_bytes_raw();
    r.dense_bytes_encoded += w.dense_push_bytes_encoded();
    r.encode_seconds += w.encode_seconds();
    r.compressed_messages += w.compressed_messages();
    r.time_wait_input += w.time_wait_input();
    r.time_compute += w.time_compute();
    r.time_push += w.time_push();
    r.time_nccl += w.time_nccl();
    r.prefetch_read += w.prefetch_read();
    r.prefetch_dedupe += w.prefetch_dedupe();
    r.prefetch_cache += w.prefetch_cache();
    r.prefetch_pull += w.prefetch_pull();
    r.cache_lookups += w.cache_lookups();
    r.cache_hits += w.cache_hits();
    r.cache_evictions += w.cache_evictions();
    r.rows_pulled += w.rows_pulled();
    if (w.rank() == 0) {
      r.device = w.device();
      r.auc = w.auc();
      r.oracle_auc = w.oracle_auc();
      r.logloss = w.logloss();
      r.eval_samples = w.eval_samples();
      if (w.compressed_messages() > 0) r.last_density = w.last_density();
    }
  }
  r.samples_per_sec = train_seconds > 0 ? static_cast<double>(samples) / train_seconds : 0;
  if (r.num_reports > 0) {
    for (double* t : {&r.time_wait_input, &r.time_compute, &r.time_push, &r.time_nccl, &r.prefetch_read,
                      &r.prefetch_dedupe, &r.prefetch_cache, &r.prefetch_pull}) {
      *t /= r.num_reports;
    }
  }
  if (r.cache_lookups > 0) r.cache_hit_rate = static_cast<double>(r.cache_hits) / r.cache_lookups;
  if (samples > 0) r.bytes_per_sample = static_cast<double>(r.bytes_pushed + r.bytes_pulled) / samples;
  return r;
}

std::string FormatBytes(uint64_t bytes) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double v = static_cast<double>(bytes);
  int u = 0;
  while (v >= 1024 && u < 4) {
    v /= 1024;
    ++u;
  }
  char buf[32];
  std::snprintf(buf, sizeof(buf), u == 0 ? "%.0f %s" : "%.2f %s", v, units[u]);
  return buf;
}

std::string FormatReport(const JobReport& r) {
  char buf[512];
  std::snprintf(buf, sizeof(buf),
                "osprey: job finished in %.1f s (%d worker reports)\n"
                "  held-out AUC      %s   (oracle %s, %llu samples)\n"
                "  held-out logloss  %s\n"
                "  steps             %llu\n"
                "  samples/s         %.0f\n"
                "  bytes pushed      %s\n"
                "  bytes pulled      %s\n",
                r.wall_seconds, r.num_reports, Fixed(r.auc, 4).c_str(),
                Fixed(r.oracle_auc, 4).c_str(), static_cast<unsigned long long>(r.eval_samples),
                Fixed(r.logloss, 4).c_str(), static_cast<unsigned long long>(r.steps),
                r.samples_per_sec, FormatBytes(r.bytes_pushed).c_str(),
                FormatBytes(r.bytes_pulled).c_str());
  std::string out = buf;
  const double step_total = r.time_wait_input + r.time_compute + r.time_push + r.time_nccl;
  if (step_total > 0) {
    auto pct = [&](double v) { return Fixed(100 * v / step_total, 0) + "%"; };
    std::snprintf(buf, sizeof(buf),
                  "  step time         wait-input %s, compute %s, push %s, nccl %s  (%s, per worker %.1f s)\n"
                  "  prefetch side     read %.2f s, dedupe %.2f s, cache %.2f s, pull %.2f s\n",
                  pct(r.time_wait_input).c_str(), pct(r.time_compute).c_str(), pct(r.time_push).c_str(),
                  pct(r.time_nccl).c_str(), r.device.empty() ? "?" : r.device.c_str(), step_total,
                  r.prefetch_read, r.prefetch_dedupe, r.prefetch_cache, r.prefetch_pull);
    out += buf;
  }
  if (std::isfinite(r.bytes_per_sample)) {
    std::snprintf(buf, sizeof(buf), "  bytes/sample      %.0f\n", r.bytes_per_sample);
    out += buf;
  }
  if (r.cache_lookups > 0) {
    std::snprintf(buf, sizeof(buf), "  row cache         hit rate %s, %llu evictions, %llu rows pulled\n",
                  (Fixed(100 * r.cache_hit_rate, 1) + "%").c_str(),
                  static_cast<unsigned long long>(r.cache_evictions), static_cast<unsigned long long>(r.rows_pulled));
    out += buf;
  }
  if (r.compressed_messages > 0) {
    std::snprintf(buf, sizeof(buf),
                  "  compression       dense pushes %s -> %s (%.1fx), encode %.1f ms in %llu "
                  "messages%s%s\n",
                  FormatBytes(r.dense_bytes_raw).c_str(), FormatBytes(r.dense_bytes_encoded).c_str(),
                  r.dense_bytes_encoded > 0 ? static_cast<double>(r.dense_bytes_raw) / r.dense_bytes_encoded : 0.0,
                  r.encode_seconds * 1e3, static_cast<unsigned long long>(r.compressed_messages),
                  r.last_density < 1 ? ", last density " : "",
                  r.last_density < 1 ? Fixed(r.last_density, 4).c_str() : "");
    out += buf;
  }
  return out;
}

std::string ReportJson(const JobReport& r) {
  return "{\"auc\": " + JsonNumber(r.auc) + ", \"oracle_auc\": " + JsonNumber(r.oracle_auc) +
         ", \"logloss\": " + JsonNumber(r.logloss) +
         ", \"samples_per_sec\": " + JsonNumber(r.samples_per_sec) +
         ", \"steps\": " + std::to_string(r.steps) +
         ", \"bytes_pushed\": " + std::to_string(r.bytes_pushed) +
         ", \"bytes_pulled\": " + std::to_string(r.bytes_pulled) +
         ", \"wall_seconds\": " + JsonNumber(r.wall_seconds) +
         ", \"time_wait_input\": " + JsonNumber(r.time_wait_input) +
         ", \"time_compute\": " + JsonNumber(r.time_compute) + ", \"time_push\": " + JsonNumber(r.time_push) +
         ", \"time_nccl\": " + JsonNumber(r.time_nccl) + ", \"prefetch_read\": " + JsonNumber(r.prefetch_read) +
         ", \"prefetch_dedupe\": " + JsonNumber(r.prefetch_dedupe) +
         ", \"prefetch_cache\": " + JsonNumber(r.prefetch_cache) +
         ", \"prefetch_pull\": " + JsonNumber(r.prefetch_pull) +
         ", \"cache_lookups\": " + std::to_string(r.cache_lookups) +
         ", \"cache_hits\": " + std::to_string(r.cache_hits) +
         ", \"cache_evictions\": " + std::to_string(r.cache_evictions) +
         ", \"rows_pulled\": " + std::to_string(r.rows_pulled) +
         ", \"cache_hit_rate\": " + JsonNumber(r.cache_hit_rate) +
         ", \"bytes_per_sample\": " + JsonNumber(r.bytes_per_sample) + ", \"device\": \"" + r.device + "\"}\n";
}

}  // namespace osprey::tools
