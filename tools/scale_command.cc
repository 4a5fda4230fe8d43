// `osprey scale --coordinator EP --servers M`: adds or removes servers of a running job
// (coordinator/scale_protocol.h has the protocol; README "Adding and removing servers").
//
// Growing needs M - N servers started with `osprey-server --config JOB.yaml --join` (before or
// after this command; the step waits for them up to cluster.startup_timeout_ms). The command
// returns when the new shard map is committed, printing the step's pause, or fails with the
// coordinator's reason (the step was abandoned: nothing moved, training goes on).
#include <CLI/CLI.hpp>

#include <cstdio>

#include "common/config/security_config.h"
#include "coordinator/coordinator_client.h"
#include "tools/commands.h"

namespace osprey::tools {

struct ScaleCommand {
  CLI::App* app = nullptr;
  std::string coordinator;
  int servers = 0;
  int timeout_ms = 600000;
  std::string keys_dir;
};

ScaleCommand* AddScaleCommand(CLI::App* app) {
  static ScaleCommand cmd;  // the options live as long as the app parses and runs
  cmd.app = app->add_subcommand("scale", "add or remove servers of a running job");
  cmd.app->add_option("--coordinator", cmd.coordinator, "the job's coordinator endpoint")->required();
  cmd.app->add_option("--servers", cmd.servers, "the server count to go to")->required();
  cmd.app->add_option("--timeout-ms", cmd.timeout_ms, "how long to wait for the step")->capture_default_str();
  cmd.app->add_option("--keys", cmd.keys_dir, "CURVE keys directory (security: curve; admin keypair)");
  return &cmd;
}

int RunScale(const std::string& coordinator, int servers, int timeout_ms, const std::string& keys_dir) {
  TransportOptions options;
  if (!keys_dir.empty()) {
    config::SecurityConfig security{config::SecurityMode::kCurve, keys_dir};
    auto made = config::MakeTransportOptions(security, PeerRole::kAdmin, PeerRole::kCoordinator);
    if (!made.ok()) {
      std::fprintf(stderr, "osprey scale: %s\n", made.status().ToString().c_str());
      return 2;
    }
    options = *made;
  }
  auto transport = MakeTransport(options);
  if (!transport.ok()) {
    std::fprintf(stderr, "osprey scale: %s\n", transport.status().ToString().c_str());
    return 1;
  }
  auto coord = coordinator::CoordinatorClient::Create(std::move(*transport), coordinator);
  if (!coord.ok()) {
    std::fprintf(stderr, "osprey scale: %s\n", coord.status().ToString().c_str());
    return 1;
  }
  proto::ScaleRequest req;
  req.set_kind(proto::SCALE_REQUEST);
  req.set_servers(servers);
  StatusOr<proto::ScaleReply> reply = (*coord)->Scale(req, timeout_ms);
  (*coord)->Stop();
  if (!reply.ok()) {
    std::fprintf(stderr, "osprey scale: %s\n", reply.status().ToString().c_str());
    return 1;
  }
  std::printf("scaled to %d servers (shard map epoch %llu) at step %lld: %llu records moved, "
              "training paused %.3f s (transfer %.3f s)\n",
              reply->shard_map().server_endpoints_size(),
              static_cast<unsigned long long>(reply->shard_map().epoch()),
              static_cast<long long>(reply->clock()),
              static_cast<unsigned long long>(reply->rows_moved()), reply->pause_seconds(),
              reply->transfer_seconds());
  return 0;
}

int RunScaleIfParsed(const ScaleCommand* cmd) {
  if (cmd == nullptr || !cmd->app->parsed()) return -1;
  return RunScale(cmd->coordinator, cmd->servers, cmd->timeout_ms, cmd->keys_dir);
}

}  // namespace osprey::tools
