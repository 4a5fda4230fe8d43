// A whole Osprey cluster in one process: 2 servers and 2 training workers over the in-process
// transport (no coordinator: the test hands out ranks and the shard map itself).
#include <gtest/gtest.h>

#include <thread>

#include "job/job_config.h"
#include "tests/testing/inproc_training.h"
#include "tests/testing/test_env.h"

namespace osprey {
namespace {

TEST(InprocClusterTest, TwoServersTwoWorkersLearnThePlantedModel) {
  const char* src = testing::SourceDirFromEnv();
  ASSERT_NE(src, nullptr);
  auto job = config::LoadJobConfig(std::string(src) + "/configs/local.yaml",
                                   {"train.eval_samples=10000"});
  ASSERT_TRUE(job.ok()) << job.status().ToString();
  testing::InprocTraining training(*job, /*servers=*/2, /*workers=*/2);
  Status init = training.Init();
  ASSERT_TRUE(init.ok()) << init.ToString();
  Status run = training.RunAll();
  ASSERT_TRUE(run.ok()) << run.ToString();
  EXPECT_EQ(training.trainer(0).progress().step, job->train.steps);

  auto eval = training.trainer(0).Evaluate();
  ASSERT_TRUE(eval.ok()) << eval.status().ToString();
  EXPECT_EQ(eval->samples, 10000u);
  EXPECT_GT(eval->oracle_auc, 0.7);
  std::printf("AUC %.4f oracle %.4f ratio %.3f\n", eval->auc, eval->oracle_auc, eval->auc / eval->oracle_auc);
  EXPECT_GE(eval->auc, 0.9 * eval->oracle_auc) << "AUC " << eval->auc << " oracle " << eval->oracle_auc;
  EXPECT_LT(eval->logloss, 0.69);  // better than predicting 0.5
  // Both servers did work, and no request was rejected.
  for (int s = 0; s < 2; ++s) {
    EXPECT_GT(training.cluster().server(s).stats().pushes_applied, 0u);
    EXPECT_EQ(training.cluster().server(s).stats().bad_requests, 0u);
  }
}

}  // namespace
}  // namespace osprey
