#include "tools/launcher.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <optional>
#include <thread>

#include "job/job_config.h"
#include "common/rdma/startup_check.h"
#include "common/transport.h"
#include "common/zmq_curve.h"
#include "coordinator/coordinator_client.h"
#include "coordinator/final_state.h"
#include "tools/child_process.h"
#include "tools/local_redis.h"
#include "tools/paths.h"
#include "tools/metrics_endpoints.h"
#include "tools/progress.h"
#include "tools/report.h"
#include "tools/supervisor.h"
#include "tools/worker_command.h"

namespace osprey::tools {
namespace {

using Clock = std::chrono::steady_clock;
using Ms = std::chrono::milliseconds;

constexpr int kExitFailed = 1;
constexpr int kExitSetup = 2;
constexpr Ms kStopGrace(3000);
constexpr Ms kLoopSleep(50);
constexpr std::chrono::seconds kPlainLineEvery(5);
constexpr int kTailLines = 20;
constexpr int kPollTimeoutMs = 1000;

// --metrics: metrics.port=0 first, so that a --set of the user's own still wins.
LaunchOptions WithMetricsPort(LaunchOptions o) {
  if (o.metrics) o.sets.insert(o.sets.begin(), "metrics.port=0");
  return o;
}

class Launcher {
 public:
  explicit Launcher(const LaunchOptions& options) : o_(WithMetricsPort(options)), start_(Clock::now()) {}
  int Run();

 private:
  int Prepare();  // 0, or the exit code
  Status PrepareLogDir();
  Status PrepareKeys();  // security: curve
  Status CheckRestoreDir();
  Status StartChildren();
  Status StartLocalRedis(std::vector<std::string>* common_args);
  StatusOr<std::string> WaitForCoordinatorEndpoint(const std::string& path);
  Status StartChild(const std::string& name, const std::string& binary,
                    std::vector<std::string> args, FILE* pids);
  int Monitor();
  void Poll(Clock::time_point now);
  void OnCoordinatorExit();
  void ShowProgress(Clock::time_point now);
  void ClearProgress();
  int Fail(const std::string& why, int child);
  // The job's phase for the restart policy, from the last polled state.
  JobPhase Phase() const {
    if (done_seen_) return JobPhase::kDone;
    return (state_ && state_->shutting_down()) || coordinator_exited_ ? JobPhase::kShuttingDown
                                                                     : JobPhase::kRunning;
  }
  int Interrupted(int sig);
  int Finish();

