#include "tools/supervisor.h"

#include <cstdio>
#include <memory>

namespace osprey::tools {

Supervisor::Supervisor(ChildSet* children, RestartOptions options, std::string pids_path,
                       std::function<void(const std::string&)> log)
    : children_(children), policy_(options), pids_path_(std::move(pids_path)), log_(std::move(log)) {}

void Supervisor::Watch(size_t child, ChildSpec restart, bool status_is_verdict) {
  watched_[child] = Watched{children_->spec(child).name, std::move(restart), status_is_verdict};
}

RestartDecision::Action Supervisor::OnExit(size_t child, JobPhase phase, Clock::time_point now,
                                           std::string* why) {
  auto it = watched_.find(child);
  const ExitInfo& exit = children_->exit_info(child);
  if (it == watched_.end()) {  // not supervised: any death fails the job
    *why = children_->spec(child).name + " (pid " + std::to_string(children_->pid(child)) + ") " +
           exit.ToString();
    return RestartDecision::kFail;
  }
  RestartDecision d = policy_.OnExit(it->second.slot, children_->pid(child), exit, phase,
                                     it->second.status_is_verdict, now);
  if (d.action == RestartDecision::kFail) {
    *why = d.line;
    return d.action;
  }
  log_(d.line);
  if (d.action == RestartDecision::kRestart) due_.push_back(Due{child, d.restart, d.at});
  return d.action;
}

Status Supervisor::StartDue(Clock::time_point now, std::vector<std::pair<size_t, size_t>>* started) {
  for (auto it = due_.begin(); it != due_.end();) {
    if (it->at > now) {
      ++it;
      continue;
    }
    const Due due = *it;
    it = due_.erase(it);
    Watched w = watched_.at(due.dead);
    const std::string slot = w.slot;
    ChildSpec spec = w.restart;
    const std::string name = slot + ".restart-" + std::to_string(due.restart);
    spec.name = name;
    const std::string dir = pids_path_.substr(0, pids_path_.find_last_of('/') + 1);
    spec.log_path = dir + name + ".log";
    OSPREY_ASSIGN_OR_RETURN(size_t index, children_->Spawn(spec));
    const pid_t pid = children_->pid(index);
    watched_.erase(due.dead);
    spec.name = slot;  // the replacement keeps the slot's name in later decisions
    watched_[index] = Watched{slot, spec, w.status_is_verdict};
    std::unique_ptr<FILE, int (*)(FILE*)> pids(std::fopen(pids_path_.c_str(), "a"), &std::fclose);
    if (pids) std::fprintf(pids.get(), "%s %d\n", name.c_str(), static_cast<int>(pid));
    log_(slot + " restarted as pid " + std::to_string(pid) + " (" + spec.binary.substr(spec.binary.find_last_of('/') + 1) +
         ", log " + spec.log_path + ")");
    started->emplace_back(due.dead, index);
  }
  return Status::OK();
}

}  // namespace osprey::tools

namespace osprey::tools {

ChildSpec WorkerRestartSpec(const ChildSpec& first) { return first; }

ChildSpec ServerRestartSpec(const ChildSpec& first, const std::string& checkpoint_dir) {
  ChildSpec spec = first;
  bool has_restore = false;
  for (const std::string& a : spec.args) has_restore = has_restore || a == "--restore";
  if (!has_restore && !checkpoint_dir.empty()) spec.args.insert(spec.args.end(), {"--restore", checkpoint_dir});
  return spec;
}

ChildSpec CoordinatorRestartSpec(const ChildSpec& first) {
  ChildSpec spec = first;
  spec.args.push_back("--recover");
  return spec;
}

}  // namespace osprey::tools
