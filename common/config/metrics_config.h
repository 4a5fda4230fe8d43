// MetricsConfig: the `metrics` section of a job config -- whether each binary serves Prometheus
// metrics (common/metrics/metrics.h) and where.
//
//   metrics:
//     port: -1            # -1: off (the default); 0: any free port, registered with the
//                         # coordinator (the launcher prints them); N: that port (one process
//                         # per host, or --set metrics.port=... per process)
//     bind: 127.0.0.1     # address the exposer binds (0.0.0.0 to be scraped from elsewhere)
#pragma once

#include <string>

namespace osprey::config {

class YamlFields;

struct MetricsConfig {
  int port = -1;
  std::string bind = "127.0.0.1";
  bool enabled() const { return port >= 0; }
};

// Reads the `metrics` section into *m: port in -1..65535, a non-empty bind address.
void ParseMetrics(YamlFields& f, MetricsConfig* m);

}  // namespace osprey::config
