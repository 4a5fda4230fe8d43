#include "tools/report.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

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

void AddServerReports(const proto::ClusterState& state, JobReport* r) {
  for (const proto::ServerReport& sr : state.server_reports()) {
    const proto::ServerStats& st = sr.stats();
    ++r->num_server_reports;
    r->windows_applied += st.windows_applied();
    r->pushes_applied += st.pushes_applied();
    r->pushes_dropped += st.pushes_dropped();
    r->rows_dropped += st.rows_dropped();
    r->rows_skipped += st.rows_skipped();
    r->pulls_held += st.pulls_held();
    r->refused += st.refused();
    r->auth_refused += st.auth_refused();
    r->limit_refusals += st.limit_refusals();
    r->bad_headers += st.bad_headers();
    r->decoded_pushes += sr.decoded_pushes();
    r->server_replacements += sr.replacement() ? 1 : 0;
    r->server_steps_lost += sr.steps_lost();
    r->pushes_deduplicated += sr.pushes_deduplicated();
    r->decode_bytes_encoded += sr.decode_bytes_encoded();
    r->decode_bytes_decoded += sr.decode_bytes_decoded();
    r->decode_seconds += sr.decode_seconds();
    r->rows_admitted += st.rows_admitted();
    r->gradients_not_admitted += st.gradients_not_admitted();
    r->rows_evicted_ttl += st.rows_evicted_ttl();
    r->rows_evicted_cap += st.rows_evicted_cap();
    r->redis_unflushed_rows += st.redis_unflushed_rows();
    const int buckets = st.staleness_histogram_size();
    if (static_cast<int>(r->staleness.size()) < buckets) r->staleness.resize(buckets, 0);
    for (int i = 0; i < buckets; ++i) r->staleness[i] += st.staleness_histogram(i);
  }
}

// "0: 120 (96.0%), [1,2): 4 (3.2%), >=4: 1 (0.8%)": the non-empty buckets.
std::string StalenessLine(const std::vector<uint64_t>& hist) {
  uint64_t total = 0;
  for (uint64_t c : hist) total += c;
  std::string out;
  for (size_t i = 0; i < hist.size(); ++i) {
    if (hist[i] == 0) continue;
    std::string label = "0";
    if (i > 0) {
      const std::string lo = std::to_string(uint64_t{1} << (i - 1));
      label = i + 1 == hist.size() ? ">=" + lo : "[" + lo + "," + std::to_string(uint64_t{1} << i) + ")";
    }
    out += (out.empty() ? "" : ", ") + label + ": " + std::to_string(hist[i]) + " (" +
           Fixed(100.0 * static_cast<double>(hist[i]) / static_cast<double>(total), 1) + "%)";
  }
  return out;
}

// ", density by step {0: 0.25, 16: 0.132, ...}" when the density changed over the run.
std::string TrajectoryText(const std::vector<std::pair<uint64_t, double>>& points) {
  bool varies = false;
  for (const auto& p : points) varies = varies || p.second != points.front().second;
  if (!varies) return "";
  std::string out;
  char buf[64];
  for (const auto& [step, density] : points) {
    std::snprintf(buf, sizeof(buf), "%s%llu: %.4g", out.empty() ? "" : ", ",
                  static_cast<unsigned long long>(step), density);
    out += buf;
  }
  return ", density by step {" + out + "}";
}

// Worker 0's compression diagnostics: the cosine, the starved share, the layer with the lowest
// norm ratio, and the warning when there is one.
std::string CompressionDiagnosticsText(const JobReport& r) {
  const proto::LayerCompressionDiagnostics* worst = nullptr;
  double worst_ratio = 0;
  for (const proto::LayerCompressionDiagnostics& l : r.compression_layers) {
    const double ratio = l.raw_norm() > 0 ? l.sent_norm() / l.raw_norm() : 1.0;
    if (worst == nullptr || ratio < worst_ratio) worst = &l, worst_ratio = ratio;
  }
  char buf[320];
  std::snprintf(buf, sizeof(buf),
                "  compression diag  cosine %.3f (healthy > 0.85), %.1f%% layer-steps without update, "
                "lowest norm ratio %.3f (%s, of %zu layers)\n",
                r.compression_cosine, 100 * r.compression_no_update_share, worst_ratio, worst->name().c_str(),
                r.compression_layers.size());
  std::string out = buf;
  if (!r.compression_warning.empty()) out += "  WARNING           " + r.compression_warning + "\n";
  return out;
}

