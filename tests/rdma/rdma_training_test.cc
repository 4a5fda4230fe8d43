// The default model (configs/local.yaml) trained by a whole in-process job -- the coordinator, 2
// servers and 1 or 2 workers, each doing what its main does (CoordinatedTraining) -- with the data
// plane over RdmaTransport on the loopback verbs (the test double: no RDMA NIC here), against the
// same job with the data plane over the in-process transport. The control plane is the
// in-process transport in both (the binaries keep it on ZeroMQ: data_transport.h). With one
// worker a run is bit-for-bit repeatable (pushes reach each server in program order), so the AUC
// must be equal; with two async workers the interleaving alone moves
// the AUC by ~0.001 between identical runs (compression_convergence_test measured it).
#include <gtest/gtest.h>

#include <cstdio>

#include "common/rdma/loopback_verbs_for_testing.h"
#include "common/rdma/rdma_transport.h"
#include "job/job_config.h"
#include "tests/testing/coordinated_training.h"
#include "tests/testing/test_env.h"

namespace osprey {
namespace {

struct TrainRun {
  double auc = 0;
  uint64_t rdma_writes = 0;
};

TrainRun Train(bool rdma, int workers) {
  TrainRun out;
  const char* src = testing::SourceDirFromEnv();
  EXPECT_NE(src, nullptr);
  if (src == nullptr) return out;
  auto job = config::LoadJobConfig(std::string(src) + "/configs/local.yaml",
                                   {"train.eval_samples=10000", "train.steps=600"});
  EXPECT_TRUE(job.ok()) << job.status().ToString();
  if (!job.ok()) return out;
  auto fabric = std::make_shared<rdma::LoopbackFabricForTesting>();
  auto data_hub = std::make_shared<InprocHub>();
  testing::InprocCluster::TransportFactory factory = [data_hub]() -> std::unique_ptr<Transport> {
    return std::make_unique<InprocTransport>(data_hub);
  };
  testing::InprocCluster::EndpointOf endpoint_of = [](int s) {
    return "inproc://server-" + std::to_string(s);
  };
  if (rdma) {
    factory = [fabric]() -> std::unique_ptr<Transport> {
      return std::make_unique<rdma::RdmaTransport>(rdma::RdmaOptions{}, fabric->NewVerbs());
    };
    endpoint_of = [](int s) { return "rdma://server-" + std::to_string(s) + ":7000"; };
  }
  testing::CoordinatedTraining training(*job, /*servers=*/2, workers, factory, endpoint_of);
  Status run = training.Run(std::chrono::minutes(4));
  EXPECT_TRUE(run.ok()) << run.ToString();
  out.auc = training.auc();
  EXPECT_EQ(training.server_bad_requests(), 0u);
  out.rdma_writes = fabric->writes();
  return out;
}

TEST(RdmaTrainingTest, OneWorkerOverRdmaLoopbackMatchesInprocExactly) {
  TrainRun inproc = Train(false, 1), rdma = Train(true, 1);
  std::printf("1 worker: inproc AUC %.5f, rdma-on-loopback AUC %.5f (%llu RDMA writes)\n",
              inproc.auc, rdma.auc, static_cast<unsigned long long>(rdma.rdma_writes));
  EXPECT_GT(inproc.auc, 0.7);
  EXPECT_EQ(rdma.auc, inproc.auc);
  EXPECT_GT(rdma.rdma_writes, 1000u);  // it did go over the rdma transport
}

TEST(RdmaTrainingTest, TwoWorkersOverRdmaLoopbackReachTheSameAuc) {
  TrainRun inproc = Train(false, 2), rdma = Train(true, 2);
  std::printf("2 workers: inproc AUC %.5f, rdma-on-loopback AUC %.5f\n", inproc.auc, rdma.auc);
  EXPECT_GT(inproc.auc, 0.7);
  EXPECT_NEAR(rdma.auc, inproc.auc, 0.005);
}

}  // namespace
}  // namespace osprey
