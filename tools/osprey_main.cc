// osprey: the front door.
//   osprey launch CONFIG [--set k=v]... [--report-json PATH] [--log-dir DIR] [--bin-dir DIR]
//                 [--restore DIR] [--quiet] [--stall-timeout SECONDS]
//   osprey bench WHAT [ARGS...]
//   osprey doctor [--bin-dir DIR] [--json] [--network ENDPOINT [--keys DIR]]
//   osprey checkpoint --coordinator ENDPOINT [--dir DIR] [--timeout-ms MS] [--keys DIR]
//   osprey keygen DIR [--force]
//   osprey report FINAL_STATE [--json PATH]     osprey plot REPORT.json OUT.png
// OSPREY_PYTHON: the python with matplotlib for plots (default python3).
// Exit codes: 0 success, 1 the job failed, 2 bad flags / config / setup, 128+N interrupted by
// signal N (launch).
#include <CLI/CLI.hpp>

#include <algorithm>
#include <cstdlib>
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
                    std::vector<std::string>(argv + std::min(argc, 3), argv + argc),
                    std::getenv("OSPREY_PYTHON") ? std::getenv("OSPREY_PYTHON") : "");
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
  launch_cmd->add_option("--max-restarts", launch.max_restarts,
                         "restart a dead process with its rank at most N times (per process; 0: a "
                         "death fails the job)")
      ->default_val(3)
      ->check(CLI::NonNegativeNumber);
  launch_cmd->add_flag("--metrics", launch.metrics,
                       "serve Prometheus metrics from every process and print the endpoints");
  launch_cmd->add_option("--stall-timeout", launch.stall_timeout_s,
                         "fail when nothing moved for this many seconds (0: never)")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();

  // `bench` takes its arguments raw (see main's first lines); declared here for --help.
  app.add_subcommand("bench", "run the benchmark osprey-bench-WHAT with the remaining arguments");

  DoctorOptions doctor;
  CLI::App* doctor_cmd =
      app.add_subcommand("doctor", "check this build and machine: each check a verdict and a fix");
  doctor_cmd->add_option("--bin-dir", doctor.bin_dir,
                         "where the osprey-* binaries are (default: next to this one)");
  doctor_cmd->add_flag("--json", doctor.json, "one JSON object instead of text");
  doctor_cmd->add_option("--network", doctor.network,
                         "measure round trips 4 KiB..64 MiB against this running osprey-server");
  doctor_cmd->add_option("--keys", doctor.keys_dir, "the job's key directory (security: curve)");
  doctor_cmd->add_option("--network-table", doctor.network_table, "a sparse table's id")
      ->capture_default_str();
  for (const char* v : {"NCCL_SOCKET_IFNAME", "NCCL_IB_DISABLE", "NCCL_P2P_LEVEL", "NCCL_DEBUG"}) {
    if (const char* value = std::getenv(v)) doctor.nccl_env[v] = value;
  }

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
  std::string report_state, report_json, plot_input, plot_png;
  CLI::App* report_cmd = app.add_subcommand(
      "report", "print the job report from a coordinator's --final-state file (Slurm, k8s)");
  report_cmd->add_option("final_state", report_state, "the coordinator's final state")->required();
  report_cmd->add_option("--json", report_json, "also write the report as JSON here");
  CLI::App* plot_cmd =
      app.add_subcommand("plot", "draw loss and samples/s over steps from a --report-json file");
  plot_cmd->add_option("report", plot_input, "osprey launch --report-json output")->required();
  plot_cmd->add_option("png", plot_png, "the PNG to write")->required();

  ScaleCommand* scale_cmd = AddScaleCommand(&app);  // osprey scale (elastic servers)
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    int rc = app.exit(e);
    return rc == 0 ? 0 : kExitUsage;
  }
  if (launch_cmd->parsed()) return RunLaunch(launch);
  if (int rc = RunScaleIfParsed(scale_cmd); rc >= 0) return rc;
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
  if (report_cmd->parsed()) return RunReport(report_state, report_json);
  if (plot_cmd->parsed()) {
    return RunPlot(SelfBinDir(), std::getenv("OSPREY_PYTHON") ? std::getenv("OSPREY_PYTHON") : "",
                   "report", plot_input, plot_png);
  }
  if (doctor_cmd->parsed()) {
    if (doctor.bin_dir.empty()) doctor.bin_dir = SelfBinDir();
    return RunDoctor(doctor);
  }
  return kExitUsage;
}
