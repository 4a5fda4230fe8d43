// CoordinatedTraining: a whole job in one process -- the real Coordinator, N servers and M workers
// (Client + Trainer), each node on its own thread doing what its main does: register with the
// coordinator (which hands out ranks and the shard map), heartbeat, train, meet at the
// "train-done" barrier, evaluate (rank 0) and report; servers serve until the coordinator says
// the job is over. The control plane (every node <-> the coordinator) is the in-process
// transport, standing in for the binaries' ZeroMQ tcp; the data plane (workers <-> servers) is
// whatever `factory` makes (tests/rdma: RdmaTransport over the loopback verbs), as InprocCluster.
//
//   testing::CoordinatedTraining t(job, /*servers=*/2, /*workers=*/2, factory, endpoint_of);
//   ASSERT_TRUE(t.Run(std::chrono::minutes(5)).ok());
//   double auc = t.auc();
#pragma once

#include <atomic>
#include <chrono>
#include <future>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "common/inproc_transport.h"
#include "coordinator/coordinator.h"
#include "coordinator/coordinator_client.h"
#include "job/job_config.h"
#include "server/server.h"
#include "tests/testing/cluster_fixture.h"
#include "worker/client/client.h"
#include "worker/trainer.h"

namespace osprey::testing {

class CoordinatedTraining {
 public:
  CoordinatedTraining(config::JobConfig job, int servers, int workers,
                      InprocCluster::TransportFactory factory,
                      InprocCluster::EndpointOf endpoint_of)
      : job_(std::move(job)), factory_(std::move(factory)), endpoint_of_(std::move(endpoint_of)) {
    job_.cluster.num_servers = servers;
    job_.cluster.num_workers = workers;
  }

  // Runs the job to its end: OK when the coordinator says it succeeded within `timeout` and no
  // node failed; else the first failure (naming the node).
  Status Run(std::chrono::milliseconds timeout) {
    coordinator::Coordinator coord(job_, std::make_unique<InprocTransport>(hub_));
    OSPREY_ASSIGN_OR_RETURN(std::string coord_ep, coord.Start("inproc://coordinator"));
    const int n = job_.cluster.num_servers + job_.cluster.num_workers;
    std::vector<Status> results(static_cast<size_t>(n));
    std::vector<std::thread> nodes;
    for (int i = 0; i < job_.cluster.num_servers; ++i) {
      nodes.emplace_back([&, i] { results[i] = ServeOne(i, coord_ep, timeout); });
    }
    for (int w = 0; w < job_.cluster.num_workers; ++w) {
      nodes.emplace_back([&, w] {
        results[job_.cluster.num_servers + w] = TrainOne(coord_ep, timeout);
      });
    }
    Status job = coord.WaitFor(timeout);
    for (auto& t : nodes) t.join();
    coord.Stop();
    for (int i = 0; i < n; ++i) {
      if (!results[i].ok()) return results[i].WithContext("node " + std::to_string(i));
    }
    return job;
  }

  double auc() const { return auc_; }
  uint64_t server_bad_requests() const { return bad_requests_; }

 private:
  StatusOr<std::unique_ptr<coordinator::CoordinatorClient>> NewCoordClient(const std::string& ep) {
    return coordinator::CoordinatorClient::Create(std::make_unique<InprocTransport>(hub_), ep);
  }
  int TimeoutMs(std::chrono::milliseconds t) const { return static_cast<int>(t.count()); }

