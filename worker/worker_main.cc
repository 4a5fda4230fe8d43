// osprey-worker: trains the job's built-in model through the parameter servers.
//
//   osprey-worker --config JOB.yaml [--set key=value]... [--rank N]
//
// Registers with the coordinator (which assigns the rank and hands out the shard map), trains
// train.steps steps, meets the other workers at the "train-done" barrier, evaluates on the
// held-out set (rank 0), and sends its report. Exit codes: 0 success, 1 runtime failure,
// 2 usage/config error.
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <csignal>
#include <cstdio>
#include <string>

#include "job/node_flags.h"
#include "common/logging.h"
#include "common/malloc_tuning.h"
#include "common/rdma/data_transport.h"
#include "coordinator/coordinator_client.h"
#include "worker/client/client.h"
#include "worker/gpu_trainer.h"
#include "worker/trainer.h"
#include "worker/worker_metrics.h"
#include "common/metrics/metrics.h"

namespace {

using namespace osprey;

int Fail(const Status& s, const char* what) {
  OSPREY_LOG_ERROR("{}: {}", what, s.ToString());
  return 1;
}

// Registers this process as a worker; the reply carries the rank and the shard map.
StatusOr<proto::RegisterReply> Register(coordinator::CoordinatorClient* coord, const config::JobConfig& job,
                                        int rank, const std::string& metrics_endpoint) {
  proto::RegisterRequest req;
  req.set_role(proto::ROLE_WORKER);
  char hostname[256] = "localhost";
  gethostname(hostname, sizeof(hostname) - 1);
  req.set_host(hostname);
  req.set_pid(getpid());
  req.set_requested_rank(rank);
  req.set_metrics_endpoint(metrics_endpoint);
  return coord->Register(req, job.cluster.startup_timeout_ms);
}

// This worker's place among the workers of its host, and the NCCL id exchange through `coord`.
worker::HostGroup MakeHostGroup(const proto::RegisterReply& reg, coordinator::CoordinatorClient* coord,
                                const config::JobConfig& job) {
  worker::HostGroup host;
  host.local_rank = reg.local_rank();
  host.local_size = std::max(1, reg.local_size());
  const int rank = reg.rank();
  const int exchange_timeout_ms = job.cluster.startup_timeout_ms;
  host.exchange_id = [coord, rank, exchange_timeout_ms](const std::string& id) -> StatusOr<std::string> {
    OSPREY_ASSIGN_OR_RETURN(proto::HostGroupReply r, coord->HostGroup(rank, id, exchange_timeout_ms));
    return r.nccl_id();
  };
  return host;
}

// Heartbeats carry the trainer's progress; a job shutting down on a failure, or a lost
// coordinator, stops the client, which fails every outstanding request so training stops now.
Status StartHeartbeats(coordinator::CoordinatorClient* coord, const config::JobConfig& job, int rank,
                       worker::TrainLoop* trainer, worker::Client* client, std::atomic<bool>* aborted) {
  coordinator::HeartbeatOptions hb;
  hb.interval_ms = job.cluster.heartbeat_interval_ms;
  hb.timeout_ms = job.cluster.heartbeat_timeout_ms;
  hb.fill = [trainer, rank] {
    worker::Progress p = trainer->progress();
    proto::Heartbeat h;
    h.set_role(proto::ROLE_WORKER);
    h.set_rank(rank);
    h.set_clock(p.step);
    h.set_loss(p.loss);
    h.set_samples(p.samples);
    h.set_compression_warning(p.compression_warning);
    return h;
  };
  hb.on_state = [client, aborted](const proto::ClusterState& st) {
    if (st.shutting_down() && !st.failure().empty() && !aborted->exchange(true)) {
      OSPREY_LOG_ERROR("job is shutting down: {}", st.failure());
      client->Stop();
    }
  };
  hb.on_lost = [client, aborted](const Status& why) {
    OSPREY_LOG_ERROR("lost the coordinator: {}", why.ToString());
    if (!aborted->exchange(true)) client->Stop();
  };
  return coord->StartHeartbeats(hb);
}

// Rank 0's held-out evaluation into *report (when the job asks for one).
Status Evaluate(worker::TrainLoop* trainer, const config::JobConfig& job, int rank, proto::WorkerReport* report) {
  if (rank != 0 || job.train.eval_samples <= 0) return Status::OK();
  OSPREY_ASSIGN_OR_RETURN(worker::EvalResult eval, trainer->Evaluate());
  report->set_auc(eval.auc);
  report->set_logloss(eval.logloss);
  report->set_oracle_auc(eval.oracle_auc);
  report->set_eval_samples(eval.samples);
  OSPREY_LOG_INFO("held-out: AUC {:.4f} (oracle {:.4f}), logloss {:.4f} on {} samples", eval.auc, eval.oracle_auc,
                  eval.logloss, eval.samples);
  return Status::OK();
}

void LogReport(const proto::WorkerReport& report, int rank, const worker::ClientStats& cs) {
  OSPREY_LOG_INFO("worker {} on {} pushed {} B, pulled {} B; dense compression: {} -> {} B in {} "
                  "messages, encode {:.1f} ms",
                  rank, report.device(), cs.bytes_pushed, cs.bytes_pulled,
                  report.dense_push_bytes_raw(), report.dense_push_bytes_encoded(),
                  report.compressed_messages(), report.encode_seconds() * 1e3);
  OSPREY_LOG_INFO("worker {} step time: wait-input {:.2f} s, compute {:.2f} s, push {:.2f} s, "
                  "nccl {:.2f} s; prefetch side: read {:.2f} s, dedupe {:.2f} s, cache {:.2f} s, "
                  "pull {:.2f} s; cache hits {} of {} lookups, {} evictions, {} rows pulled",
                  rank, report.time_wait_input(), report.time_compute(), report.time_push(),
                  report.time_nccl(), report.prefetch_read(), report.prefetch_dedupe(),
                  report.prefetch_cache(), report.prefetch_pull(), report.cache_hits(),
                  report.cache_lookups(), report.cache_evictions(), report.rows_pulled());
  if (report.density_trajectory_size() > 0) {
    std::string points;
    for (const proto::DensityPoint& d : report.density_trajectory()) {
      points += (points.empty() ? "" : ", ") + std::to_string(d.step()) + ": " +
                std::to_string(d.density());
    }
    OSPREY_LOG_INFO("worker {} dense push density by step: {}", rank, points);
  }
}

// Init, train, the train-done barrier, evaluation and the report; returns the exit code.
int TrainAndReport(worker::TrainLoop* trainer, coordinator::CoordinatorClient* coord, worker::Client* client,
                   const config::JobConfig& job, int rank, int num_workers) {
  OSPREY_LOG_INFO("worker {} of {}: {} steps of batch {}", rank, num_workers, job.train.steps,
                  job.train.batch_size);
  Status s = trainer->Init();
  if (!s.ok()) return Fail(s, "init");
  s = trainer->Run([rank](const worker::Progress& p) {
    OSPREY_LOG_DEBUG("worker {} step {} loss {:.4f}", rank, p.step, p.loss);
  });
  if (!s.ok()) return Fail(s, "training");
  worker::Progress p = trainer->progress();
  OSPREY_LOG_INFO("worker {} trained {} steps ({} samples) in {:.1f} s, loss {:.4f}", rank, p.step,
                  p.samples, trainer->train_seconds(), p.loss);

  s = coord->Barrier("train-done", proto::ROLE_WORKER, rank, job.cluster.startup_timeout_ms * 10);
  if (!s.ok()) return Fail(s, "barrier");
  proto::WorkerReport report;
  report.set_rank(rank);
  report.set_steps(p.step);
  report.set_samples(p.samples);
  report.set_train_seconds(trainer->train_seconds());
  report.set_final_loss(p.loss);
  s = Evaluate(trainer, job, rank, &report);
  if (!s.ok()) return Fail(s, "evaluation");
  worker::ClientStats cs = client->stats();
  report.set_bytes_pushed(cs.bytes_pushed);
  report.set_bytes_pulled(cs.bytes_pulled);
  trainer->FillReport(&report);
  LogReport(report, rank, cs);
  s = coord->Report(report, job.client.timeout_ms);
  if (!s.ok()) return Fail(s, "report");
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"osprey-worker: trains an Osprey job's model through the parameter servers"};
  config::NodeFlags flags;
  config::AddNodeFlags(&app, &flags);
  config::AddRankFlag(&app, &flags);
  config::JobConfig loaded;
  if (int rc = config::ParseFlagsAndLoad(&app, argc, argv, flags, "osprey-worker", &loaded); rc >= 0) return rc;
  const config::JobConfig& job = loaded;
  TuneMallocForLargeMessages();
  (void)InitLogging(job.log_level, "worker");
  config::LogSecurityMode(job.security);
  auto coord_options =
      config::MakeTransportOptions(job.security, PeerRole::kWorker, PeerRole::kCoordinator);
  if (!coord_options.ok()) return Fail(coord_options.status(), "security");
  auto data_options = config::MakeTransportOptions(job.security, PeerRole::kWorker, PeerRole::kServer);
  if (!data_options.ok()) return Fail(data_options.status(), "security");
  data_options->io_threads = job.cluster.io_threads;

