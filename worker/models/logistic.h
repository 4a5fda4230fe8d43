// LogisticRegression: a linear click model over dense features and one weight per sparse id.
//
//   logit = bias + sum_j w_j * x_j + sum_f row(f, id_f)[0],   p = sigmoid(logit)
//
// The sparse weights are the 1-float rows of the sparse table (embedding_dim() == 1). Dense
// parameter layout: [w_0 .. w_{num_dense-1}, bias]. InitDense writes zeros (the loss is convex, so
// no symmetry needs breaking); the seed is accepted for the interface and ignored.
//
// Thread-safety: see Model (one object per thread).
#pragma once

#include <memory>
#include <vector>

#include "common/status.h"
#include "worker/models/model.h"

namespace osprey::models {

struct LogisticConfig {
  int num_dense = 13;   // >= 0
  int num_sparse = 26;  // in [0, 65536)
};

// Returns OK or InvalidArgument naming the offending field.
Status ValidateLogisticConfig(const LogisticConfig& config);

class LogisticRegression final : public Model {
 public:
  static StatusOr<std::unique_ptr<LogisticRegression>> Make(const LogisticConfig& config);

  size_t num_dense_params() const override { return static_cast<size_t>(config_.num_dense) + 1; }
  int embedding_dim() const override { return 1; }
  int num_dense_features() const override { return config_.num_dense; }
  int num_sparse_features() const override { return config_.num_sparse; }
  // "weight" [num_dense] (when num_dense > 0), then "bias" [1].
  codec::TensorLayout dense_tensors() const override;
  void InitDense(uint64_t seed, float* params) const override;
  float ForwardBackward(const float* dense_params, const float* rows, size_t num_rows, const int32_t* row_index,
                        const Batch& batch, float* dense_grad, float* row_grad, float* probs) override;
  void Predict(const float* dense_params, const float* rows, size_t num_rows, const int32_t* row_index,
               const Batch& batch, float* probs) override;

 private:
  explicit LogisticRegression(const LogisticConfig& config) : config_(config) {}
  // logits_[b] for every sample of the batch.
  void Logits(const float* dense_params, const float* rows, const int32_t* row_index, const Batch& batch);

  LogisticConfig config_;
  std::vector<float> logits_;
  std::vector<float> logit_grad_;
};

}  // namespace osprey::models
