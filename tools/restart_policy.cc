#include "tools/restart_policy.h"

#include <algorithm>

namespace osprey::tools {

RestartDecision RestartPolicy::OnExit(const std::string& slot, pid_t pid, const ExitInfo& exit,
                                      JobPhase phase, bool status_is_verdict, Clock::time_point now) {
  RestartDecision d;
  const std::string what = slot + " (pid " + std::to_string(pid) + ") " + exit.ToString();
  const int done = restarts(slot);
  const std::string count = "restarted " + std::to_string(done) + " time" + (done == 1 ? "" : "s") +
                            " (--max-restarts " + std::to_string(o_.max_restarts) + ")";
  if (phase == JobPhase::kDone) {
    d.action = RestartDecision::kIgnore;
    d.line = what + " after the job was done; not restarted, the job's result stands";
    return d;
  }
  d.action = RestartDecision::kFail;
  if (phase == JobPhase::kShuttingDown) {
    d.line = what + " while the job was shutting down; not restarted (" + count + ")";
    return d;
  }
  if (exit.exited && status_is_verdict) {
    d.line = what + "; not restarted: its exit status is its verdict on the job";
    return d;
  }
  if (exit.exited && exit.code == 2) {
    d.line = what + " (a usage or config error, which a restart would repeat); not restarted (" +
             count + ")";
    return d;
  }
  if (done >= o_.max_restarts) {
    d.line = what + "; not restarted: " + count +
             (o_.max_restarts == 0 ? ", restarts are off" : ", none left");
    return d;
  }
  d.action = RestartDecision::kRestart;
  d.restart = done + 1;
  restarts_[slot] = d.restart;
  auto delay = std::chrono::milliseconds(0);
  if (d.restart > 1) {
    const int shift = std::min(d.restart - 2, 20);
    delay = std::min(o_.max_backoff, o_.backoff * (int64_t{1} << shift));
  }
  d.at = now + delay;
  d.line = what + "; restart " + std::to_string(d.restart) + " of " + std::to_string(o_.max_restarts) +
           (delay.count() > 0 ? " in " + std::to_string(delay.count()) + " ms" : "");
  return d;
}

int RestartPolicy::restarts(const std::string& slot) const {
  auto it = restarts_.find(slot);
  return it == restarts_.end() ? 0 : it->second;
}

}  // namespace osprey::tools
