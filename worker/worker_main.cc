// osprey-worker: trains the job's built-in model through the parameter servers.
//
//   osprey-worker --config JOB.yaml [--set key=value]... [--rank N]
//
// Registers with the coordinator (which assigns the rank and hands out the shard map), trains
// train.steps steps, meets the other workers at the "train-done" barrier, evaluates on the
// held-out set (rank 0), and sends its report. Exit codes: 0 success, 1 runtime failure,
// 2 usage/config error. Started with --rank R after the rendezvous (a restarted worker), it
// rejoins: the coordinator answers with the step its rank had reached and it trains from there
// (coordinator/job_state_rejoin.cc, worker/trainer_resume.cc).
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <random>
#include <string>
#include <thread>

#include "job/node_flags.h"
#include "common/incarnation.h"
#include "common/placement.h"  // Mix64
#include "common/logging.h"
#include "common/cpu_affinity.h"
#include "common/malloc_tuning.h"
#include "common/rdma/data_transport.h"
#include "common/throttled_transport.h"
#include "coordinator/coordinator_client.h"
#include "worker/client/client.h"
#include "worker/gpu_trainer.h"
#include "worker/resume_plan.h"
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
                                        int rank, const std::string& metrics_endpoint, uint64_t incarnation) {
  proto::RegisterRequest req;
  req.set_role(proto::ROLE_WORKER);
  char hostname[256] = "localhost";
  gethostname(hostname, sizeof(hostname) - 1);
  req.set_host(hostname);
  req.set_pid(getpid());
  req.set_requested_rank(rank);
  req.set_metrics_endpoint(metrics_endpoint);
  req.set_incarnation(incarnation);
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
                       uint64_t incarnation, int64_t resume_at, worker::TrainLoop* trainer, worker::ScalePause* pause,
                       std::atomic<bool>* aborted, std::atomic<bool>* over) {
  coordinator::HeartbeatOptions hb;
  hb.interval_ms = job.cluster.heartbeat_interval_ms;
  hb.timeout_ms = job.cluster.heartbeat_timeout_ms;
  hb.outage_ms = job.cluster.coordinator_outage_ms;  // train on and re-register meanwhile
  hb.fill = [trainer, rank, incarnation, resume_at] {
    worker::Progress p = trainer->progress();
    proto::Heartbeat h;
    h.set_role(proto::ROLE_WORKER);
    h.set_rank(rank);
    h.set_incarnation(incarnation);
    h.set_clock(std::max(p.step, resume_at));  // a restarted worker never reports less than its rank reached
    h.set_loss(p.loss);
    h.set_samples(p.samples);
    h.set_compression_warning(p.compression_warning);
    h.set_step_seconds(p.step_seconds);
    h.set_step_push_seconds(p.step_push_seconds);
    h.set_step_encode_seconds(p.step_encode_seconds);
    h.set_density(p.density);
    h.set_barrier_exempt(p.barrier_exempt);
    return h;
  };
  hb.on_state = [trainer, pause, aborted, over](const proto::ClusterState& st) {
    trainer->SetJobPace(st.median_step_seconds(), st.barrier_clock());  // the adaptive ratio's target
    pause->current()->OnClusterState(st);  // server failover: dead servers, replacements (client_failover.cc)
    pause->OnState(st);  // a scale step: the loop pauses at its next step boundary
    if (st.shutting_down()) over->store(true);
    if (st.shutting_down() && !st.failure().empty() && !aborted->exchange(true)) {
      OSPREY_LOG_ERROR("job is shutting down: {}", st.failure());
      pause->current()->Stop();
    }
  };
  hb.on_lost = [pause, aborted](const Status& why) {
    OSPREY_LOG_ERROR("lost the coordinator: {}", why.ToString());
    if (!aborted->exchange(true)) pause->current()->Stop();
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
  OSPREY_LOG_INFO("worker {} pushes acknowledged {}, requests re-sent {}", rank,
                  report.pushes_acked(), report.requests_resent());
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
  if (report.adaptive_ratio()) {
    OSPREY_LOG_INFO("worker {} adaptive ratio: density {:.4g} (range {:.4g}-{:.4g}, {} changes{}), own step "
                    "{:.1f} ms vs job median {:.1f} ms",
                    rank, report.adaptive_final_density(), report.adaptive_min_density(),
                    report.adaptive_max_density(), report.adaptive_changes(),
                    report.adaptive_cheap_select() ? ", sampled selection" : "",
                    1e3 * report.adaptive_step_seconds(), 1e3 * report.adaptive_median_step_seconds());
    if (report.adaptive_barrier_exits() > 0) {
      OSPREY_LOG_INFO("worker {} left the step barrier {} time(s): {} steps trained outside it, {} clocks skipped",
                      rank, report.adaptive_barrier_exits(), report.adaptive_steps_outside_barrier(),
                      report.adaptive_clocks_skipped());
    }
  }
}

// Init, train, the train-done barrier, evaluation and the report; returns the exit code.
// `rejoined`: a restarted worker, whose rank had reached `heard` (RegisterReply.resume_clock); it
// resumes where the servers are (worker/resume_plan.h), else at 0.
int TrainAndReport(worker::TrainLoop* trainer, coordinator::CoordinatorClient* coord, worker::Client* client,
                   const config::JobConfig& job, int rank, int num_workers, bool rejoined, int64_t heard,
                   const std::atomic<bool>& over) {
  OSPREY_LOG_INFO("worker {} of {}: {} steps of batch {}", rank, num_workers, job.train.steps,
                  job.train.batch_size);
  Status s = trainer->Init();
  if (!s.ok()) return Fail(s, "init");
  const int64_t resume_at = rejoined ? worker::PlanExactResume(client, rank, heard, job.train.steps).start : 0;
  s = trainer->ResumeAt(resume_at);
  if (!s.ok()) return Fail(s, "resume");
  s = trainer->Run([rank](const worker::Progress& p) {
    OSPREY_LOG_INFO("worker {} step {} loss {:.9g}", rank, p.step, p.loss);  // full precision: runs compare
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
  report.set_pushes_acked(cs.pushes_acked);
  report.set_requests_resent(client->requests_resent());
  if (client->pushes_suppressed() > 0) {
    OSPREY_LOG_INFO("worker {}: {} replayed pushes not sent (the servers had them)", rank, client->pushes_suppressed());
  }
  trainer->FillReport(&report);
  LogReport(report, rank, cs);
  // A report sent while the coordinator is away is re-sent once it is back (coordinator_client.h).
  s = coord->Report(report, std::max(job.client.timeout_ms, job.cluster.coordinator_outage_ms +
                                                                job.cluster.heartbeat_timeout_ms));
  if (!s.ok()) return Fail(s, "report");
  // Coordinator restart: stay (heartbeating) until the job is over or two heartbeat intervals
  // passed, so the servers' heartbeats carry this report on and a coordinator restarted meanwhile
  // learns it from them (job_state_recover.cc) instead of waiting for this worker.
  if (job.cluster.coordinator_outage_ms > 0) {
    const auto until = std::chrono::steady_clock::now() +
                       std::chrono::milliseconds(2 * job.cluster.heartbeat_interval_ms);
    while (!over.load() && std::chrono::steady_clock::now() < until) {
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
  }
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
  const Status pinned = PinProcessToList(job.cluster.worker_cpus);  // before any thread exists
  (void)InitLogging(job.log_level, "worker");
  if (!pinned.ok()) {
    (void)Fail(pinned, "cluster.worker_cpus");
    return 2;  // a config error: the launcher does not restart it
  }
  if (!job.cluster.worker_cpus.empty()) OSPREY_LOG_INFO("runs on CPUs {}", FormatCpuList(AllowedCpus()));
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
  const uint64_t incarnation = ProcessIncarnation();  // a restart (same rank) supersedes the old process
  auto reg = Register(coord->get(), job, flags.rank, exposer ? exposer->url() : "", incarnation);
  if (!reg.ok()) return Fail(reg.status(), "register");
  const int rank = reg->rank();
  if (reg->rejoined()) {
    OSPREY_LOG_WARN("worker {} rejoined the running job (incarnation {:x}); its rank had reached step {}", rank,
                    incarnation, reg->resume_clock());
  }
  const int num_workers = reg->num_workers();

  worker::ClientOptions copts;
  copts.worker_rank = rank;
  copts.timeout_ms = job.client.timeout_ms;
  copts.max_inflight = job.client.max_inflight;
  copts.push_part_bytes = job.client.push_part_bytes;
  copts.pull_part_bytes = job.client.pull_part_bytes;
  copts.receive_in_wait = job.client.receive_in_wait;
  copts.incarnation = ProcessIncarnation();
  copts.replace_timeout_ms = job.cluster.server_replace_timeout_ms;
  // Data plane per cluster.transport (rdma too); the coordinator stays on ZeroMQ (data_transport.h).
  auto dtransport = rdma::MakeDataTransport(job, *data_options);
  if (!dtransport.ok()) return Fail(dtransport.status(), "transport");
  if (rank == job.worker.debug_throttle_rank && job.worker.debug_throttle_bytes_per_sec > 0) {
    // Test-only slow uplink (adaptive_ratio's test and benchmark): this worker's pushes crawl.
    OSPREY_LOG_WARN("worker {}: worker.debug_throttle_bytes_per_sec = {}: pushes throttled (test only)", rank,
                    job.worker.debug_throttle_bytes_per_sec);
    *dtransport = std::make_unique<ThrottledTransport>(std::move(*dtransport), job.worker.debug_throttle_bytes_per_sec);
  }
  worker::Client client(copts, std::move(*dtransport), reg->shard_map());
  client.SetRollbackGeneration(reg->rollback_generation());  // bsp rollback: a later-started worker
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
  // Elastic servers: at a scale step the loop pauses and goes on with a client of the new map.
  worker::ScalePause pause(
      rank, &client,
      [c = coord->get()](const proto::ScaleRequest& r) { return c->Scale(r, 600000); },
      [&](const proto::ShardMap& map) -> StatusOr<std::unique_ptr<worker::Client>> {
        OSPREY_ASSIGN_OR_RETURN(auto t, rdma::MakeDataTransport(job, *data_options));
        // The new client numbers its requests from 1 again: a data-plane incarnation of its own
        // (per shard-map epoch) keeps the servers' dedup window (server/push_dedup.h) from taking
        // its pushes for re-sends of the old client's.
        worker::ClientOptions next_options = copts;
        next_options.incarnation = Mix64(copts.incarnation ^ map.epoch());
        if (next_options.incarnation == 0) next_options.incarnation = 1;
        auto next = std::make_unique<worker::Client>(next_options, std::move(t), map);
        OSPREY_RETURN_IF_ERROR(next->Start());
        return next;
      });
  trainer->SetStepBoundary(&pause);
  std::atomic<bool> aborted{false};
  const int64_t resume_at = reg->rejoined() ? reg->resume_clock() : 0;
  std::atomic<bool> over{false};  // the coordinator says the job is shutting down
  s = StartHeartbeats(coord->get(), job, rank, incarnation, resume_at, trainer.get(), &pause, &aborted, &over);
  if (!s.ok()) return Fail(s, "heartbeats");
  const int rc = TrainAndReport(trainer.get(), coord->get(), pause.current(), job, rank, num_workers, reg->rejoined(),
                               resume_at, over);
  // Joins the heartbeat thread first: its on_lost may be stopping the client right now.
  (*coord)->Stop();
  pause.current()->Stop();
  client.Stop();
  return rc;
}
