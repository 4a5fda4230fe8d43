#include "worker/models/logistic.h"

#include <gtest/gtest.h>

#include <cmath>

#include "tests/worker/grad_check.h"

namespace osprey::models {
namespace {

TEST(LogisticRegressionTest, GradientsMatchFiniteDifferences) {
  LogisticConfig config;
  config.num_dense = 5;
  config.num_sparse = 6;
  auto made = LogisticRegression::Make(config);
  ASSERT_TRUE(made.ok());
  auto& model = *made;
  EXPECT_EQ(model->num_dense_params(), 6u);
  EXPECT_EQ(model->embedding_dim(), 1);

  const data::Batch batch = test_util::RandomBatch(7, config.num_dense, config.num_sparse, 3);
  std::vector<uint64_t> keys;
  std::vector<int32_t> row_index;
  data::DedupeKeys(batch, &keys, &row_index);
  data::Rng rng(4);
  std::vector<float> params(model->num_dense_params()), rows(keys.size() + 1);  // + one unused row
  for (float& p : params) p = static_cast<float>(0.3 * rng.NextNormal());
  for (float& r : rows) r = static_cast<float>(0.3 * rng.NextNormal());

  const auto result = test_util::CheckGradients(model.get(), batch, params, rows, row_index);
  EXPECT_EQ(result.failed, 0);
  EXPECT_EQ(result.skipped, 0) << "the logistic loss is smooth";

  std::vector<float> dense_grad(params.size()), row_grad(rows.size()), probs(batch.size), predicted(batch.size);
  model->ForwardBackward(params.data(), rows.data(), rows.size(), row_index.data(), batch, dense_grad.data(),
                         row_grad.data(), probs.data());
  EXPECT_EQ(row_grad.back(), 0.0f);
  model->Predict(params.data(), rows.data(), rows.size(), row_index.data(), batch, predicted.data());
  EXPECT_EQ(predicted, probs);
}

TEST(LogisticRegressionTest, KnownProbabilityAndZeroInit) {
  auto made = LogisticRegression::Make({/*num_dense=*/1, /*num_sparse=*/1});
  ASSERT_TRUE(made.ok());
  auto& model = *made;
  std::vector<float> params(2);
  model->InitDense(9, params.data());
  EXPECT_EQ(params, (std::vector<float>{0, 0}));
  params = {2.0f, -1.0f};  // w, bias
  const std::vector<float> rows = {0.5f};
  data::Batch batch;
  batch.size = 1;
  batch.num_dense = 1;
  batch.num_sparse = 1;
  batch.dense = {1.5f};
  batch.ids = {3};
  batch.labels = {1.0f};
  const int32_t row_index = 0;
  float prob = 0;
  model->Predict(params.data(), rows.data(), 1, &row_index, batch, &prob);
  EXPECT_NEAR(prob, 1.0 / (1.0 + std::exp(-(2.0 * 1.5 - 1.0 + 0.5))), 1e-6);
}

TEST(LogisticRegressionTest, ValidationNamesTheField) {
  auto bad = LogisticRegression::Make({/*num_dense=*/-1, /*num_sparse=*/3});
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("num_dense"), std::string::npos);
  auto bad2 = LogisticRegression::Make({/*num_dense=*/1, /*num_sparse=*/70000});
  ASSERT_FALSE(bad2.ok());
  EXPECT_NE(bad2.status().message().find("num_sparse"), std::string::npos);
}

}  // namespace
}  // namespace osprey::models
