// Finite-difference gradient check shared by the model tests.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "worker/data/batch.h"
#include "worker/data/random.h"
#include "worker/models/model.h"

namespace osprey::models::test_util {

// A small random batch whose ids repeat (so rows are shared by several samples and features).
inline data::Batch RandomBatch(int size, int num_dense, int num_sparse, uint64_t seed) {
  data::Rng rng(seed);
  data::Batch batch;
  batch.size = size;
  batch.num_dense = num_dense;
  batch.num_sparse = num_sparse;
  for (int i = 0; i < size * num_dense; ++i) batch.dense.push_back(static_cast<float>(2.0 * rng.NextUniform()));
  for (int i = 0; i < size * num_sparse; ++i) batch.ids.push_back(rng.NextU64() % 3);
  for (int b = 0; b < size; ++b) batch.labels.push_back(rng.NextUniform() < 0.5 ? 1.0f : 0.0f);
  return batch;
}

struct GradCheckResult {
  int checked = 0;
  int skipped = 0;  // coordinates where the loss is not smooth at the scale of eps (ReLU kinks)
  int failed = 0;
};

// Sets *derivative to d loss() / d *x by central differences, and *tolerance to the error allowed
// against it: float rounding of the loss (~1e-7) over the step, plus 1% relative. Returns false
// when the loss is not smooth around *x at the scale of the steps (a ReLU kink): then central
// differences at several steps disagree, or the one-sided slopes do (a kink right at *x makes all
// central differences agree on the mean of the two slopes).
template <typename LossFn>
bool NumericDerivative(LossFn&& loss, float* x, double* derivative, double* tolerance) {
  const float saved = *x;
  auto at = [&](float value) {
    *x = value;
    return loss();
  };
  const double center = at(saved);
  double central[3], forward = 0, backward = 0;
  for (int e = 0; e < 3; ++e) {
    const float eps = 1e-2f / static_cast<float>(1 << e);
    const double plus = at(saved + eps), minus = at(saved - eps);
    central[e] = (plus - minus) / (2.0 * eps);
    forward = (plus - center) / eps;
    backward = (center - minus) / eps;
  }
  *x = saved;
  *derivative = central[1];
  *tolerance = 5e-4 + 1e-2 * std::fabs(central[1]);
  return std::fabs(central[0] - central[1]) <= *tolerance && std::fabs(central[1] - central[2]) <= *tolerance &&
         std::fabs(forward - backward) <= *tolerance;
}

// Compares analytic gradients of `model` at (params, rows) with central differences of the loss
// returned by ForwardBackward, for every dense parameter and every row coordinate.
inline GradCheckResult CheckGradients(Model* model, const data::Batch& batch, std::vector<float> params,
                                      std::vector<float> rows, const std::vector<int32_t>& row_index) {
  const size_t num_rows = rows.size() / model->embedding_dim();
  std::vector<float> dense_grad(params.size()), row_grad(rows.size()), probs(batch.size);
  std::vector<float> scratch_dense(params.size()), scratch_rows(rows.size());
  model->ForwardBackward(params.data(), rows.data(), num_rows, row_index.data(), batch, dense_grad.data(),
                         row_grad.data(), probs.data());
  auto loss = [&] {
    return static_cast<double>(model->ForwardBackward(params.data(), rows.data(), num_rows, row_index.data(), batch,
                                                      scratch_dense.data(), scratch_rows.data(), probs.data()));
  };
  GradCheckResult result;
  auto check = [&](float* x, float analytic, const char* what, size_t i) {
    double numeric, tol;
    if (!NumericDerivative(loss, x, &numeric, &tol)) {
      ++result.skipped;
      return;
    }
    ++result.checked;
    if (std::fabs(analytic - numeric) > tol) {
      ++result.failed;
      ADD_FAILURE() << what << "[" << i << "]: analytic " << analytic << " vs numeric " << numeric;
    }
  };
  for (size_t i = 0; i < params.size(); ++i) check(&params[i], dense_grad[i], "dense_grad", i);
  for (size_t i = 0; i < rows.size(); ++i) check(&rows[i], row_grad[i], "row_grad", i);
  return result;
}

}  // namespace osprey::models::test_util
