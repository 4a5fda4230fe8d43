#include "server/server_metrics.h"

#include <cmath>

#include "server/server.h"

namespace osprey::server {
namespace {

constexpr const char* kOpNames[] = {"pull_sparse", "push_sparse", "pull_dense",
                                    "push_dense",  "init_dense",  "other"};

int OpIndex(proto::Op op) {
  switch (op) {
    case proto::OP_PULL_SPARSE: return 0;
    case proto::OP_PUSH_SPARSE: return 1;
    case proto::OP_PULL_DENSE: return 2;
    case proto::OP_PUSH_DENSE: return 3;
    case proto::OP_INIT_DENSE: return 4;
    default: return 5;
  }
}

}  // namespace

ServerMetrics::ServerMetrics(metrics::Registry* registry, const std::vector<std::string>& table_names) {
  auto resolve = [registry](const std::string& table, std::array<OpHandles, kOps>* out) {
    for (int i = 0; i < kOps; ++i) {
      metrics::Labels labels{{"op", kOpNames[i]}, {"table", table}};
      (*out)[i].requests = registry->AddCounter("osprey_server_requests_total",
                                                "Requests handled, by op and table.", labels);
      (*out)[i].latency = registry->AddHistogram(
          "osprey_server_request_duration_seconds",
          "Time in the server's handler, by op and table (a held pull's wait is not counted).",
          labels, metrics::LatencyBuckets());
    }
  };
  per_table_.resize(table_names.size());
  for (size_t t = 0; t < table_names.size(); ++t) resolve(table_names[t], &per_table_[t]);
  resolve("", &untabled_);
  checkpoint_ = registry->AddHistogram("osprey_server_checkpoint_duration_seconds",
                                       "Time to write this server's checkpoint.", {},
                                       {0.01, 0.05, 0.1, 0.5, 1, 5, 10, 30, 60, 300});
  last_checkpoint_ = registry->AddGauge("osprey_server_last_checkpoint_timestamp_seconds",
                                        "Unix time of the last checkpoint written (0: none yet).");
}

void ServerMetrics::OnRequest(proto::Op op, uint32_t table, double seconds) const {
  const int i = OpIndex(op);
  const OpHandles& h = i < 5 && table < per_table_.size() ? per_table_[table][i] : untabled_[i];
  h.requests.Inc();
  h.latency.Observe(seconds);
}

void ServerMetrics::OnCheckpoint(double seconds, double unix_seconds) const {
  checkpoint_.Observe(seconds);
  last_checkpoint_.Set(unix_seconds);
}

void ExportServerStats(const Server* srv, metrics::Registry* registry) {
  using metrics::Kind;
  auto value = [srv, registry](Kind kind, const char* name, const char* help,
                               uint64_t ServerStatsSnapshot::*field) {
    registry->AddValue(kind, name, help, [srv, field] { return static_cast<double>(srv->stats().*field); });
  };
  value(Kind::kCounter, "osprey_server_bytes_received_total", "Bytes of requests received.",
        &ServerStatsSnapshot::bytes_in);
  value(Kind::kCounter, "osprey_server_bytes_sent_total", "Bytes of replies sent.",
        &ServerStatsSnapshot::bytes_out);
  value(Kind::kCounter, "osprey_server_pushes_applied_total", "Pushes merged into applied windows.",
        &ServerStatsSnapshot::pushes_applied);
  value(Kind::kCounter, "osprey_server_pushes_dropped_total", "Pushes dropped (drop_above).",
        &ServerStatsSnapshot::pushes_dropped);
  value(Kind::kCounter, "osprey_server_windows_applied_total",
        "Merge windows applied (optimizer steps).", &ServerStatsSnapshot::windows_applied);
  value(Kind::kCounter, "osprey_server_pulls_held_total", "Pulls held for their clock.",
        &ServerStatsSnapshot::pulls_held);
  value(Kind::kGauge, "osprey_server_held_requests", "Requests held unanswered now.",
        &ServerStatsSnapshot::held_requests);
  value(Kind::kGauge, "osprey_server_held_bytes", "Memory of the requests held unanswered now.",
        &ServerStatsSnapshot::held_bytes);
  registry->AddCallback(Kind::kCounter, "osprey_server_bad_requests_total",
                        "Bad requests by kind (header, limit, refused, invalid).", [srv] {
    ServerStatsSnapshot st = srv->stats();
    const uint64_t known = st.bad_headers + st.limit_refusals + st.refused;
    const uint64_t invalid = st.bad_requests > known ? st.bad_requests - known : 0;
    std::vector<metrics::Sample> out(4);
    out[0] = {{{"kind", "header"}}, static_cast<double>(st.bad_headers), {}, {}};
    out[1] = {{{"kind", "limit"}}, static_cast<double>(st.limit_refusals), {}, {}};
    out[2] = {{{"kind", "refused"}}, static_cast<double>(st.refused), {}, {}};
    out[3] = {{{"kind", "invalid"}}, static_cast<double>(invalid), {}, {}};
    return out;
  });
  // ServerStats keeps staleness in power-of-two buckets without a sum: the sum exported is the
  // buckets' lower bounds times their counts (a lower bound of the true sum).
  registry->AddCallback(Kind::kHistogram, "osprey_server_push_staleness",
                        "Staleness (clocks) of pushed sparse rows and dense pushes.", [srv] {
    ServerStatsSnapshot st = srv->stats();
    metrics::Sample s;
    for (size_t i = 0; i < st.staleness.size(); ++i) {
      if (i + 1 < st.staleness.size()) s.bounds.push_back(i == 0 ? 0 : std::ldexp(1.0, i) - 1);
      s.buckets.push_back(static_cast<double>(st.staleness[i]));
      s.value += (i == 0 ? 0 : std::ldexp(1.0, i - 1)) * static_cast<double>(st.staleness[i]);
    }
    return std::vector<metrics::Sample>{s};
  });
  registry->AddCallback(Kind::kGauge, "osprey_server_rows", "Rows (or dense chunks) held, by table.",
                        [srv] {
    std::vector<metrics::Sample> out;
    for (const auto& [table, rows] : srv->rows_per_table()) {
      metrics::Sample s;
      s.labels = {{"table", table}};
      s.value = static_cast<double>(rows);
      out.push_back(s);
    }
    return out;
  });
}

}  // namespace osprey::server
