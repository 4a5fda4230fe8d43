// A whole Osprey cluster in one process: 2 servers and 2 training workers over the in-process
// transport (no coordinator: the test hands out ranks and the shard map itself).
#include <gtest/gtest.h>

#include <thread>

#include "common/config/job_config.h"
#include "tests/testing/cluster_fixture.h"
#include "worker/client/client.h"
#include "worker/trainer.h"

namespace osprey {
namespace {

TEST(InprocClusterTest, TwoServersTwoWorkersLearnThePlantedModel) {
  const char* src = std::getenv("OSPREY_SOURCE_DIR");
  ASSERT_NE(src, nullptr);
  auto job = config::LoadJobConfig(std::string(src) + "/configs/local.yaml",
                                   {"train.eval_samples=10000"});
  ASSERT_TRUE(job.ok()) << job.status().ToString();
  testing::InprocCluster cluster(2, job->tables);
  ASSERT_TRUE(cluster.ActivateAll().ok());

  const int kWorkers = 2;
  std::vector<std::unique_ptr<worker::Client>> clients;
  std::vector<std::unique_ptr<worker::Trainer>> trainers;
  for (int r = 0; r < kWorkers; ++r) {
    worker::ClientOptions o;
    o.worker_rank = r;
    clients.push_back(std::make_unique<worker::Client>(o, cluster.NewTransport(), cluster.map()));
    ASSERT_TRUE(clients.back()->Start().ok());
    trainers.push_back(std::make_unique<worker::Trainer>(*job, r, kWorkers, clients.back().get()));
    ASSERT_TRUE(trainers.back()->Init().ok());
  }
  std::vector<Status> results(kWorkers);
  std::vector<std::thread> threads;
  for (int r = 0; r < kWorkers; ++r) {
    threads.emplace_back([&, r] { results[r] = trainers[r]->Run(nullptr); });
  }
  for (auto& t : threads) t.join();
  for (int r = 0; r < kWorkers; ++r) ASSERT_TRUE(results[r].ok()) << results[r].ToString();
  EXPECT_EQ(trainers[0]->progress().step, job->train.steps);

  auto eval = trainers[0]->Evaluate();
  ASSERT_TRUE(eval.ok()) << eval.status().ToString();
  EXPECT_EQ(eval->samples, 10000u);
  EXPECT_GT(eval->oracle_auc, 0.7);
  std::printf("AUC %.4f oracle %.4f ratio %.3f\n", eval->auc, eval->oracle_auc, eval->auc / eval->oracle_auc);
  EXPECT_GE(eval->auc, 0.9 * eval->oracle_auc) << "AUC " << eval->auc << " oracle " << eval->oracle_auc;
  EXPECT_LT(eval->logloss, 0.69);  // better than predicting 0.5
  // Both servers did work, and no request was rejected.
  for (int s = 0; s < 2; ++s) {
    EXPECT_GT(cluster.server(s).stats().pushes_applied, 0u);
    EXPECT_EQ(cluster.server(s).stats().bad_requests, 0u);
  }
}

}  // namespace
}  // namespace osprey
