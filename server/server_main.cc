// osprey-server: serves the shards of one server rank of a job.
//
//   osprey-server --config JOB.yaml [--set key=value]... [--listen ENDPOINT] [--restore DIR]
//                 [--rank N]
//
// Binds (tcp://HOST:0 or ipc://IPC_DIR/server-PID.sock unless --listen), registers with the
// coordinator, creates its shards, serves until the coordinator says the job is over, then sends
// its final statistics (OP_SERVER_REPORT; a coordinator that is gone costs a bounded wait and a
// warning, not a failure).
// Exit codes: 0 job finished, 1 runtime failure (coordinator lost, bind failed), 2 usage/config.
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <filesystem>
#include <thread>

#include "job/node_flags.h"
#include "common/incarnation.h"
#include "common/logging.h"
#include "common/cpu_affinity.h"
#include "common/malloc_tuning.h"
#include "common/rdma/data_transport.h"
#include "coordinator/coordinator_client.h"
#include "server/barrier_workers.h"
#include "server/redis/job_store.h"
#include "server/rollback_runner.h"
#include "server/scale_agent.h"
#include "server/server.h"
#include "server/server_metrics.h"
#include "common/metrics/metrics.h"

namespace {

std::atomic<bool> g_stop{false};  // set by SIGTERM/SIGINT
void OnSignal(int) { g_stop.store(true); }

std::string DefaultEndpoint(const osprey::config::ClusterConfig& c) {
  if (c.transport == "ipc") {
    return "ipc://" + c.ipc_dir + "/server-" + std::to_string(getpid()) + ".sock";
  }
  if (c.transport == "rdma") return osprey::rdma::DefaultRdmaEndpoint(c);
  return "tcp://" + c.host + ":0";
}

int Fail(const osprey::Status& s, const char* what) {
  OSPREY_LOG_ERROR("{}: {}", what, s.ToString());
  return 1;
}

// The final statistics the coordinator keeps for the launcher's report.
osprey::proto::ServerReport MakeServerReport(int rank, const osprey::server::ServerStatsSnapshot& st,
                                             const osprey::server::DecodeStats& ds) {
  osprey::proto::ServerReport r;
  r.set_rank(rank);
  osprey::proto::ServerStats* p = r.mutable_stats();
  p->set_requests(st.requests);
  p->set_bad_requests(st.bad_requests);
  p->set_bytes_in(st.bytes_in);
  p->set_bytes_out(st.bytes_out);
  p->set_pushes_applied(st.pushes_applied);
  p->set_pushes_dropped(st.pushes_dropped);
  p->set_rows_dropped(st.rows_dropped);
  p->set_rows_skipped(st.rows_skipped);
  p->set_windows_applied(st.windows_applied);
  p->set_pulls_held(st.pulls_held);
  p->set_dc_compensated(st.dc_compensated);
  p->set_dc_uncompensated(st.dc_uncompensated);
  p->set_refused(st.refused);
  p->set_auth_refused(st.auth_refused);
  p->set_rows_admitted(st.rows_admitted);
  p->set_gradients_not_admitted(st.gradients_not_admitted);
  p->set_rows_evicted_ttl(st.rows_evicted_ttl);
  p->set_rows_evicted_cap(st.rows_evicted_cap);
  for (uint64_t b : st.staleness) p->add_staleness_histogram(b);
  r.set_decoded_pushes(ds.frames.load());
  r.set_decode_bytes_encoded(ds.bytes_encoded.load());
  r.set_decode_bytes_decoded(ds.bytes_decoded.load());
  r.set_decode_seconds(static_cast<double>(ds.decode_nanos.load()) / 1e9);
  return r;
}

using namespace osprey;  // NOLINT: this file's helpers, as main

StatusOr<proto::RegisterReply> RegisterServer(coordinator::CoordinatorClient* coord,
                                              const std::string& endpoint, int rank,
                                              const std::string& metrics_endpoint, int timeout_ms,
                                              bool joining, bool bsp_rollback) {
  proto::RegisterRequest req;
  req.set_role(proto::ROLE_SERVER);
  req.set_endpoint(endpoint);
  req.set_host("localhost");
  req.set_pid(getpid());
  req.set_requested_rank(rank);
  req.set_sends_server_report(true);
  req.set_metrics_endpoint(metrics_endpoint);
  req.set_incarnation(ProcessIncarnation());
  req.set_joining(joining);
  req.set_bsp_rollback(bsp_rollback);
  return coord->Register(req, timeout_ms);
}

// Heartbeats that keep the server's live-worker set current and end the loop in main.
coordinator::HeartbeatOptions Heartbeats(const config::ClusterConfig& cluster, int rank,
                                         server::Server* srv, std::atomic<bool>* finished,
                                         std::atomic<bool>* lost, server::ScaleAgent* agent,
                                         server::RollbackRunner* rollback) {
  coordinator::HeartbeatOptions hb;
  hb.interval_ms = cluster.heartbeat_interval_ms;
  hb.timeout_ms = cluster.heartbeat_timeout_ms;
  hb.outage_ms = cluster.coordinator_outage_ms;  // serve on and re-register meanwhile
  hb.fill = [rank, srv] {
    proto::Heartbeat h;
    h.set_role(proto::ROLE_SERVER);
    h.set_rank(rank);
    h.set_incarnation(ProcessIncarnation());
    // What a replacement's restore is measured against (server failover): the busiest table's
    // optimizer steps (restored ones included) and the pushes this process applied.
    server::ServerStatsSnapshot st = srv->stats();
    h.set_clock(static_cast<int64_t>(srv->max_table_version()));
    h.set_samples(st.pushes_applied);
    h.set_rollback_acked(srv->rollback_acked());  // bsp rollback (server_rollback.cc)
    h.set_rollback_cut_clock(srv->rollback_cut_clock());
    return h;
  };
  hb.on_state = [srv, finished, agent, rollback](const proto::ClusterState& st) {
    if (st.shutting_down()) finished->store(true);
    rollback->Request(st);  // bsp rollback: reload the cut the coordinator names
    agent->OnState(st);  // a scale step: move this server's rows (scale_agent.h)
    // bsp windows and ssp bounds wait only for live workers that hold the barrier: a dead one,
    // or one that left it (adaptive_ratio.async_barrier), releases them.
    if (!st.nodes().empty()) {
      server::BarrierWorkers at = server::WorkersAtBarrier(st);
      srv->SetLiveWorkers(std::move(at.holding), std::move(at.left));
    }
  };
  hb.on_lost = [lost](const Status& why) {
    OSPREY_LOG_ERROR("lost the coordinator: {}", why.ToString());
    lost->store(true);
  };
  return hb;
}

// Server failover: what this replacement's restore lost against the old process's last
// heartbeat (the busiest table's optimizer steps; bsp: clocks), logged and in the ServerReport.
struct ReplacementLoss {
  bool replacement = false;
  uint64_t steps_lost = 0;
};
ReplacementLoss MeasureReplacement(const proto::RegisterReply& reg, server::Server* srv) {
  ReplacementLoss loss;
  if (!reg.replaced()) return loss;
  loss.replacement = true;
  const uint64_t restored = srv->max_table_version();
  loss.steps_lost = reg.replaced_steps() > restored ? reg.replaced_steps() - restored : 0;
  OSPREY_LOG_WARN("server {} is a replacement (shard-map epoch {}): restored to optimizer step {} of its "
                  "busiest table; the old process had reached step {} ({} pushes applied): {} steps "
                  "(bsp: clocks) lost since the checkpoint",
                  reg.rank(), reg.shard_map().epoch(), restored, reg.replaced_steps(), reg.replaced_pushes(),
                  loss.steps_lost);
  return loss;
}

void LogFinalStats(int rank, const server::ServerStatsSnapshot& st, const server::DecodeStats& ds) {
  OSPREY_LOG_INFO("server {} stopping: {} requests ({} bad: {} unparsable headers, {} beyond a "
                  "limit), {} pushes applied, {} MB in, {} MB out",
                  rank, st.requests, st.bad_requests, st.bad_headers, st.limit_refusals,
                  st.pushes_applied, st.bytes_in >> 20, st.bytes_out >> 20);
  std::string hist;
  for (size_t i = 0; i < st.staleness.size(); ++i) {
    if (st.staleness[i] == 0) continue;
    hist += (hist.empty() ? "" : ", ") +
            (i == 0 ? std::string("0") : "[" + std::to_string(1ull << (i - 1)) + "," +
                                             std::to_string(1ull << i) + ")") +
            ": " + std::to_string(st.staleness[i]);
  }
  OSPREY_LOG_INFO("server {}: {} optimizer steps, {} pulls held, {} pushes dropped, {} rows "
                  "dropped, {} rows skipped; push staleness (sparse rows, dense pushes) {{{}}}",
                  rank, st.windows_applied, st.pulls_held, st.pushes_dropped, st.rows_dropped,
                  st.rows_skipped, hist);
  if (st.apply_threads > 1) {
    OSPREY_LOG_INFO("server {}: {} optimizer steps spread over {} apply threads", rank,
                    st.windows_split, st.apply_threads);
  }
  if (st.dc_compensated + st.dc_uncompensated > 0) {
    OSPREY_LOG_INFO("server {}: DC-ASGD compensated {} rows/chunks, {} pushed without a "
                    "remembered pull", rank, st.dc_compensated, st.dc_uncompensated);
  }
  if (ds.frames.load() > 0) {
    OSPREY_LOG_INFO("server {} decoded {} compressed pushes: {} -> {} B in {:.1f} ms", rank,
                    ds.frames.load(), ds.bytes_encoded.load(), ds.bytes_decoded.load(),
                    ds.decode_nanos.load() / 1e6);
  }
}

}  // namespace