std::string ServersText(const JobReport& r) {
  char buf[512];
  std::snprintf(buf, sizeof(buf),
                "  servers           %d reported: %llu optimizer steps, %llu pushes applied, %llu dropped, "
                "%llu pulls held",
                r.num_server_reports, static_cast<unsigned long long>(r.windows_applied),
                static_cast<unsigned long long>(r.pushes_applied),
                static_cast<unsigned long long>(r.pushes_dropped),
                static_cast<unsigned long long>(r.pulls_held));
  std::string out = buf;
  if (r.refused + r.auth_refused > 0) {
    std::snprintf(buf, sizeof(buf), ", %llu requests refused, %llu connections refused",
                  static_cast<unsigned long long>(r.refused),
                  static_cast<unsigned long long>(r.auth_refused));
    out += buf;
  }
  if (r.limit_refusals + r.bad_headers > 0) {
    std::snprintf(buf, sizeof(buf), ", %llu over a limit, %llu malformed",
                  static_cast<unsigned long long>(r.limit_refusals),
                  static_cast<unsigned long long>(r.bad_headers));
    out += buf;
  }
  if (r.rows_dropped + r.rows_skipped > 0) {
    std::snprintf(buf, sizeof(buf), ", %llu rows dropped, %llu rows skipped",
                  static_cast<unsigned long long>(r.rows_dropped),
                  static_cast<unsigned long long>(r.rows_skipped));
    out += buf;
  }
  if (r.decoded_pushes > 0) {
    std::snprintf(buf, sizeof(buf), "; decoded %llu compressed pushes (%s -> %s) in %.1f ms",
                  static_cast<unsigned long long>(r.decoded_pushes),
                  FormatBytes(r.decode_bytes_encoded).c_str(),
                  FormatBytes(r.decode_bytes_decoded).c_str(), r.decode_seconds * 1e3);
    out += buf;
  }
  out += "\n";
  if (r.rows_admitted + r.gradients_not_admitted + r.rows_evicted_ttl + r.rows_evicted_cap > 0) {
    std::snprintf(buf, sizeof(buf),
                  "  admission         %llu rows admitted, %llu gradients dropped (not admitted); "
                  "eviction: %llu by ttl, %llu by max_rows\n",
                  static_cast<unsigned long long>(r.rows_admitted),
                  static_cast<unsigned long long>(r.gradients_not_admitted),
                  static_cast<unsigned long long>(r.rows_evicted_ttl),
                  static_cast<unsigned long long>(r.rows_evicted_cap));
    out += buf;
  }
  if (r.redis_unflushed_rows > 0) {
    std::snprintf(buf, sizeof(buf),
                  "  redis store       %llu rows not yet flushed to Redis at the servers' final "
                  "reports (write_back; the servers' stop flushes them)\n",
                  static_cast<unsigned long long>(r.redis_unflushed_rows));
    out += buf;
  }
  const std::string hist = StalenessLine(r.staleness);
  if (!hist.empty()) out += "  staleness         " + hist + "\n";
  return out;
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
    r.pushes_acked += w.pushes_acked();
    r.requests_resent += w.requests_resent();
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
    r.device_plan += w.device_plan();
    r.device_pull += w.device_pull();
    r.device_gather += w.device_gather();
    r.device_compute += w.device_compute();
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
      for (const proto::DensityPoint& p : w.density_trajectory()) {
        r.density_trajectory.emplace_back(p.step(), p.density());
      }
      if (w.compression_layers_size() > 0) {
        r.compression_cosine = w.compression_cosine();
        r.compression_no_update_share = w.compression_no_update_share();
        r.compression_warning = w.compression_warning();
        r.compression_layers.assign(w.compression_layers().begin(), w.compression_layers().end());
      }
    }
  }
  r.samples_per_sec = train_seconds > 0 ? static_cast<double>(samples) / train_seconds : 0;
  if (r.num_reports > 0) {
    for (double* t : {&r.time_wait_input, &r.time_compute, &r.time_push, &r.time_nccl, &r.prefetch_read,
                      &r.prefetch_dedupe, &r.prefetch_cache, &r.prefetch_pull, &r.device_plan, &r.device_pull,
                      &r.device_gather, &r.device_compute}) {
      *t /= r.num_reports;
    }
  }
  if (r.cache_lookups > 0) r.cache_hit_rate = static_cast<double>(r.cache_hits) / r.cache_lookups;
  if (samples > 0) r.bytes_per_sample = static_cast<double>(r.bytes_pushed + r.bytes_pulled) / samples;
  AddServerReports(state, &r);
  r.adaptive = AdaptiveWorkers(state);
  r.coordinator_refused = state.coordinator_refused();
  r.coordinator_bad_requests = state.coordinator_bad_requests();
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
  if (r.device_plan + r.device_pull + r.device_gather + r.device_compute > 0) {
    std::snprintf(buf, sizeof(buf),
                  "  device stages     plan %.2f s, pull %.2f s, gather %.2f s, forward+backward %.2f s\n",
                  r.device_plan, r.device_pull, r.device_gather, r.device_compute);
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
                  "messages%s%s",
                  FormatBytes(r.dense_bytes_raw).c_str(), FormatBytes(r.dense_bytes_encoded).c_str(),
                  r.dense_bytes_encoded > 0 ? static_cast<double>(r.dense_bytes_raw) / r.dense_bytes_encoded : 0.0,
                  r.encode_seconds * 1e3, static_cast<unsigned long long>(r.compressed_messages),
                  r.last_density < 1 ? ", last density " : "",
                  r.last_density < 1 ? Fixed(r.last_density, 4).c_str() : "");
    out += buf + TrajectoryText(r.density_trajectory) + "\n";
  }
  if (!r.compression_layers.empty()) out += CompressionDiagnosticsText(r);
  out += AdaptiveText(r);
  if (r.num_server_reports > 0) out += ServersText(r);
  if (r.coordinator_refused + r.coordinator_bad_requests > 0) {
    std::snprintf(buf, sizeof(buf),
                  "  coordinator       %llu requests refused for their sender's role, %llu bad "
                  "messages\n",
                  static_cast<unsigned long long>(r.coordinator_refused),
                  static_cast<unsigned long long>(r.coordinator_bad_requests));
    out += buf;
  }
  return out;
}

