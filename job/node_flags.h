// Command-line handling shared by osprey-server and osprey-worker: --config, repeatable --set,
// the usage-error exit code, and loading + validating the job config.
#pragma once

#include <CLI/CLI.hpp>

#include <cstdio>
#include <string>
#include <vector>

#include "common/rdma/startup_check.h"
#include "job/job_config.h"

namespace osprey::config {

// Exit code of every Osprey binary for a usage or config error.
inline constexpr int kExitUsage = 2;

struct NodeFlags {
  std::string config;
  std::vector<std::string> sets;
  int rank = -1;  // --rank (servers, workers): the rank to ask the coordinator for; -1 any free
};

// Adds --config (required) and --set (repeatable) to `app`.
inline void AddNodeFlags(CLI::App* app, NodeFlags* flags) {
  app->add_option("--config", flags->config, "job config (YAML)")->required();
  app->add_option("--set", flags->sets, "override a config value, e.g. --set train.steps=100")
      ->take_all()
      ->allow_extra_args(false);
}

// Adds --rank N (osprey-server, osprey-worker): ask the coordinator for rank N (a Kubernetes pod
// ordinal, a Slurm task id) instead of the next free one; a rank outside the job or one another
// node holds is refused at registration.
inline void AddRankFlag(CLI::App* app, NodeFlags* flags) {
  app->add_option("--rank", flags->rank, "rank to register as (default -1: any free rank)")
      ->check(CLI::Range(-1, 1 << 20));
}

// Parses argv with `app` (AddNodeFlags already applied) and loads + validates the job config into
// *job. Returns -1 when main should go on, otherwise the exit code main should return: 0 after
// --help, kExitUsage for bad flags or a bad config (the error is printed as "<binary>: <error>"),
// or a transport this build or machine cannot offer (cluster.transport rdma without a device).
inline int ParseFlagsAndLoad(CLI::App* app, int argc, char** argv, const NodeFlags& flags,
                             const char* binary, JobConfig* job) {
  try {
    app->parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app->exit(e) == 0 ? 0 : kExitUsage;
  }
  auto loaded = LoadJobConfig(flags.config, flags.sets);
  if (!loaded.ok()) {
    std::fprintf(stderr, "%s: %s\n", binary, loaded.status().ToString().c_str());
    return kExitUsage;
  }
  if (Status st = rdma::CheckTransportAtStart(*loaded); !st.ok()) {
    std::fprintf(stderr, "%s: %s\n", binary, st.ToString().c_str());
    return kExitUsage;
  }
  *job = std::move(loaded).value();
  return -1;
}

}  // namespace osprey::config
