#include "worker/models/dlrm.h"

#include <gtest/gtest.h>

#include <cmath>

#include "tests/worker/grad_check.h"
#include "worker/models/model_factory.h"

namespace osprey::models {
namespace {

using test_util::CheckGradients;
using test_util::RandomBatch;

DlrmConfig SmallConfig() {
  DlrmConfig config;
  config.num_dense = 3;
  config.num_sparse = 4;
  config.embedding_dim = 4;
  config.bottom_mlp = {6, 4};
  config.top_mlp = {8, 5, 1};
  return config;
}

std::unique_ptr<Dlrm> MakeOrDie(const DlrmConfig& config) {
  auto model = Dlrm::Make(config);
  EXPECT_TRUE(model.ok()) << model.status().ToString();
  return std::move(model).value();
}

TEST(DlrmTest, ParameterCountFollowsTheLayout) {
  auto model = MakeOrDie(DlrmConfig());
  // Bottom 13->64->16, top (16 + 27*26/2 = 367)->64->1, each layer W and b.
  const size_t want = (13 * 64 + 64) + (64 * 16 + 16) + (367 * 64 + 64) + (64 * 1 + 1);
  EXPECT_EQ(model->top_input_dim(), 367);
  EXPECT_EQ(model->num_dense_params(), want);
  EXPECT_EQ(model->embedding_dim(), 16);
}

TEST(DlrmTest, GradientsMatchFiniteDifferences) {
  const DlrmConfig config = SmallConfig();
  auto model = MakeOrDie(config);
  const data::Batch batch = RandomBatch(6, config.num_dense, config.num_sparse, 11);
  std::vector<uint64_t> keys;
  std::vector<int32_t> row_index;
  data::DedupeKeys(batch, &keys, &row_index);
  ASSERT_LT(keys.size(), static_cast<size_t>(batch.size * config.num_sparse)) << "rows should be shared";
  ASSERT_TRUE(CheckInputs(*model, batch, keys.size(), row_index.data()).ok());

  std::vector<float> params(model->num_dense_params());
  model->InitDense(5, params.data());
  data::Rng rng(6);
  for (float& p : params) p += static_cast<float>(0.1 * rng.NextNormal());  // non-zero biases too
  // One extra row that no sample uses: its gradient must be exactly zero.
  std::vector<float> rows((keys.size() + 1) * config.embedding_dim);
  for (float& r : rows) r = static_cast<float>(0.5 * rng.NextNormal());

  const auto result = CheckGradients(model.get(), batch, params, rows, row_index);
  const int total = static_cast<int>(params.size() + rows.size());
  EXPECT_EQ(result.failed, 0);
  EXPECT_GE(result.checked, total * 9 / 10) << "skipped " << result.skipped << " of " << total;

  std::vector<float> dense_grad(params.size()), row_grad(rows.size()), probs(batch.size), predicted(batch.size);
  const float loss = model->ForwardBackward(params.data(), rows.data(), keys.size() + 1, row_index.data(), batch,
                                            dense_grad.data(), row_grad.data(), probs.data());
  EXPECT_GT(loss, 0.0f);
  for (int c = 0; c < config.embedding_dim; ++c) EXPECT_EQ(row_grad[keys.size() * config.embedding_dim + c], 0.0f);
  model->Predict(params.data(), rows.data(), keys.size() + 1, row_index.data(), batch, predicted.data());
  EXPECT_EQ(predicted, probs);
}

TEST(DlrmTest, DefaultConfigGradientsMatchOnSampledCoordinates) {
  // The full-size model, through the same checker restricted by a smaller batch: exercises the
  // 4-row blocked kernels and the 351 dot products.
  DlrmConfig config;
  auto model = MakeOrDie(config);
  const data::Batch batch = RandomBatch(9, config.num_dense, config.num_sparse, 21);
  std::vector<uint64_t> keys;
  std::vector<int32_t> row_index;
  data::DedupeKeys(batch, &keys, &row_index);
  std::vector<float> params(model->num_dense_params());
  model->InitDense(1, params.data());
  data::Rng rng(2);
  std::vector<float> rows(keys.size() * config.embedding_dim);
  for (float& r : rows) r = static_cast<float>(0.3 * rng.NextNormal());
  std::vector<float> dense_grad(params.size()), row_grad(rows.size()), probs(batch.size), scratch(params.size()),
      scratch_rows(rows.size());
  model->ForwardBackward(params.data(), rows.data(), keys.size(), row_index.data(), batch, dense_grad.data(),
                         row_grad.data(), probs.data());
  auto loss = [&] {
    return static_cast<double>(model->ForwardBackward(params.data(), rows.data(), keys.size(), row_index.data(),
                                                      batch, scratch.data(), scratch_rows.data(), probs.data()));
  };
  int checked = 0;
  for (int t = 0; t < 400; ++t) {
    const bool dense = t % 2 == 0;
    std::vector<float>& x = dense ? params : rows;
    const size_t i = rng.NextU64() % x.size();
    const float analytic = dense ? dense_grad[i] : row_grad[i];
    double numeric, tol;
    if (!test_util::NumericDerivative(loss, &x[i], &numeric, &tol)) continue;  // ReLU kink
    ++checked;
    EXPECT_NEAR(analytic, numeric, tol) << (dense ? "dense" : "row") << " coordinate " << i;
  }
  EXPECT_GE(checked, 360);
}

TEST(DlrmTest, EmptyBatchGivesZeroGradients) {
  const DlrmConfig config = SmallConfig();
  auto model = MakeOrDie(config);
  data::Batch batch = RandomBatch(0, config.num_dense, config.num_sparse, 1);
  std::vector<float> params(model->num_dense_params(), 1.0f), grad(params.size(), 7.0f), rows(8, 1.0f),
      row_grad(8, 7.0f);
  EXPECT_EQ(model->ForwardBackward(params.data(), rows.data(), 2, nullptr, batch, grad.data(), row_grad.data(),
                                   nullptr),
            0.0f);
  for (float g : grad) EXPECT_EQ(g, 0.0f);
  for (float g : row_grad) EXPECT_EQ(g, 0.0f);
}

TEST(DlrmTest, InitDenseIsDeterministicHeScaled) {
  auto model = MakeOrDie(DlrmConfig());
  std::vector<float> a(model->num_dense_params()), b(a.size()), c(a.size());
  model->InitDense(42, a.data());
  model->InitDense(42, b.data());
  model->InitDense(43, c.data());
  EXPECT_EQ(a, b);
  EXPECT_NE(a, c);
  // Top layer 0 starts after the bottom MLP: W [367 x 64] ~ N(0, 2/367), then 64 zero biases.
  const size_t top0 = (13 * 64 + 64) + (64 * 16 + 16);
  double sum_sq = 0;
  for (size_t i = 0; i < 367 * 64; ++i) sum_sq += a[top0 + i] * a[top0 + i];
  EXPECT_NEAR(std::sqrt(sum_sq / (367 * 64)), std::sqrt(2.0 / 367), 0.005);
  for (size_t i = 0; i < 64; ++i) EXPECT_EQ(a[top0 + 367 * 64 + i], 0.0f);
}

void ExpectInvalid(const DlrmConfig& config, const std::string& field) {
  auto model = Dlrm::Make(config);
  ASSERT_FALSE(model.ok()) << field;
  EXPECT_EQ(model.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(model.status().message().find(field), std::string::npos) << model.status().ToString();
}

TEST(DlrmTest, ValidationNamesTheField) {
  DlrmConfig c;
  c.bottom_mlp = {64, 8};
  ExpectInvalid(c, "bottom_mlp");
  c = DlrmConfig();
  c.bottom_mlp.clear();
  ExpectInvalid(c, "bottom_mlp");
  c = DlrmConfig();
  c.top_mlp = {64, 2};
  ExpectInvalid(c, "top_mlp");
  c = DlrmConfig();
  c.top_mlp = {0, 1};
  ExpectInvalid(c, "top_mlp[0]");
  c = DlrmConfig();
  c.embedding_dim = 0;
  ExpectInvalid(c, "embedding_dim");
  c = DlrmConfig();
  c.num_dense = -1;
  ExpectInvalid(c, "num_dense");
  c = DlrmConfig();
  c.num_sparse = 50000;  // 1.25e9 pairwise dots: too many parameters
  ExpectInvalid(c, "num_sparse");
}

TEST(ModelFactoryTest, BuildsKnownTypesAndRejectsOthers) {
  ModelConfig config;
  auto dlrm = MakeModel(config);
  ASSERT_TRUE(dlrm.ok());
  EXPECT_EQ((*dlrm)->embedding_dim(), 16);
  config.type = "lr";
  auto lr = MakeModel(config);
  ASSERT_TRUE(lr.ok());
  EXPECT_EQ((*lr)->embedding_dim(), 1);
  EXPECT_EQ((*lr)->num_dense_params(), 14u);
  config.type = "wide_and_deep";
  auto bad = MakeModel(config);
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(bad.status().message().find("dlrm, lr"), std::string::npos) << bad.status().ToString();
  config.type = "dlrm";
  config.dlrm.embedding_dim = 8;
  EXPECT_EQ(MakeModel(config).status().code(), StatusCode::kInvalidArgument);
}

TEST(CheckInputsTest, RejectsMismatchedShapesAndRowIndex) {
  auto model = MakeOrDie(SmallConfig());
  data::Batch batch = RandomBatch(2, 3, 4, 1);
  std::vector<int32_t> row_index(8, 0);
  EXPECT_TRUE(CheckInputs(*model, batch, 1, row_index.data()).ok());
  row_index[5] = 1;
  Status status = CheckInputs(*model, batch, 1, row_index.data());
  EXPECT_EQ(status.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(status.message().find("row_index[5]"), std::string::npos) << status.ToString();
  row_index[5] = -1;
  EXPECT_FALSE(CheckInputs(*model, batch, 1, row_index.data()).ok());
  const data::Batch wide = RandomBatch(2, 4, 4, 1);
  EXPECT_FALSE(CheckInputs(*model, wide, 1, row_index.data()).ok());
}

}  // namespace
}  // namespace osprey::models