int main(int argc, char** argv) {
  using namespace osprey;
  CLI::App app{"osprey-server: serves parameter shards of an Osprey job"};
  config::NodeFlags flags;
  config::AddNodeFlags(&app, &flags);
  config::AddRankFlag(&app, &flags);
  std::string listen;
  app.add_option("--listen", listen, "endpoint to bind (default: from cluster.transport/host)");
  std::string restore;
  app.add_option("--restore", restore,
                 "checkpoint directory to resume from (any server count; refused if corrupt)");
  bool join = false;
  app.add_flag("--join", join, "join a running job at its next scale step (osprey scale)");
  config::JobConfig loaded;
  if (int rc = config::ParseFlagsAndLoad(&app, argc, argv, flags, "osprey-server", &loaded); rc >= 0) return rc;
  config::JobConfig* job = &loaded;
  TuneMallocForLargeMessages();
  const Status pinned = PinProcessToList(job->cluster.server_cpus);  // before any thread exists
  (void)InitLogging(job->log_level, "server");
  if (!pinned.ok()) {
    (void)Fail(pinned, "cluster.server_cpus");
    return 2;  // a config error: the launcher does not restart it
  }
  if (!job->cluster.server_cpus.empty()) OSPREY_LOG_INFO("runs on CPUs {}", FormatCpuList(AllowedCpus()));
  config::LogSecurityMode(job->security);
  std::signal(SIGTERM, OnSignal);
  std::signal(SIGINT, OnSignal);
  if (job->cluster.transport == "ipc") {
    std::error_code ec;
    std::filesystem::create_directories(job->cluster.ipc_dir, ec);
    if (ec) OSPREY_LOG_WARN("cannot create {}: {}", job->cluster.ipc_dir, ec.message());
  }

  auto listen_options = config::MakeTransportOptions(job->security, PeerRole::kServer,
                                                     PeerRole::kUnauthenticated);
  if (!listen_options.ok()) return Fail(listen_options.status(), "security");
  auto coord_options =
      config::MakeTransportOptions(job->security, PeerRole::kServer, PeerRole::kCoordinator);
  if (!coord_options.ok()) return Fail(coord_options.status(), "security");
  listen_options->max_message_bytes = static_cast<int64_t>(job->limits.max_frame_bytes);
  listen_options->io_threads = job->cluster.io_threads;
  // The data plane follows cluster.transport (rdma: RdmaTransport over the real device); the
  // coordinator connection below stays on ZeroMQ (common/rdma/data_transport.h says why).
  auto transport = rdma::MakeDataTransport(*job, *listen_options);
  if (!transport.ok()) return Fail(transport.status(), "transport");
  auto store = server::MakeJobStore(job->store);
  if (!store.ok()) return Fail(store.status(), "store");
  OSPREY_LOG_INFO("store: {}", config::StoreName(job->store));
  metrics::Registry registry;  // outlives srv, which counts into it
  server::Server srv(std::move(*transport), std::move(store->store));
  server::RollbackRunner rollback(&srv);  // joined before srv goes
  std::unique_ptr<metrics::Exposer> exposer;  // stops before srv, whose stats it reads
  if (job->metrics.enabled()) {
    srv.SetMetrics(&registry);
    server::ExportServerStats(&srv, &registry);
    auto started = metrics::Exposer::Start({job->metrics.bind, job->metrics.port}, &registry);
    if (!started.ok()) return Fail(started.status(), "metrics");
    exposer = std::move(*started);
  }
  srv.SetRolesRequired(job->security.mode == config::SecurityMode::kCurve);
  srv.SetLimits(job->limits);
  srv.SetApplyThreads(job->cluster.server_apply_threads);
  auto bound = srv.Listen(listen.empty() ? DefaultEndpoint(job->cluster) : listen);
  if (!bound.ok()) return Fail(bound.status(), "listen");

  auto ctransport = MakeTransport(*coord_options);
  if (!ctransport.ok()) return Fail(ctransport.status(), "transport");
  auto coord = coordinator::CoordinatorClient::Create(std::move(*ctransport), job->cluster.coordinator);
  if (!coord.ok()) return Fail(coord.status(), "coordinator");
  // A joining server waits for the scale step that takes it in (osprey scale), not just startup.
  // bsp rollback (issue 12): a replacement restoring a native-store bsp job asks every server to
  // go back to the newest common cut and the workers to rewind to it.
  bool bsp_tables = false;
  for (const config::TableConfig& t : job->tables) {
    bsp_tables = bsp_tables || t.consistency.mode == config::ConsistencyMode::kBsp;
  }
  const bool bsp_rollback = bsp_tables && !restore.empty() &&
                            job->store.type == config::StoreType::kNative;
  auto reg = RegisterServer(coord->get(), *bound, join ? -1 : flags.rank, exposer ? exposer->url() : "",
                            join ? std::max(job->cluster.startup_timeout_ms, 3600000)
                                 : job->cluster.startup_timeout_ms, join, bsp_rollback);
  if (!reg.ok()) return Fail(reg.status(), "register");
  // Every worker is live at the start (all registered before the reply); heartbeats update it.
  std::vector<int> workers(static_cast<size_t>(std::max(0, reg->num_workers())));
  for (size_t i = 0; i < workers.size(); ++i) workers[i] = static_cast<int>(i);
  srv.SetLiveWorkers(workers);
  srv.SetCheckpointConfig(job->checkpoint);
  if (!restore.empty()) srv.SetRestoreDir(restore);
  srv.SetReplacement(reg->replaced());
  if (bsp_rollback && reg->replaced() && reg->rollback_generation() > 0) {
    srv.SetBspRollback(reg->rollback_generation());
  }
  // Heartbeats from the registration on: a restore (a replacement's 1M rows take seconds) must
  // not look like a dead server to the coordinator.
  std::atomic<bool> finished{false};
  std::atomic<bool> lost{false};
  const int rank = reg->rank();
  server::ScaleAgent agent(&srv, coord->get(), [&] {
    auto dial = config::MakeTransportOptions(job->security, PeerRole::kServer, PeerRole::kServer);
    if (!dial.ok()) return StatusOr<std::unique_ptr<Transport>>(dial.status());
    return rdma::MakeDataTransport(*job, *dial);
  }, std::max(job->client.timeout_ms, job->cluster.startup_timeout_ms));
  coordinator::HeartbeatOptions hb =
      Heartbeats(job->cluster, rank, &srv, &finished, &lost, &agent, &rollback);
  Status s = (*coord)->StartHeartbeats(hb);
  if (!s.ok()) return Fail(s, "heartbeats");
  s = store->take_over(reg->rank());
  if (!s.ok()) return Fail(s, "store");
  s = srv.Activate(reg->rank(), reg->shard_map(), job->tables);
  if (!s.ok()) return Fail(s, "activate");
  OSPREY_LOG_INFO("server {} of {} serving on {}", reg->rank(), reg->num_servers(), *bound);
  const ReplacementLoss loss = MeasureReplacement(*reg, &srv);
  if (exposer) OSPREY_LOG_INFO("server {} metrics on {}", reg->rank(), exposer->url());

  while (!finished.load() && !lost.load() && !g_stop.load() && !agent.removed() && !rollback.failed()) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  if (lost.load() && agent.leaving()) agent.WaitDone();  // the reply may trail the heartbeat's
  if (agent.removed()) {  // scaled away: its rows live on the other servers now
    if (auto digest = srv.Digest(); digest.ok()) {
      OSPREY_LOG_INFO("server {} rows digest: {} rows, {} records, checksum {:016x}", rank,
                      digest->rows, digest->records, digest->checksum);
    }
    (*coord)->Stop();
    srv.Stop();
    return 0;
  }
  server::ServerStatsSnapshot st = srv.stats();
  const server::DecodeStats& ds = srv.decode_stats();
  LogFinalStats(rank, st, ds);
  // A write_back store's dirty rows first: the digest then counts every row.
  if (Status flushed = srv.FlushStore(); !flushed.ok()) {
    OSPREY_LOG_WARN("server {}: writing the store's unwritten rows at exit: {}", rank, flushed.ToString());
  }
  if (auto digest = srv.Digest(); digest.ok()) {  // what tests compare across scale steps
    OSPREY_LOG_INFO("server {} rows digest: {} rows, {} records, checksum {:016x}", rank,
                    digest->rows, digest->records, digest->checksum);
  }
  if (finished.load() && !lost.load()) {
    // The coordinator waits for this (at most heartbeat_timeout_ms after it began shutting
    // down), so waiting longer than that for the reply is pointless.
    const int timeout_ms = std::min(job->cluster.heartbeat_timeout_ms, job->client.timeout_ms);
    proto::ServerReport report = MakeServerReport(rank, st, ds);
    report.set_replacement(loss.replacement);
    report.set_steps_lost(loss.steps_lost);
    report.set_pushes_deduplicated(st.pushes_deduplicated);
    report.mutable_stats()->set_redis_unflushed_rows(srv.unflushed_rows());
    Status sent = (*coord)->ReportServer(report, timeout_ms);
    if (!sent.ok()) {
      OSPREY_LOG_WARN("server {}: final statistics not delivered to the coordinator: {}", rank,
                      sent.ToString());
    }
  }
  (*coord)->Stop();
  exposer.reset();
  srv.Stop();
  return lost.load() || rollback.failed() ? 1 : 0;
}
