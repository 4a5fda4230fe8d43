#include "coordinator/coordinator_metrics.h"

#include <memory>
#include <string>
#include <vector>

#include "common/mutex.h"

namespace osprey::coordinator {
namespace {

const char* RoleLabel(proto::Role role) { return role == proto::ROLE_SERVER ? "server" : "worker"; }

// One sample per worker node of the coordinator's state, labelled by rank, valued by `value`.
template <typename ValueFn>
std::vector<metrics::Sample> PerWorker(const Coordinator* coord, ValueFn value) {
  std::vector<metrics::Sample> out;
  const proto::ClusterState state = coord->State();  // the loop reads into it
  for (const proto::NodeState& n : state.nodes()) {
    if (n.role() != proto::ROLE_WORKER) continue;
    metrics::Sample s;
    s.labels = {{"rank", std::to_string(n.rank())}};
    s.value = static_cast<double>(value(n));
    out.push_back(s);
  }
  return out;
}

// The scrape callbacks' tracker: each scrape feeds it the live workers' sample counts.
struct SharedTracker {
  explicit SharedTracker(double baseline) : tracker(baseline) {}
  Mutex mu;
  ThroughputTracker tracker GUARDED_BY(mu);

  void Refresh(const Coordinator* coord) REQUIRES(mu) {
    const proto::ClusterState state = coord->State();
    const auto now = ThroughputTracker::Clock::now();
    for (const proto::NodeState& n : state.nodes()) {
      if (n.role() != proto::ROLE_WORKER) continue;
      if (n.alive()) {
        tracker.Observe(n.rank(), n.samples(), now);
      } else {
        tracker.Forget(n.rank());
      }
    }
  }
};

}  // namespace

void ExportCoordinatorMetrics(const Coordinator* coord, metrics::Registry* registry,
                              double single_worker_samples_per_sec) {
  using metrics::Kind;
  using metrics::Sample;
  auto shared = std::make_shared<SharedTracker>(single_worker_samples_per_sec);
  registry->AddCallback(Kind::kGauge, "osprey_coordinator_worker_samples_per_second",
                        "A live worker's samples/s, averaged since it started training.", [coord, shared] {
    MutexLock lock(&shared->mu);
    shared->Refresh(coord);
    std::vector<Sample> out;
    for (const auto& [rank, rate] : shared->tracker.Rates()) {
      Sample s;
      s.labels = {{"rank", std::to_string(rank)}};
      s.value = rate;
      out.push_back(s);
    }
    return out;
  });
  registry->AddCallback(Kind::kGauge, "osprey_coordinator_scaling_efficiency",
                        "Mean worker samples/s over one worker's (metrics.single_worker_samples_per_sec, "
                        "else the fastest worker's).", [coord, shared] {
    MutexLock lock(&shared->mu);
    shared->Refresh(coord);
    std::vector<Sample> out;
    if (std::optional<double> e = shared->tracker.Efficiency()) {
      Sample s;
      s.value = *e;
      out.push_back(s);
    }
    return out;
  });
  registry->AddCallback(Kind::kGauge, "osprey_coordinator_nodes",
                        "Registered nodes by role and liveness.", [coord] {
    int counts[2][2] = {{0, 0}, {0, 0}};  // [server?][alive?]
    const proto::ClusterState state = coord->State();  // the loop reads into it
    for (const proto::NodeState& n : state.nodes()) {
      ++counts[n.role() == proto::ROLE_SERVER ? 1 : 0][n.alive() ? 1 : 0];
    }
    std::vector<Sample> out;
    for (int server = 0; server < 2; ++server) {
      for (int alive = 0; alive < 2; ++alive) {
        Sample s;
        s.labels = {{"role", server ? "server" : "worker"}, {"state", alive ? "live" : "dead"}};
        s.value = counts[server][alive];
        out.push_back(s);
      }
    }
    return out;
  });
  registry->AddValue(Kind::kGauge, "osprey_coordinator_epoch", "Epoch of the shard map.",
                     [coord] { return static_cast<double>(coord->State().epoch()); });
  registry->AddValue(Kind::kGauge, "osprey_coordinator_barrier_waiters",
                     "Requests waiting at a barrier now.",
                     [coord] { return static_cast<double>(coord->barrier_waiters()); });
  registry->AddValue(Kind::kCounter, "osprey_coordinator_bad_requests_total",
                     "Malformed or refused messages.",
                     [coord] { return static_cast<double>(coord->bad_requests()); });
  registry->AddValue(Kind::kGauge, "osprey_coordinator_worker_reports",
                     "Final worker reports received.",
                     [coord] { return static_cast<double>(coord->State().reports_size()); });
  registry->AddCallback(Kind::kGauge, "osprey_coordinator_heartbeat_age_seconds",
                        "Seconds since the node's last heartbeat (its heartbeat lag).", [coord] {
    std::vector<Sample> out;
    for (const JobState::HeartbeatAge& a : coord->HeartbeatAges()) {
      Sample s;
      s.labels = {{"role", RoleLabel(a.role)}, {"rank", std::to_string(a.rank)}};
      s.value = a.seconds;
      out.push_back(s);
    }
    return out;
  });
  registry->AddCallback(Kind::kGauge, "osprey_coordinator_node_clock",
                        "A worker's step, from its heartbeats.", [coord] {
    return PerWorker(coord, [](const proto::NodeState& n) { return n.clock(); });
  });
  registry->AddCallback(Kind::kCounter, "osprey_coordinator_node_samples_total",
                        "A worker's samples trained, from its heartbeats.", [coord] {
    return PerWorker(coord, [](const proto::NodeState& n) { return n.samples(); });
  });
}

}  // namespace osprey::coordinator
