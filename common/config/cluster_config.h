// ClusterConfig and PsConfig: the part of a job config that the parameter-server side -- the
// coordinator and the servers -- reads: the `cluster` section, the tables, the checkpoint
// settings and the log level. The full job config (model, data, train, client, worker sections
// and the checks that tie tables to the model) is job/job_config.h, for the worker, tools and
// mains; a config::JobConfig is a PsConfig, so it can be passed wherever one is expected.
#pragma once

#include <string>
#include <vector>

#include "common/config/consistency_config.h"
#include "common/config/security_config.h"
#include "common/config/limits_config.h"
#include "common/config/rdma_config.h"
#include "common/config/store_config.h"
#include "common/config/metrics_config.h"
#include "common/config/table_config.h"

namespace osprey::config {

class YamlFields;

struct ClusterConfig {
  int num_servers = 2;
  int num_workers = 2;
  std::string transport = "tcp";  // tcp | ipc | rdma: what servers listen on
  std::string host = "127.0.0.1";  // address servers bind and advertise
  // Where the coordinator listens. Port 0: `osprey launch` picks a free one.
  std::string coordinator = "tcp://127.0.0.1:0";
  std::string ipc_dir = "/tmp/osprey";
  int heartbeat_interval_ms = 500;
  int heartbeat_timeout_ms = 5000;  // a node silent this long is marked dead
  int startup_timeout_ms = 60000;   // registration must complete within this
  // How long a node keeps training and re-registering while the coordinator does not answer
  // (it may be restarted with --recover); past it the node fails. 0: fail after heartbeat_timeout_ms.
  int coordinator_outage_ms = 30000;
  // ZeroMQ I/O threads of a server's and a worker's data transport. With security: curve the
  // encryption runs on them (one connection per thread), so hosts with spare cores go faster
  // with 2-4; 1 is best where the cores are all busy (a 2-core machine).
  int io_threads = 1;
  // A dead server (or one superseded by a new incarnation) may be replaced by `osprey-server
  // --rank R`; the job fails naming it only when no replacement registered within this. 0: a
  // dead server fails the job at once.
  int server_replace_timeout_ms = 60000;
  // CPUs (a cpuset list, "0-3,8") each osprey-server / osprey-worker process runs on; "": any.
  // Keeps servers off the cores of a worker's pipeline threads on a shared host (issue 17). Every
  // process of the role gets the whole list (several servers share it).
  std::string server_cpus, worker_cpus;
  // Threads each server spreads a large merged window's apply, and a large sparse pull's row
  // reads, over (native store): both are bound by memory latency, so a second thread nearly
  // doubles the rows in flight. 1: the serving thread alone. Same bits either way.
  int server_apply_threads = 1;
};

struct PsConfig {
  std::string file;  // where it was loaded from
  ClusterConfig cluster;
  std::vector<TableConfig> tables;
  CheckpointConfig checkpoint;
  SecurityConfig security;
  LimitsConfig limits;  // what one peer may ask of a server (limits_config.h)
  RdmaConfig rdma;      // cluster.transport rdma (rdma_config.h)
  StoreConfig store;    // where servers keep parameters: native | redis (store_config.h)
  MetricsConfig metrics;  // the Prometheus exposer of each binary (metrics_config.h)
  std::string log_level = "info";

  // Index of the table called `name` or -1.
  int TableIndex(const std::string& name) const;
};

// Reads the `cluster` section into *c, with its cross-field checks (heartbeat timeout above the
// interval, a tcp:// or ipc:// coordinator endpoint).
void ParseCluster(YamlFields& f, ClusterConfig* c);

}  // namespace osprey::config
