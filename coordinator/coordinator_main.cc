// osprey-coordinator --config FILE [--set key=value]... [--listen ENDPOINT] [--final-state PATH]
//                    [--recover] [--endpoint-file PATH]
//
// --endpoint-file: once listening, the bound endpoint is written there (atomically). With port 0
// the kernel picks the port at bind time, so nothing can take it between the pick and the bind
// (osprey launch starts the coordinator that way and hands the endpoint to the other nodes).
//
// --recover: restart a coordinator that was killed mid-job, on the same endpoint: it rebuilds the
// job from the nodes' re-registrations (they keep training meanwhile, for up to
// cluster.coordinator_outage_ms) instead of a fresh rendezvous (coordinator/job_state_recover.cc),
// and first from the job's metadata in Redis when store.type is redis (metadata_store.h).
//
// Runs the coordinator of one job until it is over. Exit codes: 0 the job succeeded, 1 it failed
// (or the endpoint could not be bound), 2 bad flags or a bad config. SIGTERM / SIGINT keep their
// default action (the launcher stops the whole job that way).
#include <CLI/CLI.hpp>

#include <cstdio>
#include <string>
#include <vector>

#include "job/job_config.h"
#include "job/node_flags.h"
#include "common/logging.h"
#include "common/rdma/startup_check.h"
#include "common/transport.h"
#include "coordinator/coordinator.h"
#include "coordinator/coordinator_metrics.h"
#include "common/metrics/metrics.h"
#include "coordinator/final_state.h"
#include "coordinator/metadata_store.h"

namespace {

struct Flags {
  osprey::config::NodeFlags node;  // --config, --set
  std::string listen;
  std::string final_state;
  std::string endpoint_file;
  bool recover = false;
};

int Run(const Flags& flags) {
  using namespace osprey;
  StatusOr<config::JobConfig> config = config::LoadJobConfig(flags.node.config, flags.node.sets);
  if (!config.ok()) {
    std::fprintf(stderr, "osprey-coordinator: %s\n", config.status().ToString().c_str());
    return config::kExitUsage;
  }
  if (Status rdma = rdma::CheckTransportAtStart(*config); !rdma.ok()) {
    std::fprintf(stderr, "osprey-coordinator: %s\n", rdma.ToString().c_str());
    return config::kExitUsage;
  }
  Status st = InitLogging(config->log_level, "coordinator");
  if (!st.ok()) {
    std::fprintf(stderr, "osprey-coordinator: %s\n", st.ToString().c_str());
    return config::kExitUsage;
  }
  config::LogSecurityMode(config->security);
  StatusOr<TransportOptions> options = config::MakeTransportOptions(
      config->security, PeerRole::kCoordinator, PeerRole::kUnauthenticated);
  if (!options.ok()) {
    OSPREY_LOG_ERROR("{}", options.status().ToString());
    return config::kExitUsage;
  }
  options->max_message_bytes = static_cast<int64_t>(config->limits.max_control_frame_bytes);
  // The control plane is ZeroMQ whatever cluster.transport says (rdma is for the data plane only:
  // common/rdma/data_transport.h).
  StatusOr<std::unique_ptr<Transport>> transport = MakeTransport(*options);
  if (!transport.ok()) {
    OSPREY_LOG_ERROR("{}", transport.status().ToString());
    return 1;
  }
  coordinator::Coordinator coord(*config, std::move(transport).value());
  coord.SetRecover(flags.recover);
  if (config->store.type == config::StoreType::kRedis) {  // the job's metadata beside its rows
    auto metadata = coordinator::MakeRedisMetadataStore(config->store.redis);
    if (metadata.ok()) {
      coord.SetMetadataStore(std::move(metadata).value());
      OSPREY_LOG_INFO("job metadata kept in Redis under {}:coordinator", config->store.redis.key_prefix);
    } else {
      OSPREY_LOG_WARN("job metadata not kept in Redis: {}", metadata.status().ToString());
    }
  }
  const std::string endpoint = flags.listen.empty() ? config->cluster.coordinator : flags.listen;
  StatusOr<std::string> bound = coord.Start(endpoint);
  if (!bound.ok()) {
    OSPREY_LOG_ERROR("cannot listen on {}: {}", endpoint, bound.status().ToString());
    return 1;
  }
  // Metrics (metrics.port >= 0): declared after coord, so the exposer stops before it.
  metrics::Registry registry;
  std::unique_ptr<metrics::Exposer> exposer;
  if (config->metrics.enabled()) {
    coordinator::ExportCoordinatorMetrics(&coord, &registry, config->metrics.single_worker_samples_per_sec);
    auto started = metrics::Exposer::Start({config->metrics.bind, config->metrics.port}, &registry);
    if (!started.ok()) {
      OSPREY_LOG_ERROR("{}", started.status().ToString());
      coord.Stop();
      return 1;
    }
    exposer = std::move(*started);
    coord.SetMetricsEndpoint(exposer->url());
    OSPREY_LOG_INFO("metrics on {}", exposer->url());
  }
  std::printf("osprey-coordinator listening on %s\n", bound->c_str());
  std::fflush(stdout);
  if (!flags.endpoint_file.empty()) {
    Status written = coordinator::WriteFileAtomically(flags.endpoint_file, *bound + "\n");
    if (!written.ok()) {
      OSPREY_LOG_ERROR("--endpoint-file: {}", written.ToString());
      exposer.reset();
      coord.Stop();
      return 1;
    }
  }
  Status result = coord.Wait();
  proto::ClusterState final_state = coord.State();
  exposer.reset();
  coord.Stop();
  if (!flags.final_state.empty()) {
    Status written = coordinator::WriteFinalState(flags.final_state, final_state);
    if (!written.ok()) OSPREY_LOG_ERROR("{}", written.ToString());
  }
  if (!result.ok()) {
    OSPREY_LOG_ERROR("job failed: {}", result.message());
    return 1;
  }
  OSPREY_LOG_INFO("job done: {} worker reports", final_state.reports_size());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"osprey-coordinator: rendezvous, barriers, heartbeats and failure detection of one "
               "Osprey job"};
  Flags flags;
  osprey::config::AddNodeFlags(&app, &flags.node);
  app.add_option("--listen", flags.listen, "endpoint to listen on (default: cluster.coordinator)");
  app.add_option("--final-state", flags.final_state,
                 "write the final ClusterState (binary protobuf) to this file on exit");
  app.add_option("--endpoint-file", flags.endpoint_file,
                 "once listening, write the bound endpoint (with the port the kernel picked for "
                 "port 0) to this file");
  app.add_flag("--recover", flags.recover,
               "restarted mid-job: rebuild the job from the nodes' re-registrations");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    int rc = app.exit(e);
    return rc == 0 ? 0 : osprey::config::kExitUsage;
  }
  return Run(flags);
}