  const LaunchOptions o_;
  const Clock::time_point start_;
  config::JobConfig config_;
  std::string config_path_;
  std::string endpoint_;
  std::string bin_dir_;
  std::string log_dir_;
  std::string restore_dir_;  // absolute --restore DIR, or ""
  std::string keys_dir_;     // security: curve: the key directory every child is given
  ChildSet children_;
  size_t coordinator_ = 0;  // index in children_
  std::unique_ptr<coordinator::CoordinatorClient> client_;
  std::unique_ptr<ProgressMeter> progress_;
  std::unique_ptr<Supervisor> supervisor_;  // restarts dead children (--max-restarts)
  std::unique_ptr<LocalRedis> redis_;  // store.redis.local: node | cluster (local_redis.h)
  std::optional<proto::ClusterState> state_;  // the latest polled (or final) state
  bool coordinator_exited_ = false;
  bool tty_ = false;
  bool line_on_screen_ = false;
  bool done_seen_ = false;
  bool metrics_printed_ = false;
  Clock::time_point last_change_;
  Clock::time_point done_at_;
  Clock::time_point last_plain_line_;
};

int Launcher::Run() {
  if (int rc = Prepare(); rc != 0) return rc;
  InstallStopSignalHandlers();
  Status st = StartChildren();
  if (int sig = ReceivedStopSignal()) return Interrupted(sig);
  if (!st.ok()) return Fail(st.message(), -1);
  // The launcher polls and stops the job as the admin role.
  StatusOr<TransportOptions> options =
      config::MakeTransportOptions(config_.security, PeerRole::kAdmin, PeerRole::kCoordinator);
  if (!options.ok()) return Fail(options.status().ToString(), -1);
  StatusOr<std::unique_ptr<Transport>> transport = MakeTransport(*options);
  if (!transport.ok()) return Fail(transport.status().ToString(), -1);
  auto client = coordinator::CoordinatorClient::Create(std::move(transport).value(), endpoint_);
  if (!client.ok()) return Fail(client.status().ToString(), -1);
  client_ = std::move(client).value();
  return Monitor();
}

int Launcher::Prepare() {
  StatusOr<config::JobConfig> config = config::LoadJobConfig(o_.config_path, o_.sets);
  if (!config.ok()) {
    std::fprintf(stderr, "osprey launch: %s\n", config.status().ToString().c_str());
    return kExitSetup;
  }
  if (Status st = rdma::CheckTransportAtStart(*config); !st.ok()) {
    std::fprintf(stderr, "osprey launch: %s\n", st.ToString().c_str());
    return kExitSetup;
  }
  config_ = std::move(config).value();
  std::error_code ec;
  config_path_ = std::filesystem::absolute(o_.config_path, ec).string();
  if (ec) config_path_ = o_.config_path;
  endpoint_ = config_.cluster.coordinator;  // tcp://H:0: the coordinator's bind picks the port
  bin_dir_ = o_.bin_dir.empty() ? SelfBinDir() : o_.bin_dir;
  for (const char* name : {"osprey-coordinator", "osprey-server", "osprey-worker"}) {
    if (!IsExecutable(bin_dir_ + "/" + name)) {
      std::fprintf(stderr, "osprey launch: %s not found in %s (build it, or pass --bin-dir)\n",
                   name, bin_dir_.c_str());
      return kExitSetup;
    }
  }
  if (!o_.restore_dir.empty()) {
    if (Status st = CheckRestoreDir(); !st.ok()) {
      std::fprintf(stderr, "osprey launch: %s\n", st.ToString().c_str());
      return kExitSetup;
    }
  }
  if (Status st = PrepareLogDir(); !st.ok()) {
    std::fprintf(stderr, "osprey launch: %s\n", st.ToString().c_str());
    return kExitSetup;
  }
  if (Status st = PrepareKeys(); !st.ok()) {
    std::fprintf(stderr, "osprey launch: %s\n", st.ToString().c_str());
    return kExitSetup;
  }
  progress_ = std::make_unique<ProgressMeter>(config_.train.steps);
  tty_ = ::isatty(STDERR_FILENO) == 1;
  std::fprintf(stderr, "osprey launch: store %s\n", config::StoreName(config_.store).c_str());
  std::fprintf(stderr, "osprey launch: security %s\n",
               keys_dir_.empty() ? "none (unauthenticated, unencrypted: loopback only)"
                                 : ("curve, keys in " + keys_dir_).c_str());
  return 0;
}

// security: curve with a keys_dir that is empty, absent or without keys: fresh keys for this
// job in LOG_DIR/keys, so `osprey launch configs/local-curve.yaml` works as it is.
Status Launcher::PrepareKeys() {
  if (config_.security.mode != config::SecurityMode::kCurve) return Status::OK();
  std::error_code ec;
  const std::string& dir = config_.security.keys_dir;
  if (!dir.empty() && std::filesystem::exists(dir + "/coordinator.pub", ec)) {
    keys_dir_ = std::filesystem::absolute(dir, ec).string();
    if (ec) keys_dir_ = dir;
  } else {
    keys_dir_ = log_dir_ + "/keys";
    OSPREY_RETURN_IF_ERROR(WriteCurveKeys(keys_dir_, /*force=*/true));
  }
  config_.security.keys_dir = keys_dir_;
  return Status::OK();
}

// Only what the launcher can see cheaply: the directory and its file names. The servers verify
// every byte (and refuse a corrupt checkpoint) before loading anything.
Status Launcher::CheckRestoreDir() {
  std::error_code ec;
  restore_dir_ = std::filesystem::absolute(o_.restore_dir, ec).string();
  if (ec) restore_dir_ = o_.restore_dir;
  if (!std::filesystem::is_directory(restore_dir_, ec)) {
    return NotFound("--restore " + o_.restore_dir + ": no such directory");
  }
  int files = 0;
  for (const auto& e : std::filesystem::directory_iterator(restore_dir_, ec)) {
    const std::string name = e.path().filename().string();
    if (name.rfind("server-", 0) == 0 && name.size() > 5 &&
        name.compare(name.size() - 5, 5, ".ckpt") == 0) {
      ++files;
    }
  }
  if (ec) return Unavailable("--restore " + o_.restore_dir + ": " + ec.message());
  if (files == 0) {
    return NotFound("--restore " + o_.restore_dir +
                    ": no checkpoint files (server-R-of-N.ckpt) in it");
  }
  std::fprintf(stderr, "osprey launch: servers restore from %s (%d checkpoint files)\n",
               restore_dir_.c_str(), files);
  return Status::OK();
}

Status Launcher::PrepareLogDir() {
  if (o_.log_dir.empty()) {
    char tmpl[] = "/tmp/osprey-launch-XXXXXX";
    if (::mkdtemp(tmpl) == nullptr) {
      return Unavailable(std::string("cannot create a log dir in /tmp: ") + std::strerror(errno));
    }
    log_dir_ = tmpl;
    return Status::OK();
  }
  std::error_code ec;
  std::filesystem::create_directories(o_.log_dir, ec);
  if (ec) return Unavailable("cannot create log dir " + o_.log_dir + ": " + ec.message());
  log_dir_ = o_.log_dir;
  std::filesystem::remove(log_dir_ + "/final_state.pb", ec);  // from an earlier run
  return Status::OK();
}

Status Launcher::StartChildren() {
  const std::string pids_path = log_dir_ + "/pids.txt";
  std::unique_ptr<FILE, int (*)(FILE*)> pids(std::fopen(pids_path.c_str(), "w"), &std::fclose);
  if (!pids) return Unavailable("cannot write " + pids_path + ": " + std::strerror(errno));
  supervisor_ = std::make_unique<Supervisor>(&children_, RestartOptions{o_.max_restarts}, pids_path,
                                             [this](const std::string& line) {
                                               ClearProgress();
                                               std::fprintf(stderr, "osprey launch: %s\n", line.c_str());
                                             });
  std::vector<std::string> common{"--config", config_path_};
  for (const std::string& s : o_.sets) common.insert(common.end(), {"--set", s});
  if (!keys_dir_.empty()) common.insert(common.end(), {"--set", "security.keys_dir=" + keys_dir_});
  OSPREY_RETURN_IF_ERROR(StartLocalRedis(&common));

  // The coordinator binds first (port 0: the kernel picks a free port at bind time, so no other
  // process can take it between a pick and the bind) and writes where it listens; the other
  // nodes, and a restarted coordinator, are given that endpoint.
  const std::string endpoint_file = log_dir_ + "/coordinator.endpoint";
  std::error_code ec;
  std::filesystem::remove(endpoint_file, ec);  // from an earlier run
  std::vector<std::string> args = common;
  args.insert(args.end(), {"--set", "cluster.coordinator=" + endpoint_, "--final-state",
                           log_dir_ + "/final_state.pb", "--endpoint-file", endpoint_file});
  OSPREY_RETURN_IF_ERROR(
      StartChild("coordinator-0", bin_dir_ + "/osprey-coordinator", args, pids.get()));
  coordinator_ = children_.size() - 1;
  OSPREY_ASSIGN_OR_RETURN(endpoint_, WaitForCoordinatorEndpoint(endpoint_file));
  ChildSpec restart = CoordinatorRestartSpec(children_.spec(coordinator_));
  restart.args.insert(restart.args.end(), {"--listen", endpoint_});
  supervisor_->Watch(coordinator_, std::move(restart), /*status_is_verdict=*/true);
  common.insert(common.end(), {"--set", "cluster.coordinator=" + endpoint_});
  std::fprintf(stderr, "osprey launch: %d servers, %d workers; coordinator %s; logs in %s\n",
               config_.cluster.num_servers, config_.cluster.num_workers, endpoint_.c_str(),
               log_dir_.c_str());
  std::vector<std::string> server_args = common;
  if (!restore_dir_.empty()) server_args.insert(server_args.end(), {"--restore", restore_dir_});
  for (int i = 0; i < config_.cluster.num_servers; ++i) {
    std::vector<std::string> ranked = server_args;  // a restart takes the same rank
    ranked.insert(ranked.end(), {"--rank", std::to_string(i)});
    OSPREY_RETURN_IF_ERROR(StartChild("server-" + std::to_string(i),
                                      bin_dir_ + "/osprey-server", ranked, pids.get()));
    supervisor_->Watch(children_.size() - 1,
                       ServerRestartSpec(children_.spec(children_.size() - 1), config_.checkpoint.dir));
  }
  for (int i = 0; i < config_.cluster.num_workers; ++i) {
    if (!config_.worker.command.empty()) {  // users' own scripts (tools/worker_command.h)
      std::vector<std::string> sets(common.begin() + 2, common.end());
      sets.erase(std::remove(sets.begin(), sets.end(), std::string("--set")), sets.end());
      OSPREY_ASSIGN_OR_RETURN(ChildSpec spec,
                              WorkerCommandSpec(config_.worker.command, i, config_.cluster.num_workers, config_path_,
                                                sets, endpoint_, log_dir_ + "/worker-" + std::to_string(i) + ".log"));
      OSPREY_ASSIGN_OR_RETURN(size_t index, children_.Spawn(spec));
      std::fprintf(pids.get(), "%s %d\n", spec.name.c_str(), static_cast<int>(children_.pid(index)));
      std::fflush(pids.get());
      supervisor_->Watch(index, WorkerRestartSpec(spec));
      continue;
    }
    std::vector<std::string> ranked = common;  // a restart takes the same rank
    ranked.insert(ranked.end(), {"--rank", std::to_string(i)});
    OSPREY_RETURN_IF_ERROR(StartChild("worker-" + std::to_string(i),
                                      bin_dir_ + "/osprey-worker", ranked, pids.get()));
    supervisor_->Watch(children_.size() - 1, WorkerRestartSpec(children_.spec(children_.size() - 1)));
  }
  return Status::OK();
}

// store.redis.local: node | cluster: a Redis of the job's own, before the servers; every child
// is given its endpoints.
Status Launcher::StartLocalRedis(std::vector<std::string>* common_args) {
  const config::RedisStoreConfig& rc = config_.store.redis;
  if (config_.store.type != config::StoreType::kRedis || rc.local == config::LocalRedis::kNone) {
    return Status::OK();
  }
  OSPREY_ASSIGN_OR_RETURN(redis_,
                          LocalRedis::Start(log_dir_, rc.local == config::LocalRedis::kCluster));
  std::fprintf(stderr, "osprey launch: local redis%s on %s\n",
               rc.local == config::LocalRedis::kCluster ? " cluster" : "",
               redis_->endpoints().c_str());
  common_args->insert(common_args->end(), {"--set", "store.redis.endpoints=" + redis_->endpoints()});
  return Status::OK();
}

// The endpoint the coordinator wrote once listening. Bounded: the coordinator exiting first
// (its log says why: a port taken, a bad config) or 60 s without it fail the launch.
StatusOr<std::string> Launcher::WaitForCoordinatorEndpoint(const std::string& path) {
  const auto deadline = Clock::now() + std::chrono::seconds(60);
  while (true) {
    std::ifstream in(path);
    std::string line;
    if (in && std::getline(in, line) && !line.empty()) return line;  // written atomically
    if (int sig = ReceivedStopSignal()) {
      return Aborted("interrupted by signal " + std::to_string(sig) + " while starting processes");
    }
    if (children_.HasExited(coordinator_) || Clock::now() > deadline) {
      return Unavailable("the coordinator did not start listening on " + endpoint_ + ": see " +
                         children_.spec(coordinator_).log_path + "\n" +
                         TailOfFile(children_.spec(coordinator_).log_path, 5));
    }
    std::this_thread::sleep_for(Ms(10));
  }
}

Status Launcher::StartChild(const std::string& name, const std::string& binary,
                            std::vector<std::string> args, FILE* pids) {
  if (int sig = ReceivedStopSignal()) {
    return Aborted("interrupted by signal " + std::to_string(sig) + " while starting processes");
  }
  ChildSpec spec{name, binary, std::move(args), log_dir_ + "/" + name + ".log", {}};
  OSPREY_ASSIGN_OR_RETURN(size_t index, children_.Spawn(spec));
  std::fprintf(pids, "%s %d\n", name.c_str(), static_cast<int>(children_.pid(index)));
  std::fflush(pids);
  return Status::OK();
}

int Launcher::Monitor() {
  last_change_ = Clock::now();
  Clock::time_point next_poll = last_change_;
  const auto stall = std::chrono::seconds(o_.stall_timeout_s);
  const auto linger = Ms(2 * config_.cluster.heartbeat_timeout_ms + 10000);
  while (true) {
    if (int sig = ReceivedStopSignal()) return Interrupted(sig);
    for (size_t i : children_.ReapExited()) {
      last_change_ = Clock::now();
      const ExitInfo& exit = children_.exit_info(i);
      if (!exit.success()) {  // restarted, ignored or fatal: tools/restart_policy.h
        std::string why;
        if (!coordinator_exited_ && i != coordinator_) Poll(Clock::now());  // a fresh phase: did the job fail?
        if (supervisor_->OnExit(i, Phase(), Clock::now(), &why) == RestartDecision::kFail) {
          if (state_ && !state_->failure().empty()) {  // the job failed first: its reason
            return Fail("the coordinator reports: " + state_->failure(), static_cast<int>(coordinator_));
          }
          return Fail(why, static_cast<int>(i));
        }
        continue;
      }
      if (i == coordinator_) OnCoordinatorExit();
    }
    const Clock::time_point now = Clock::now();
    std::vector<std::pair<size_t, size_t>> restarted;
    if (Status st = supervisor_->StartDue(now, &restarted); !st.ok()) return Fail(st.message(), -1);
    for (const auto& [dead, replacement] : restarted) {
      if (dead == coordinator_) coordinator_ = replacement;
      last_change_ = now;
    }
    if (children_.running() == 0 && !supervisor_->pending()) return Finish();
    if (!coordinator_exited_ && now >= next_poll) {
      Poll(now);
      next_poll = now + Ms(o_.poll_interval_ms);
    }
    if (state_ && !state_->failure().empty()) {
      return Fail("the coordinator reports: " + state_->failure(), static_cast<int>(coordinator_));
    }
    if (done_seen_ && now - done_at_ > linger) {
      return Fail(std::to_string(children_.running()) + " process(es) still running " +
                  std::to_string(linger.count() / 1000) + " s after the job finished", -1);
    }
    if (o_.stall_timeout_s > 0 && now - last_change_ > stall) {
      return Fail("no progress for " + std::to_string(o_.stall_timeout_s) +
                  " s (--stall-timeout); last state: " + progress_->Line(),
                  static_cast<int>(coordinator_));
    }
    std::this_thread::sleep_for(kLoopSleep);
  }
}

void Launcher::Poll(Clock::time_point now) {
  StatusOr<proto::ClusterState> state = client_->GetState(kPollTimeoutMs);
  if (!state.ok()) return;  // not up yet, or busy: the stall guard bounds how long we accept it
  if (progress_->Update(*state, now)) last_change_ = now;
  if (state->done() && !done_seen_) {
    done_seen_ = true;
    done_at_ = now;
  }
  state_ = std::move(state).value();
  if (!metrics_printed_ && config_.metrics.enabled()) {
    const std::string text = MetricsEndpointsText(*state_);
    if (!text.empty()) {
      metrics_printed_ = true;
      ClearProgress();
      std::fprintf(stderr, "osprey launch: metrics endpoints:\n%s", text.c_str());
      Status st = coordinator::WriteFileAtomically(log_dir_ + "/metrics_endpoints.txt", text);
      if (!st.ok()) std::fprintf(stderr, "osprey launch: %s\n", st.ToString().c_str());
    }
  }
  ShowProgress(now);
}

void Launcher::OnCoordinatorExit() {
  coordinator_exited_ = true;
  StatusOr<proto::ClusterState> final_state =
      coordinator::ReadFinalState(log_dir_ + "/final_state.pb");
  if (!final_state.ok()) return;  // keep the last polled state
  state_ = std::move(final_state).value();
  if (state_->done() && !done_seen_) {
    done_seen_ = true;
    done_at_ = Clock::now();
  }
}

void Launcher::ShowProgress(Clock::time_point now) {
  if (o_.quiet) return;
  const std::string line = progress_->Line();
  if (line.empty()) return;
  if (tty_) {
    std::fprintf(stderr, "\r%s\033[K", line.c_str());
    line_on_screen_ = true;
  } else if (now - last_plain_line_ >= kPlainLineEvery) {
    std::fprintf(stderr, "%s\n", line.c_str());
    last_plain_line_ = now;
  }
}

void Launcher::ClearProgress() {
  if (line_on_screen_) std::fprintf(stderr, "\r\033[K");
  line_on_screen_ = false;
}

int Launcher::Fail(const std::string& why, int child) {
  ClearProgress();
  std::fprintf(stderr, "osprey launch: FAILED: %s\n", why.c_str());
  if (child >= 0) {
    const std::string& log = children_.spec(static_cast<size_t>(child)).log_path;
    std::fprintf(stderr, "---- last %d lines of %s ----\n%s\n----\n", kTailLines, log.c_str(),
                 TailOfFile(log, kTailLines).c_str());
  }
  children_.StopAll(kStopGrace);
  std::fprintf(stderr, "osprey launch: every process stopped; logs in %s\n", log_dir_.c_str());
  return kExitFailed;
}

int Launcher::Interrupted(int sig) {
  ClearProgress();
  std::fprintf(stderr, "osprey launch: got signal %d (%s); stopping %zu processes\n", sig,
               ::strsignal(sig), children_.running());
  children_.StopAll(kStopGrace);
  std::fprintf(stderr, "osprey launch: every process stopped; logs in %s\n", log_dir_.c_str());
  return 128 + sig;
}

int Launcher::Finish() {
  ClearProgress();
  if (!state_ || !state_->done()) {
    return Fail("every process exited, but the coordinator never reported the job done",
                static_cast<int>(coordinator_));
  }
  const double wall = std::chrono::duration<double>(Clock::now() - start_).count();
  JobReport report = SummarizeReports(*state_, wall);
  report.curve = progress_->curve();
  std::printf("%s  logs              %s\n", FormatReport(report).c_str(), log_dir_.c_str());
  std::fflush(stdout);
  children_.StopAll(Ms(0));  // everything exited; this sweeps stray grandchildren
  if (!o_.report_json.empty()) {
    Status st = coordinator::WriteFileAtomically(o_.report_json, ReportJson(report));
    if (!st.ok()) {
      std::fprintf(stderr, "osprey launch: %s\n", st.ToString().c_str());
      return kExitFailed;
    }
  }
  return 0;
}

}  // namespace

int RunLaunch(const LaunchOptions& options) { return Launcher(options).Run(); }

}  // namespace osprey::tools
