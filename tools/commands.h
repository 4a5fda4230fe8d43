// The small subcommands of the `osprey` front door. Each returns the process exit code and writes
// to stdout/stderr; called from osprey_main.cc on the main thread.
#pragma once

#include <map>
#include <string>
#include <vector>

namespace CLI {
class App;
}  // namespace CLI

namespace osprey::tools {

// `osprey bench WHAT [ARGS...]`: replaces this process with BIN_DIR/osprey-bench-WHAT ARGS...
// With no or an unknown WHAT, lists the osprey-bench-* binaries in `bin_dir` and returns 2
// (0 for `osprey bench --help`). `args` are passed on exactly as given, except `--plot PNG`
// (transport, codec, dlrm): then the benchmark runs as a child with --json (its own or a file
// next to PNG) and RunPlot draws PNG from it with `python` (see RunPlot).
int RunBench(const std::string& bin_dir, const std::string& what,
             const std::vector<std::string>& args, const std::string& python = "");

// `osprey doctor [--json] [--network ENDPOINT [--keys DIR] [--network-table ID]]`: checks this
// build and machine (tools/doctor/checks.h), each with a verdict and the fix, as text or one JSON
// object; with `network`, the round-trip curve (4 KiB..64 MiB) against that running server.
// Returns 0, or 1 when a check failed.
struct DoctorOptions {
  std::string bin_dir;
  bool json = false;
  std::string network;   // "": no network measurement
  std::string keys_dir;  // security: curve (the worker keypair is used)
  int network_table = 0;  // a sparse table's id (its index in the job config's tables)
  std::map<std::string, std::string> nccl_env;  // the NCCL_* variables that are set
};
int RunDoctor(const DoctorOptions& options);

// `osprey checkpoint --coordinator ENDPOINT [--dir DIR]`: asks the job's coordinator for its live
// servers and has each write its checkpoint now (into DIR, or the job's checkpoint.dir when empty).
// Each server writes its own snapshot when the request reaches it (not a cut at one clock across
// servers). Returns 0 when every live server wrote its file, 1 otherwise (each failure printed).
// With a non-empty `keys_dir` (a job under security: curve) it connects with the admin keypair
// from there; a server refuses a DIR outside its checkpoint.dir.
int RunCheckpoint(const std::string& coordinator, const std::string& dir, int timeout_ms,
                  const std::string& keys_dir);

// `osprey keygen DIR [--force]`: writes the job's CURVE keypairs (coordinator, server, worker,
// admin; secrets 0600) into DIR. Returns 0, 2 when a key file exists and not `force`, 1 for
// other errors (each printed).
int RunKeygen(const std::string& dir, bool force);

// `osprey redis-inspect --config C [--set k=v] [--table T] [--rows N]`: the Redis store of a
// job (store.type: redis): the table's spec key, each server's row count and up to N rows each
// (key, blob size, first weights). 0, 2 for a bad config, 1 when Redis cannot be reached.
// Only in builds with hiredis.
int RunRedisInspect(const std::string& config_path, const std::vector<std::string>& sets,
                    const std::string& table, int rows);
// `osprey report FINAL_STATE [--json PATH]`: prints the job report (as `osprey launch` does) from
// a coordinator's --final-state file and writes it as JSON to `json_path` (when not empty).
// Returns 0, 1 when the job did not finish or PATH cannot be written, 2 for an unreadable file.
int RunReport(const std::string& final_state, const std::string& json_path);

// Runs bin_dir/osprey-plot.py (bench/plot/plot.py) as `python SCRIPT KIND INPUT PNG`: KIND report
// (`osprey plot`), transport, codec or dlrm (`osprey bench WHAT --plot PNG`). `python` empty:
// python3. Returns the script's exit code (3: matplotlib missing, the message says how to get it).
int RunPlot(const std::string& bin_dir, const std::string& python, const std::string& kind,
            const std::string& input, const std::string& png);

// `osprey scale --coordinator EP --servers M [--timeout-ms T] [--keys DIR]` (scale_command.cc):
// asks the job's coordinator to go to M servers and waits for the step; prints its pause.
// Returns 0 when the new map is committed, 1 when the step failed or the coordinator is
// unreachable (the reason printed), 2 for bad keys. AddScaleCommand registers the subcommand;
// RunScaleIfParsed runs it when it was the one parsed, else returns -1.
struct ScaleCommand;
ScaleCommand* AddScaleCommand(CLI::App* app);
int RunScaleIfParsed(const ScaleCommand* cmd);
int RunScale(const std::string& coordinator, int servers, int timeout_ms, const std::string& keys_dir);

// Runs argv (argv[0] looked up on PATH) and waits; returns its exit code (128 + N for signal N).
int RunAndWait(const std::vector<std::string>& argv);

}  // namespace osprey::tools
