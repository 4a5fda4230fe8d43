// osprey: the front door.
//   osprey launch CONFIG [--set k=v]... [--report-json PATH] [--log-dir DIR] [--bin-dir DIR]
//                 [--restore DIR] [--quiet] [--stall-timeout SECONDS]
//   osprey bench WHAT [ARGS...]
//   osprey doctor [--bin-dir DIR]
//   osprey checkpoint --coordinator ENDPOINT [--dir DIR] [--timeout-ms MS] [--keys DIR]
//   osprey keygen DIR [--force]
// Exit codes: 0 success, 1 the job failed, 2 bad flags / config / setup, 128+N interrupted by
// signal N (launch).
#include <CLI/CLI.hpp>

#include <algorithm>
#include <string>
#include <vector>

#include "tools/commands.h"
#include "tools/launcher.h"
#include "tools/paths.h"

namespace {

constexpr int kExitUsage = 2;

}  // namespace

int main(int argc, char** argv) {
  using namespace osprey::tools;
  // Everything after `bench WHAT` belongs to the benchmark, untouched (--help and -- included).
  if (argc >= 2 && std::string(argv[1]) == "bench") {
    return RunBench(SelfBinDir(), argc >= 3 ? argv[2] : "",
                    std::vector<std::string>(argv + std::min(argc, 3), argv + argc));
  }
  CLI::App app{"osprey: run and inspect Osprey parameter-server jobs"};
  app.require_subcommand(1);

  LaunchOptions launch;
  CLI::App* launch_cmd = app.add_subcommand(
      "launch", "run a whole local job (coordinator, servers, workers) with progress and a report");
  launch_cmd->add_option("config", launch.config_path, "job config (YAML)")->required();
  launch_cmd->add_option("--set", launch.sets,
                         "override a config key, e.g. --set train.steps=100 (repeatable)")
      ->allow_extra_args(false);
  launch_cmd->add_option("--report-json", launch.report_json,
                         "write the final report as JSON to this file");
  launch_cmd->add_option("--log-dir", launch.log_dir,
                         "directory for the processes' logs (default: a fresh temp dir)");
  launch_cmd->add_option("--bin-dir", launch.bin_dir,
                         "where the osprey-* binaries are (default: next to this one)");
  launch_cmd->add_option("--restore", launch.restore_dir,
                         "resume from this checkpoint directory (passed to every server; the "
                         "checkpoint may come from another server count)");
  launch_cmd->add_flag("--quiet", launch.quiet, "no progress line");
  launch_cmd->add_flag("--metrics", launch.metrics,
                       "serve Prometheus metrics from every process and print the endpoints");
  launch_cmd->add_option("--stall-timeout", launch.stall_timeout_s,
                         "fail when nothing moved for this many seconds (0: never)")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();

  // `bench` takes its arguments raw (see main's first lines); declared here for --help.
  app.add_subcommand("bench", "run the benchmark osprey-bench-WHAT with the remaining arguments");

  std::string doctor_bin_dir;
  CLI::App* doctor_cmd =
      app.add_subcommand("doctor", "show what this build and this machine offer");
  doctor_cmd->add_option("--bin-dir", doctor_bin_dir,
                         "where the osprey-* binaries are (default: next to this one)");

  std::string ckpt_coordinator, ckpt_dir, ckpt_keys;
  int ckpt_timeout_ms = 60000;
  CLI::App* ckpt_cmd = app.add_subcommand(
      "checkpoint", "have every live server of a running job write its checkpoint now");
  ckpt_cmd->add_option("--coordinator", ckpt_coordinator,
                       "the job's coordinator endpoint (osprey launch prints it)")
      ->required();
  ckpt_cmd->add_option("--dir", ckpt_dir, "directory (default: the job's checkpoint.dir)");
  ckpt_cmd->add_option("--timeout-ms", ckpt_timeout_ms, "per request")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  ckpt_cmd->add_option("--keys", ckpt_keys,
                       "the job's key directory (security: curve; the admin keypair is used)");

  std::string keygen_dir;
  bool keygen_force = false;
  CLI::App* keygen_cmd =
      app.add_subcommand("keygen", "make a job's CURVE keypairs (coordinator, server, worker, admin)");
  keygen_cmd->add_option("dir", keygen_dir, "directory for the key files")->required();
  keygen_cmd->add_flag("--force", keygen_force, "replace existing key files");

  std::string inspect_config, inspect_table;
  std::vector<std::string> inspect_sets;
  int inspect_rows = 5;
  CLI::App* inspect_cmd =
      app.add_subcommand("redis-inspect", "print a Redis store's row count and a few rows");
  inspect_cmd->add_option("--config", inspect_config, "the job config (store.type: redis)")->required();
  inspect_cmd->add_option("--set", inspect_sets, "key=value override (repeatable)");
  inspect_cmd->add_option("--table", inspect_table, "table name (default: the first)");
  inspect_cmd->add_option("--rows", inspect_rows, "rows shown per server")->capture_default_str();

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    int rc = app.exit(e);
    return rc == 0 ? 0 : kExitUsage;
  }
  if (launch_cmd->parsed()) return RunLaunch(launch);
  if (ckpt_cmd->parsed()) {
    return RunCheckpoint(ckpt_coordinator, ckpt_dir, ckpt_timeout_ms, ckpt_keys);
  }
  if (keygen_cmd->parsed()) return RunKeygen(keygen_dir, keygen_force);
#ifdef OSPREY_HAVE_REDIS_INSPECT
  if (inspect_cmd->parsed()) {
    return RunRedisInspect(inspect_config, inspect_sets, inspect_table, inspect_rows);
  }
#else
  if (inspect_cmd->parsed()) {
    std::fprintf(stderr, "osprey redis-inspect: this osprey was built without hiredis\n");
    return 2;
  }
#endif
  if (doctor_cmd->parsed()) {
    return RunDoctor(doctor_bin_dir.empty() ? SelfBinDir() : doctor_bin_dir);
  }
  return kExitUsage;
}