  auto ctransport = MakeTransport(*coord_options);
  if (!ctransport.ok()) return Fail(ctransport.status(), "transport");
  auto coord = coordinator::CoordinatorClient::Create(std::move(*ctransport), job.cluster.coordinator);
  if (!coord.ok()) return Fail(coord.status(), "coordinator");
  // Metrics: served from before registration (the coordinator learns the URL), filled with the
  // loop's families once it exists; the guard below stops the exposer before the loop and the
  // client it reads are destroyed.
  metrics::Registry registry;
  std::unique_ptr<metrics::Exposer> exposer;
  if (job.metrics.enabled()) {
    auto started = metrics::Exposer::Start({job.metrics.bind, job.metrics.port}, &registry);
    if (!started.ok()) return Fail(started.status(), "metrics");
    exposer = std::move(*started);
  }
  auto reg = Register(coord->get(), job, flags.rank, exposer ? exposer->url() : "");
  if (!reg.ok()) return Fail(reg.status(), "register");
  const int rank = reg->rank();
  const int num_workers = reg->num_workers();

  worker::ClientOptions copts;
  copts.worker_rank = rank;
  copts.timeout_ms = job.client.timeout_ms;
  copts.max_inflight = job.client.max_inflight;
  // Data plane per cluster.transport (rdma too); the coordinator stays on ZeroMQ (data_transport.h).
  auto dtransport = rdma::MakeDataTransport(job, *data_options);
  if (!dtransport.ok()) return Fail(dtransport.status(), "transport");
  worker::Client client(copts, std::move(*dtransport), reg->shard_map());
  Status s = client.Start();
  if (!s.ok()) return Fail(s, "client");

