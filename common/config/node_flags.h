// Command-line handling shared by osprey-server and osprey-worker: --config, repeatable --set,
// the usage-error exit code, and loading + validating the job config.
#pragma once

#include <CLI/CLI.hpp>

#include <string>
#include <vector>

#include "common/config/job_config.h"

namespace osprey::config {

// Exit code of every Osprey binary for a usage or config error.
inline constexpr int kExitUsage = 2;

struct NodeFlags {
  std::string config;
  std::vector<std::string> sets;
};

// Adds --config (required) and --set (repeatable) to `app`.
inline void AddNodeFlags(CLI::App* app, NodeFlags* flags) {
  app->add_option("--config", flags->config, "job config (YAML)")->required();
  app->add_option("--set", flags->sets, "override a config value, e.g. --set train.steps=100")
      ->take_all()
      ->allow_extra_args(false);
}

}  // namespace osprey::config
