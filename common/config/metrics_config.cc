#include "common/config/metrics_config.h"

#include "common/config/yaml_fields.h"

namespace osprey::config {

void ParseMetrics(YamlFields& f, MetricsConfig* m) {
  f.Get("port", &m->port, -1, 65535);
  f.Get("bind", &m->bind);
  f.Get("single_worker_samples_per_sec", &m->single_worker_samples_per_sec, 0, 1e15);
  f.Get("peak_flops_per_sec", &m->peak_flops_per_sec, 0, 1e20);
  if (f.ok() && m->bind.empty()) f.Fail("bind", "must name an address (127.0.0.1, 0.0.0.0)");
}

}  // namespace osprey::config
