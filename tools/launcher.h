// `osprey launch`: runs a whole local job -- coordinator, servers, workers -- as separate
// processes, shows progress, and prints the final report.
//
// Order of events:
//  1. Load and validate the config (with the --set overrides). A bad config prints the error and
//     returns 2 before anything starts; so do missing binaries or an unusable log dir.
//  2. Pick the coordinator endpoint: when cluster.coordinator has port 0, a free loopback port
//     (bind port 0, read it, close). Every child gets `--set cluster.coordinator=<endpoint>`.
//  3. Start osprey-coordinator, then num_servers x osprey-server (with `--restore DIR` when
//     --restore is given), then num_workers x osprey-worker, each `--config CONFIG [--set ...]`,
//     found in --bin-dir or next to this binary.
//     Each child logs to LOG_DIR/<role>-<i>.log (coordinator-0.log, server-1.log, ...); their
//     pids go to LOG_DIR/pids.txt ("<role>-<i> <pid>" per line) as they start. The coordinator
//     also gets `--final-state LOG_DIR/final_state.pb` (see coordinator/final_state.h).
//  4. Poll the coordinator (OP_CLUSTER_STATE) every poll_interval_ms and show progress on stderr:
//     an updating line on a TTY, a plain line every 5 s otherwise, nothing with --quiet.
//  5. A child that exits non-zero or is killed is restarted with its rank (--max-restarts,
//     tools/restart_policy.h; servers and workers are started with --rank R for that).
//     Fail (stop every child, print which process failed with the last 20 lines of its log,
//     return 1) when a child's death is not restarted, the coordinator reports a failure,
//     nothing moved for stall_timeout_s, or processes linger long after the job is done.
//  6. On SIGINT / SIGTERM / SIGHUP: stop every child (SIGTERM, 3 s, SIGKILL, reap) and return
//     128 + the signal number.
//  7. Success (the coordinator said done and every child exited 0): print the report (see
//     report.h), write --report-json atomically, return 0.
//
// Must run on the main thread of a process that has started no other threads (it forks).
#pragma once

#include <string>
#include <vector>

#include "common/status.h"

namespace osprey::tools {

struct LaunchOptions {
  std::string config_path;
  std::vector<std::string> sets;  // "key=value" overrides, passed on to every child
  std::string report_json;        // "": no JSON report
  std::string log_dir;            // "": a fresh /tmp/osprey-launch-XXXXXX (printed)
  std::string bin_dir;            // "": the directory of this executable
  // "": a fresh job. Otherwise a checkpoint directory (server-R-of-N.ckpt files, any N) passed
  // to every server as --restore DIR; a missing directory or one with no checkpoint files is a
  // setup error (2, nothing started); a corrupt checkpoint makes the servers fail (1, the
  // failing server's log tail names the file and the problem).
  std::string restore_dir;
  bool quiet = false;
  int stall_timeout_s = 300;
  int poll_interval_ms = 500;
  // --metrics: every process serves Prometheus metrics on a free port (metrics.port=0, unless
  // --set gives one); once all registered, the URLs are printed on stderr and written to
  // LOG_DIR/metrics_endpoints.txt ("NAME URL" lines: coordinator, server-R, worker-R).
  bool metrics = false;
  // --max-restarts N: a child that dies is restarted with its rank (worker --rank R; server
  // --rank R --restore CHECKPOINT_DIR; coordinator, when killed by a signal, --recover), at most
  // N times per process slot; 0: any death fails the job. tools/restart_policy.h has the rules.
  int max_restarts = 3;
};

// Runs the job; returns the exit code (0 success, 1 job failure, 2 bad config / setup,
// 128 + signal when interrupted).
int RunLaunch(const LaunchOptions& options);

}  // namespace osprey::tools
