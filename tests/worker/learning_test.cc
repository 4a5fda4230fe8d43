// End-to-end learning checks: models trained with plain SGD in-process (no parameter server) on
// the synthetic planted-model data must recover most of the oracle's AUC on held-out data.
#include <gtest/gtest.h>

#include <chrono>

#include "tests/worker/local_trainer.h"
#include "worker/data/metrics.h"
#include "worker/data/synthetic.h"
#include "worker/models/model_factory.h"

namespace osprey::models {
namespace {

struct LearningRun {
  double auc = 0;
  double oracle_auc = 0;
  double seconds = 0;
};

LearningRun Train(const std::string& type, int steps, float dense_lr, float sparse_lr, float row_init_std) {
  const data::SyntheticConfig data_config;
  ModelConfig model_config;
  model_config.type = type;
  auto model = MakeModel(model_config);
  EXPECT_TRUE(model.ok()) << model.status().ToString();
  auto train = data::SyntheticGenerator::Make(data_config, /*stream_id=*/0);
  auto eval = data::SyntheticGenerator::Make(data_config, data::SyntheticGenerator::kEvalStreamId);
  EXPECT_TRUE(train.ok() && eval.ok());
  data::Batch eval_batch;
  (*eval)->NextBatch(20000, &eval_batch);

  const auto start = std::chrono::steady_clock::now();
  test_util::LocalTrainer trainer(model->get(), /*seed=*/1, dense_lr, sparse_lr, row_init_std);
  data::Batch batch;
  for (int step = 0; step < steps; ++step) {
    (*train)->NextBatch(256, &batch);
    trainer.Step(batch);
  }
  const std::vector<float> probs = trainer.Predict(eval_batch);
  LearningRun run;
  run.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  run.auc = data::Auc(probs.data(), eval_batch.labels.data(), eval_batch.size);
  run.oracle_auc = data::Auc(eval_batch.oracle_prob.data(), eval_batch.labels.data(), eval_batch.size);
  std::printf("%s: %d steps of 256 in %.1f s: eval AUC %.4f, oracle AUC %.4f (%.1f%%)\n", type.c_str(), steps,
              run.seconds, run.auc, run.oracle_auc, 100 * run.auc / run.oracle_auc);
  return run;
}

TEST(LearningTest, LogisticRegressionLearnsThePlantedModel) {
  const LearningRun run = Train("lr", 500, 0.05f, 5.0f, 0.0f);
  EXPECT_GE(run.auc, 0.9 * run.oracle_auc);
}

TEST(LearningTest, DlrmLearnsThePlantedModel) {
  const LearningRun run = Train("dlrm", 500, 0.05f, 5.0f, 0.05f);
  EXPECT_GE(run.auc, 0.9 * run.oracle_auc);
}

}  // namespace
}  // namespace osprey::models
