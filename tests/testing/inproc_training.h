// InprocTraining: a whole training cluster in one process for integration tests -- N servers over
// the in-process transport and M workers (Client + Trainer), each worker trained on its own thread.
//
//   testing::InprocTraining t(job, /*servers=*/2, /*workers=*/2);
//   ASSERT_TRUE(t.Init().ok());
//   ASSERT_TRUE(t.RunAll().ok());
//   auto eval = t.trainer(0).Evaluate();
#pragma once

#include <memory>
#include <thread>
#include <vector>

#include "job/job_config.h"
#include "tests/testing/cluster_fixture.h"
#include "worker/client/client.h"
#include "worker/trainer.h"

namespace osprey::testing {

class InprocTraining {
 public:
  // `job` must outlive this object (trainers borrow it).
  // `factory` / `endpoint_of`: another transport (see InprocCluster); default in-process.
  InprocTraining(const config::JobConfig& job, int servers, int workers,
                 InprocCluster::TransportFactory factory = nullptr,
                 InprocCluster::EndpointOf endpoint_of = nullptr)
      : job_(job),
        cluster_(servers, job.tables, std::move(factory), std::move(endpoint_of)),
        workers_(workers) {}
  ~InprocTraining() {
    trainers_.clear();
    for (auto& c : clients_) c->Stop();
  }

  // Activates the servers, starts every client and initializes every trainer.
  Status Init() {
    OSPREY_RETURN_IF_ERROR(cluster_.ActivateAll());
    for (int r = 0; r < workers_; ++r) {
      worker::ClientOptions o;
      o.worker_rank = r;
      clients_.push_back(std::make_unique<worker::Client>(o, cluster_.NewTransport(), cluster_.map()));
      OSPREY_RETURN_IF_ERROR(clients_.back()->Start());
      trainers_.push_back(std::make_unique<worker::Trainer>(job_, r, workers_, clients_.back().get()));
      OSPREY_RETURN_IF_ERROR(trainers_.back()->Init());
    }
    return Status::OK();
  }

  // Runs job.train.steps on every worker concurrently; the first error of any worker.
  Status RunAll() {
    std::vector<Status> results(workers_);
    std::vector<std::thread> threads;
    for (int r = 0; r < workers_; ++r) {
      threads.emplace_back([this, &results, r] { results[r] = trainers_[r]->Run(nullptr); });
    }
    for (auto& t : threads) t.join();
    for (int r = 0; r < workers_; ++r) {
      if (!results[r].ok()) return results[r].WithContext("worker " + std::to_string(r));
    }
    return Status::OK();
  }

  worker::Trainer& trainer(int r) { return *trainers_[r]; }
  worker::Client& client(int r) { return *clients_[r]; }
  InprocCluster& cluster() { return cluster_; }
  int workers() const { return workers_; }

 private:
  const config::JobConfig& job_;
  InprocCluster cluster_;
  const int workers_;
  std::vector<std::unique_ptr<worker::Client>> clients_;
  std::vector<std::unique_ptr<worker::Trainer>> trainers_;
};

}  // namespace osprey::testing
