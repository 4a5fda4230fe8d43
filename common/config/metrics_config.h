// MetricsConfig: the `metrics` section of a job config -- whether each binary serves Prometheus
// metrics (common/metrics/metrics.h) and where.
//
//   metrics:
//     port: -1            # -1: off (the default); 0: any free port, registered with the
//                         # coordinator (the launcher prints them); N: that port (one process
//                         # per host, or --set metrics.port=... per process)
//     bind: 127.0.0.1     # address the exposer binds (0.0.0.0 to be scraped from elsewhere)
//     single_worker_samples_per_sec: 0   # one worker's samples/s measured alone, the baseline of
//                         # osprey_coordinator_scaling_efficiency (0: the fastest worker's)
//     peak_flops_per_sec: 0   # one worker's device peak FLOP/s (e.g. 9.89e14, H200 dense BF16),
//                         # exported by workers for the MFU estimate (0: not exported)
#pragma once

#include <string>

namespace osprey::config {

class YamlFields;

struct MetricsConfig {
  int port = -1;
  std::string bind = "127.0.0.1";
  double single_worker_samples_per_sec = 0;
  double peak_flops_per_sec = 0;
  bool enabled() const { return port >= 0; }
};

// Reads the `metrics` section into *m: port in -1..65535, a non-empty bind address, the
// baselines >= 0.
void ParseMetrics(YamlFields& f, MetricsConfig* m);

}  // namespace osprey::config
