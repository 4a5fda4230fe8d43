#include "common/config/cluster_config.h"

#include <utility>

#include "common/config/yaml_fields.h"
#include "common/cpu_affinity.h"

namespace osprey::config {

int PsConfig::TableIndex(const std::string& name) const {
  for (size_t i = 0; i < tables.size(); ++i) {
    if (tables[i].name == name) return static_cast<int>(i);
  }
  return -1;
}

void ParseCluster(YamlFields& f, ClusterConfig* c) {
  f.Get("servers", &c->num_servers, 1, 4096);
  f.Get("workers", &c->num_workers, 1, 4096);
  f.Get("transport", &c->transport, {"tcp", "ipc", "rdma"});
  f.Get("host", &c->host);
  f.Get("coordinator", &c->coordinator);
  f.Get("ipc_dir", &c->ipc_dir);
  f.Get("heartbeat_interval_ms", &c->heartbeat_interval_ms, 10, 600000);
  f.Get("heartbeat_timeout_ms", &c->heartbeat_timeout_ms, 50, 3600000);
  f.Get("startup_timeout_ms", &c->startup_timeout_ms, 100, 3600000);
  f.Get("coordinator_outage_ms", &c->coordinator_outage_ms, 0, 86400000);
  f.Get("io_threads", &c->io_threads, 1, 64);
  f.Get("server_replace_timeout_ms", &c->server_replace_timeout_ms, 0, 86400000);
  f.Get("server_cpus", &c->server_cpus);
  f.Get("worker_cpus", &c->worker_cpus);
  f.Get("server_apply_threads", &c->server_apply_threads, 1, 64);
  for (const auto& [key, list] : {std::pair{"server_cpus", &c->server_cpus}, std::pair{"worker_cpus", &c->worker_cpus}}) {
    if (!f.ok()) break;
    auto cpus = ParseCpuList(*list);
    if (!cpus.ok()) f.Fail(key, cpus.status().message());
  }
  if (f.ok() && c->heartbeat_timeout_ms <= c->heartbeat_interval_ms) {
    f.Fail("heartbeat_timeout_ms", "must be larger than heartbeat_interval_ms (" +
                                       std::to_string(c->heartbeat_interval_ms) + ")");
  }
  if (f.ok() && c->coordinator.rfind("tcp://", 0) != 0 && c->coordinator.rfind("ipc://", 0) != 0) {
    f.Fail("coordinator", "'" + c->coordinator + "' is not a tcp:// or ipc:// endpoint");
  }
}

}  // namespace osprey::config