  auto made = worker::MakeTrainLoop(job, rank, num_workers, &client, MakeHostGroup(*reg, coord->get(), job));
  if (!made.ok()) {
    OSPREY_LOG_ERROR("worker {}: {}", rank, made.status().ToString());
    return 2;
  }
  std::unique_ptr<worker::TrainLoop> trainer = std::move(*made);
  struct StopExposer {
    std::unique_ptr<metrics::Exposer>* exposer;
    ~StopExposer() { exposer->reset(); }
  } stop_exposer{&exposer};
  if (exposer) {
    std::vector<std::pair<std::string, uint32_t>> tables;
    for (const config::TableConfig& t : job.tables) {
      if (auto id = client.TableId(t.name); id.ok()) tables.emplace_back(t.name, *id);
    }
    trainer->SetMetrics(&registry);
    worker::ExportWorkerMetrics(trainer.get(), &client, std::move(tables), &registry);
    OSPREY_LOG_INFO("worker {} metrics on {}", rank, exposer->url());
  }
  std::atomic<bool> aborted{false};
  s = StartHeartbeats(coord->get(), job, rank, trainer.get(), &client, &aborted);
  if (!s.ok()) return Fail(s, "heartbeats");
  if (int rc = TrainAndReport(trainer.get(), coord->get(), &client, job, rank, num_workers); rc != 0) return rc;
  (*coord)->Stop();
  client.Stop();
  return 0;
}
