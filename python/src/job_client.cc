#include "python/src/job_client.h"

#include <unistd.h>

#include <mutex>

#include "common/logging.h"
#include "worker/compression.h"

namespace osprey::python {

StatusOr<std::unique_ptr<JobClient>> JobClient::Connect(const ConnectOptions& options) {
  std::vector<std::string> sets = options.sets;
  if (!options.coordinator.empty()) sets.push_back("cluster.coordinator=" + options.coordinator);
  OSPREY_ASSIGN_OR_RETURN(config::JobConfig job, config::LoadJobConfig(options.config_path, sets));
  std::unique_ptr<JobClient> jc(new JobClient());
  jc->job_ = std::move(job);
  jc->pid_ = ::getpid();
  const config::JobConfig& cfg = jc->job_;
  // The logger is process-wide: the first client of a process names its level.
  static std::once_flag logging_once;
  std::call_once(logging_once, [&cfg] { (void)InitLogging(cfg.log_level, "worker"); });

  OSPREY_ASSIGN_OR_RETURN(TransportOptions coord_options,
                          config::MakeTransportOptions(cfg.security, PeerRole::kWorker, PeerRole::kCoordinator));
  OSPREY_ASSIGN_OR_RETURN(TransportOptions data_options,
                          config::MakeTransportOptions(cfg.security, PeerRole::kWorker, PeerRole::kServer));
  OSPREY_ASSIGN_OR_RETURN(std::unique_ptr<Transport> ct, MakeTransport(coord_options));
  OSPREY_ASSIGN_OR_RETURN(jc->coord_, coordinator::CoordinatorClient::Create(std::move(ct), cfg.cluster.coordinator));

  proto::RegisterRequest req;
  req.set_role(proto::ROLE_WORKER);
  char hostname[256] = "localhost";
  gethostname(hostname, sizeof(hostname) - 1);
  req.set_host(hostname);
  req.set_pid(::getpid());
  req.set_requested_rank(options.requested_rank);
  const int timeout = options.register_timeout_ms > 0 ? options.register_timeout_ms : cfg.cluster.startup_timeout_ms;
  StatusOr<proto::RegisterReply> reg = jc->coord_->Register(req, timeout);
  if (!reg.ok()) {
    return reg.status().WithContext("registering with the coordinator at " + cfg.cluster.coordinator);
  }
  jc->rank_ = reg->rank();
  jc->num_workers_ = reg->num_workers();

  worker::ClientOptions copts;
  copts.worker_rank = jc->rank_;
  copts.timeout_ms = cfg.client.timeout_ms;
  copts.max_inflight = cfg.client.max_inflight;
  copts.push_part_bytes = cfg.client.push_part_bytes;
  copts.pull_part_bytes = cfg.client.pull_part_bytes;
  copts.receive_in_wait = cfg.client.receive_in_wait;
  OSPREY_ASSIGN_OR_RETURN(std::unique_ptr<Transport> dt, MakeTransport(data_options));
  jc->client_ = std::make_unique<worker::Client>(copts, std::move(dt), reg->shard_map());
  OSPREY_RETURN_IF_ERROR(jc->client_->Start());
  // Row codecs (bf16 rows) and dense compression exactly as the C++ worker installs them.
  for (const config::TableConfig& t : cfg.tables) {
    StatusOr<uint32_t> id = jc->client_->TableId(t.name);
    if (!id.ok()) continue;
    OSPREY_RETURN_IF_ERROR(worker::SetTableCodecs(t, *id, jc->rank_ + 1, jc->client_.get()).status());
  }

  coordinator::HeartbeatOptions hb;
  hb.interval_ms = cfg.cluster.heartbeat_interval_ms;
  hb.timeout_ms = cfg.cluster.heartbeat_timeout_ms;
  JobClient* self = jc.get();
  hb.fill = [self] {
    proto::Heartbeat h;
    h.set_role(proto::ROLE_WORKER);
    h.set_rank(self->rank_);
    h.set_clock(self->step_.load());
    h.set_loss(self->loss_.load());
    h.set_samples(self->samples_.load());
    return h;
  };
  // A job failing elsewhere, or a lost coordinator, stops the client: every wait then raises.
  hb.on_state = [self](const proto::ClusterState& st) {
    if (st.shutting_down() && !st.failure().empty() && !self->aborted_.exchange(true)) {
      OSPREY_LOG_ERROR("job is shutting down: {}", st.failure());
      self->client_->Stop();
    }
  };
  hb.on_lost = [self](const Status& why) {
    OSPREY_LOG_ERROR("lost the coordinator: {}", why.ToString());
    if (!self->aborted_.exchange(true)) self->client_->Stop();
  };
  OSPREY_RETURN_IF_ERROR(jc->coord_->StartHeartbeats(hb));
  return jc;
}

JobClient::~JobClient() {
  if (::getpid() != pid_) {
    // A forked child: the threads these own live only in the parent; joining them here would
    // hang or crash, so the child leaks them (it holds copies of the parent's sockets only).
    (void)coord_.release();
    (void)client_.release();
    return;
  }
  Close();
}

void JobClient::Close() {
  if (closed_.exchange(true)) return;
  if (coord_) coord_->Stop();
  if (client_) client_->Stop();
}

Status JobClient::CheckUsable() const {
  if (::getpid() != pid_) {
    return FailedPrecondition("this osprey client was created in process " + std::to_string(pid_) +
                              " and cannot be used in the forked child " + std::to_string(::getpid()) +
                              ": call osprey.connect() in the child, or keep the client in the main process "
                              "(DataLoader workers should only load data)");
  }
  if (closed_.load()) return FailedPrecondition("this osprey client is closed");
  return Status::OK();
}

void JobClient::SetProgress(int64_t step, uint64_t samples, double loss) {
  step_.store(step);
  samples_.store(samples);
  loss_.store(loss);
}

Status JobClient::Barrier(const std::string& name, int timeout_ms) {
  OSPREY_RETURN_IF_ERROR(CheckUsable());
  return coord_->Barrier(name, proto::ROLE_WORKER, rank_, timeout_ms);
}

Status JobClient::Report(const FinalReport& r) {
  OSPREY_RETURN_IF_ERROR(CheckUsable());
  proto::WorkerReport report;
  report.set_rank(rank_);
  report.set_steps(r.steps);
  report.set_samples(r.samples);
  report.set_train_seconds(r.train_seconds);
  report.set_final_loss(r.final_loss);
  if (r.auc >= 0) {
    report.set_auc(r.auc);
    report.set_logloss(r.logloss);
    report.set_oracle_auc(r.oracle_auc);
    report.set_eval_samples(r.eval_samples);
  }
  worker::ClientStats cs = client_->stats();
  report.set_bytes_pushed(cs.bytes_pushed);
  report.set_bytes_pulled(cs.bytes_pulled);
  report.set_device("cpu (python)");
  return coord_->Report(report, job_.client.timeout_ms);
}

}  // namespace osprey::python
