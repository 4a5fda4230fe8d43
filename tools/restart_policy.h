// RestartPolicy: whether `osprey launch` restarts a child process that died, and when -- the
// rules as a plain class with no processes and no clock of its own (every call takes `now`), so
// tests drive it deterministically. tools/supervisor.h applies its decisions to real processes.
//
// Rules (issue 12: a job survives its processes):
//  - Counted per process slot ("worker-1", "server-0", "coordinator-0": one role and rank),
//    not per job: each slot may be restarted max_restarts times (`--max-restarts N`, default 3;
//    0 turns restarts off, the launcher's behaviour before: any death fails the job).
//  - A slot that died while the job was done (the coordinator said every live worker reported)
//    is ignored: its work is over (e.g. a worker killed after its report).
//  - A slot whose exit status is its verdict on the job (the coordinator: it exits 1 when the job
//    failed) is restarted only when killed by a signal.
//  - No restart while the job is shutting down (a failure or a stop request is already under
//    way), nor after exit status 2, which every osprey binary uses for a usage or config error
//    that a restart would only repeat.
//  - The first restart of a slot is immediate; the k-th waits backoff * 2^(k-2), at most
//    max_backoff, so a process that dies at once does not spin.
//  - Every decision carries one line for the log: the restart ("worker-1 (pid 42) was killed by
//    signal 9 (Killed); restart 1 of 3") or why the job fails ("... not restarted: restarted 3
//    times already (--max-restarts 3)").
//
// Thread-safety: none; the launcher's main thread owns it.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <map>
#include <string>

#include "tools/child_process.h"

namespace osprey::tools {

struct RestartOptions {
  int max_restarts = 3;
  std::chrono::milliseconds backoff{500};
  std::chrono::milliseconds max_backoff{5000};
};

// Where the job stands when a child died, as the launcher last saw it.
enum class JobPhase { kRunning, kShuttingDown, kDone };

struct RestartDecision {
  enum Action { kRestart, kIgnore, kFail };
  Action action = kFail;
  std::chrono::steady_clock::time_point at;  // kRestart: when to start the replacement
  int restart = 0;                           // kRestart: its number for this slot, 1-based
  std::string line;                          // the log line (kRestart, kIgnore) or the failure
};

class RestartPolicy {
 public:
  using Clock = std::chrono::steady_clock;
  explicit RestartPolicy(RestartOptions options) : o_(options) {}

  // Slot `slot` (its process `pid`) ended unsuccessfully as `exit`; `status_is_verdict`: see
  // above.
  RestartDecision OnExit(const std::string& slot, pid_t pid, const ExitInfo& exit, JobPhase phase,
                         bool status_is_verdict, Clock::time_point now);
  // Restarts granted to `slot` so far.
  int restarts(const std::string& slot) const;
  const RestartOptions& options() const { return o_; }

 private:
  const RestartOptions o_;
  std::map<std::string, int> restarts_;
};

}  // namespace osprey::tools
