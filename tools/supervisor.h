// Supervisor: `osprey launch`'s restarts of dead children, with RestartPolicy's rules
// (restart_policy.h) applied to the real processes of a ChildSet.
//
// The launcher tells it, per child it started, how to start that child's replacement (the
// restart spec: a worker with --rank R; a server with --rank R --restore DIR; the coordinator on
// the same endpoint with --recover). When a child dies, OnExit() asks the policy; a restart is
// started by StartDue() once due, logged in one line, its pid appended to LOG_DIR/pids.txt as
// "<slot>.restart-K <pid>", its output in LOG_DIR/<slot>.restart-K.log (the first process's log
// is kept). The replacement is watched like the first process.
//
// Thread-safety: none; the launcher's main thread owns it (ChildSet's rule).
#pragma once

#include <chrono>
#include <functional>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "common/status.h"
#include "tools/child_process.h"
#include "tools/restart_policy.h"

namespace osprey::tools {

class Supervisor {
 public:
  using Clock = std::chrono::steady_clock;
  // `children` is borrowed; `log` prints one line (the launcher's stderr); `pids_path` is the
  // launcher's pids.txt, appended to.
  Supervisor(ChildSet* children, RestartOptions options, std::string pids_path,
             std::function<void(const std::string&)> log);

  // Child `child` (spec().name is its slot) is restarted as `restart` (its log path is replaced);
  // `status_is_verdict`: restarted only when killed by a signal (restart_policy.h).
  void Watch(size_t child, ChildSpec restart, bool status_is_verdict = false);
  // Child `child` exited unsuccessfully. kRestart: a replacement is scheduled (the line logged);
  // kIgnore: logged, nothing to do; kFail: *why is the job's failure message.
  RestartDecision::Action OnExit(size_t child, JobPhase phase, Clock::time_point now, std::string* why);
  // Starts the replacements that are due; each (dead child, its replacement) into *started.
  Status StartDue(Clock::time_point now, std::vector<std::pair<size_t, size_t>>* started);
  // Whether a replacement is scheduled but not started yet.
  bool pending() const { return !due_.empty(); }
  const RestartPolicy& policy() const { return policy_; }

 private:
  struct Due {
    size_t dead;
    int restart;
    Clock::time_point at;
  };
  ChildSet* children_;
  RestartPolicy policy_;
  std::string pids_path_;
  std::function<void(const std::string&)> log_;
  struct Watched {
    std::string slot;
    ChildSpec restart;
    bool status_is_verdict = false;
  };
  std::map<size_t, Watched> watched_;  // by child index
  std::vector<Due> due_;
};

}  // namespace osprey::tools

namespace osprey::tools {

// Restart specs from a child's first spec. A worker's is the same (the launcher starts every
// worker with --rank R). A server's adds --restore DIR (the job's checkpoint dir, when there is
// one and the first spec has no --restore). The coordinator's adds --recover (same endpoint).
ChildSpec WorkerRestartSpec(const ChildSpec& first);
ChildSpec ServerRestartSpec(const ChildSpec& first, const std::string& checkpoint_dir);
ChildSpec CoordinatorRestartSpec(const ChildSpec& first);

}  // namespace osprey::tools