namespace {

// ", \"compression_cosine\": ..., \"compression_layers\": [...]" (see ReportJson).
std::string CompressionJson(const JobReport& r) {
  std::string layers;
  for (const proto::LayerCompressionDiagnostics& l : r.compression_layers) {
    layers += std::string(layers.empty() ? "" : ", ") + "{\"name\": \"" + l.name() +
              "\", \"raw_norm\": " + JsonNumber(l.raw_norm()) + ", \"sent_norm\": " + JsonNumber(l.sent_norm()) +
              ", \"cosine\": " + JsonNumber(l.cosine()) + ", \"no_update_share\": " + JsonNumber(l.no_update_share()) +
              "}";
  }
  return ", \"dense_push_bytes_raw\": " + std::to_string(r.dense_bytes_raw) +
         ", \"dense_push_bytes_encoded\": " + std::to_string(r.dense_bytes_encoded) +
         ", \"compression_cosine\": " + JsonNumber(r.compression_cosine) +
         ", \"compression_no_update_share\": " + JsonNumber(r.compression_no_update_share) +
         ", \"compression_warning\": \"" + r.compression_warning + "\", \"compression_layers\": [" + layers + "]";
}

// The server keys and density_trajectory of ReportJson, each preceded by ", ".
std::string ServersJson(const JobReport& r) {
  std::string hist, trajectory;
  for (uint64_t c : r.staleness) hist += (hist.empty() ? "" : ", ") + std::to_string(c);
  for (const auto& [step, density] : r.density_trajectory) {
    trajectory += std::string(trajectory.empty() ? "" : ", ") + "{\"step\": " + std::to_string(step) +
                  ", \"density\": " + JsonNumber(density) + "}";
  }
  // Admission / eviction first: the keys after server_reports keep their order.
  return ", \"server_replacements\": " + std::to_string(r.server_replacements) +
         ", \"server_steps_lost\": " + std::to_string(r.server_steps_lost) +
         ", \"server_pushes_deduplicated\": " + std::to_string(r.pushes_deduplicated) +
         ", \"worker_pushes_acked\": " + std::to_string(r.pushes_acked) +
         ", \"worker_requests_resent\": " + std::to_string(r.requests_resent) +
         ", \"server_rows_admitted\": " + std::to_string(r.rows_admitted) +
         ", \"server_gradients_not_admitted\": " + std::to_string(r.gradients_not_admitted) +
         ", \"server_rows_evicted_ttl\": " + std::to_string(r.rows_evicted_ttl) +
         ", \"server_rows_evicted_cap\": " + std::to_string(r.rows_evicted_cap) +
         ", \"server_redis_unflushed_rows\": " + std::to_string(r.redis_unflushed_rows) +
         ", \"server_reports\": " + std::to_string(r.num_server_reports) +
         ", \"server_windows_applied\": " + std::to_string(r.windows_applied) +
         ", \"server_pushes_applied\": " + std::to_string(r.pushes_applied) +
         ", \"server_pushes_dropped\": " + std::to_string(r.pushes_dropped) +
         ", \"server_rows_dropped\": " + std::to_string(r.rows_dropped) +
         ", \"server_rows_skipped\": " + std::to_string(r.rows_skipped) +
         ", \"server_pulls_held\": " + std::to_string(r.pulls_held) +
         ", \"server_decoded_pushes\": " + std::to_string(r.decoded_pushes) +
         ", \"server_decode_bytes_encoded\": " + std::to_string(r.decode_bytes_encoded) +
         ", \"server_decode_bytes_decoded\": " + std::to_string(r.decode_bytes_decoded) +
         ", \"server_decode_seconds\": " + JsonNumber(r.decode_seconds) +
         ", \"server_refused\": " + std::to_string(r.refused) +
         ", \"server_auth_refused\": " + std::to_string(r.auth_refused) +
         ", \"server_limit_refusals\": " + std::to_string(r.limit_refusals) +
         ", \"server_bad_headers\": " + std::to_string(r.bad_headers) +
         ", \"coordinator_refused\": " + std::to_string(r.coordinator_refused) +
         ", \"coordinator_bad_requests\": " + std::to_string(r.coordinator_bad_requests) +
         ", \"staleness_histogram\": [" + hist + "]" +
         ", \"density_trajectory\": [" + trajectory + "]" + AdaptiveJson(r);
}

// ", \"curve\": [...]" (see ReportJson).
std::string CurveJson(const std::vector<CurvePoint>& curve) {
  std::string out = ", \"curve\": [";
  for (size_t i = 0; i < curve.size(); ++i) {
    const CurvePoint& p = curve[i];
    out += (i == 0 ? "" : ", ") + std::string("{\"seconds\": ") + JsonNumber(p.seconds) +
           ", \"step\": " + std::to_string(p.step) + ", \"loss\": " + JsonNumber(p.loss) +
           ", \"samples_per_sec\": " + JsonNumber(p.samples_per_sec) + "}";
  }
  return out + "]";
}

}  // namespace

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
         ", \"device_plan\": " + JsonNumber(r.device_plan) + ", \"device_pull\": " + JsonNumber(r.device_pull) +
         ", \"device_gather\": " + JsonNumber(r.device_gather) +
         ", \"device_compute\": " + JsonNumber(r.device_compute) +
         ", \"cache_lookups\": " + std::to_string(r.cache_lookups) +
         ", \"cache_hits\": " + std::to_string(r.cache_hits) +
         ", \"cache_evictions\": " + std::to_string(r.cache_evictions) +
         ", \"rows_pulled\": " + std::to_string(r.rows_pulled) +
         ", \"cache_hit_rate\": " + JsonNumber(r.cache_hit_rate) +
         ", \"bytes_per_sample\": " + JsonNumber(r.bytes_per_sample) + CompressionJson(r) + ServersJson(r) +
         ", \"device\": \"" + r.device + "\"" + CurveJson(r.curve) + "}\n";
}

}  // namespace osprey::tools
