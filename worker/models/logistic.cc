#include "worker/models/logistic.h"

#include <algorithm>
#include <string>

#include "worker/models/loss.h"

namespace osprey::models {

Status ValidateLogisticConfig(const LogisticConfig& config) {
  if (config.num_dense < 0) {
    return InvalidArgument("LogisticConfig.num_dense must be >= 0, got " + std::to_string(config.num_dense));
  }
  if (config.num_sparse < 0 || config.num_sparse >= data::kMaxSparseFeatures) {
    return InvalidArgument("LogisticConfig.num_sparse must be in [0, 65536), got " +
                           std::to_string(config.num_sparse));
  }
  return Status::OK();
}

StatusOr<std::unique_ptr<LogisticRegression>> LogisticRegression::Make(const LogisticConfig& config) {
  OSPREY_RETURN_IF_ERROR(ValidateLogisticConfig(config));
  return std::unique_ptr<LogisticRegression>(new LogisticRegression(config));
}

codec::TensorLayout LogisticRegression::dense_tensors() const {
  const uint64_t d = static_cast<uint64_t>(config_.num_dense);
  codec::TensorLayout out;
  if (d > 0) out.push_back({"weight", 0, d});
  out.push_back({"bias", d, 1});
  return out;
}

void LogisticRegression::InitDense(uint64_t /*seed*/, float* params) const {
  std::fill_n(params, num_dense_params(), 0.0f);
}

void LogisticRegression::Logits(const float* dense_params, const float* rows, const int32_t* row_index,
                                const Batch& batch) {
  const int n = batch.size;
  const int num_dense = config_.num_dense;
  const int num_sparse = config_.num_sparse;
  const float bias = dense_params[num_dense];
  logits_.resize(n);
  for (int b = 0; b < n; ++b) {
    const float* x = batch.dense.data() + static_cast<size_t>(b) * num_dense;
    const int32_t* index = row_index + static_cast<size_t>(b) * num_sparse;
    float logit = bias;
    for (int j = 0; j < num_dense; ++j) logit += dense_params[j] * x[j];
    for (int f = 0; f < num_sparse; ++f) logit += rows[index[f]];
    logits_[b] = logit;
  }
}

float LogisticRegression::ForwardBackward(const float* dense_params, const float* rows, size_t num_rows,
                                          const int32_t* row_index, const Batch& batch, float* dense_grad,
                                          float* row_grad, float* probs) {
  const int n = batch.size;
  const int num_dense = config_.num_dense;
  const int num_sparse = config_.num_sparse;
  std::fill_n(dense_grad, num_dense_params(), 0.0f);
  std::fill_n(row_grad, num_rows, 0.0f);
  if (n <= 0) return 0.0f;
  Logits(dense_params, rows, row_index, batch);
  logit_grad_.resize(n);
  const double loss = LogitLossAndGrad(logits_.data(), batch.labels.data(), n, probs, logit_grad_.data());
  for (int b = 0; b < n; ++b) {
    const float g = logit_grad_[b];
    const float* x = batch.dense.data() + static_cast<size_t>(b) * num_dense;
    for (int j = 0; j < num_dense; ++j) dense_grad[j] += g * x[j];
    dense_grad[num_dense] += g;
    const int32_t* index = row_index + static_cast<size_t>(b) * num_sparse;
    for (int f = 0; f < num_sparse; ++f) row_grad[index[f]] += g;
  }
  return static_cast<float>(loss);
}

void LogisticRegression::Predict(const float* dense_params, const float* rows, size_t /*num_rows*/,
                                 const int32_t* row_index, const Batch& batch, float* probs) {
  if (batch.size <= 0) return;
  Logits(dense_params, rows, row_index, batch);
  for (int b = 0; b < batch.size; ++b) probs[b] = Sigmoid(logits_[b]);
}

}  // namespace osprey::models