  // One server: listen, register, activate with the coordinator's shard map, serve until the
  // coordinator's state says the job is shutting down.
  Status ServeOne(int i, const std::string& coord_ep, std::chrono::milliseconds timeout) {
    auto store = server::MakeStore("native");
    OSPREY_RETURN_IF_ERROR(store.status());
    server::Server srv(factory_(), std::move(*store));
    OSPREY_ASSIGN_OR_RETURN(std::string bound, srv.Listen(endpoint_of_(i)));
    OSPREY_ASSIGN_OR_RETURN(auto coord, NewCoordClient(coord_ep));
    proto::RegisterRequest req;
    req.set_role(proto::ROLE_SERVER);
    req.set_endpoint(bound);
    req.set_host("localhost");
    req.set_requested_rank(-1);
    OSPREY_ASSIGN_OR_RETURN(proto::RegisterReply reg, coord->Register(req, TimeoutMs(timeout)));
    std::vector<int> workers;
    for (int w = 0; w < reg.num_workers(); ++w) workers.push_back(w);
    srv.SetLiveWorkers(workers);
    OSPREY_RETURN_IF_ERROR(srv.Activate(reg.rank(), reg.shard_map(), job_.tables));
    auto over = std::make_shared<std::promise<void>>();
    auto told = std::make_shared<std::atomic<bool>>(false);
    coordinator::HeartbeatOptions hb;
    hb.interval_ms = job_.cluster.heartbeat_interval_ms;
    hb.timeout_ms = job_.cluster.heartbeat_timeout_ms;
    const int rank = reg.rank();
    hb.fill = [rank] {
      proto::Heartbeat h;
      h.set_role(proto::ROLE_SERVER);
      h.set_rank(rank);
      return h;
    };
    hb.on_state = [over, told](const proto::ClusterState& st) {
      if (st.shutting_down() && !told->exchange(true)) over->set_value();
    };
    OSPREY_RETURN_IF_ERROR(coord->StartHeartbeats(hb));
    const bool ended = over->get_future().wait_for(timeout) == std::future_status::ready;
    bad_requests_ += srv.stats().bad_requests;
    coord->Stop();
    srv.Stop();
    return ended ? Status::OK() : DeadlineExceeded("server never saw the job end");
  }

  // One worker: register, train through a Client on the data transport, barrier, evaluate (rank
  // 0), report.
  Status TrainOne(const std::string& coord_ep, std::chrono::milliseconds timeout) {
    OSPREY_ASSIGN_OR_RETURN(auto coord, NewCoordClient(coord_ep));
    proto::RegisterRequest req;
    req.set_role(proto::ROLE_WORKER);
    req.set_host("localhost");
    req.set_requested_rank(-1);
    OSPREY_ASSIGN_OR_RETURN(proto::RegisterReply reg, coord->Register(req, TimeoutMs(timeout)));
    worker::ClientOptions o;
    o.worker_rank = reg.rank();
    worker::Client client(o, factory_(), reg.shard_map());
    OSPREY_RETURN_IF_ERROR(client.Start());
    Status st = TrainWith(coord.get(), &client, reg, timeout);
    coord->Stop();
    client.Stop();
    return st;
  }

  Status TrainWith(coordinator::CoordinatorClient* coord, worker::Client* client,
                   const proto::RegisterReply& reg, std::chrono::milliseconds timeout) {
    const int rank = reg.rank();
    worker::Trainer trainer(job_, rank, reg.num_workers(), client);
    OSPREY_RETURN_IF_ERROR(trainer.Init());
    coordinator::HeartbeatOptions hb;
    hb.interval_ms = job_.cluster.heartbeat_interval_ms;
    hb.timeout_ms = job_.cluster.heartbeat_timeout_ms;
    hb.fill = [rank, &trainer] {
      proto::Heartbeat h;
      h.set_role(proto::ROLE_WORKER);
      h.set_rank(rank);
      h.set_clock(trainer.progress().step);
      return h;
    };
    OSPREY_RETURN_IF_ERROR(coord->StartHeartbeats(hb));
    Status st = trainer.Run(nullptr);
    if (st.ok()) st = coord->Barrier("train-done", proto::ROLE_WORKER, rank, TimeoutMs(timeout));
    proto::WorkerReport report;
    report.set_rank(rank);
    report.set_steps(trainer.progress().step);
    if (st.ok() && rank == 0) {
      StatusOr<worker::EvalResult> eval = trainer.Evaluate();
      st = eval.status();
      if (eval.ok()) auc_ = eval->auc;
      report.set_auc(auc_);
    }
    if (st.ok()) st = coord->Report(report, TimeoutMs(timeout));
    // A failed worker ends the job now (the others would wait for it at the barrier).
    if (!st.ok()) (void)coord->RequestShutdown("worker " + std::to_string(rank) + ": " +
                                               st.ToString(), 1000);
    coord->Stop();  // heartbeats read the trainer: stop them before it goes
    return st;
  }

  config::JobConfig job_;
  InprocCluster::TransportFactory factory_;
  InprocCluster::EndpointOf endpoint_of_;
  std::shared_ptr<InprocHub> hub_ = std::make_shared<InprocHub>();
  double auc_ = 0;                          // written by rank 0's thread before Run joins it
  std::atomic<uint64_t> bad_requests_{0};
};

}  // namespace osprey::testing
