// Dlrm: the Deep Learning Recommendation Model (Naumov et al., 2019) on the CPU, forward and
// backward, for one embedding per sparse feature (bags of one id, sum pooling).
//
//   z_0      = bottom_mlp(dense features)           ReLU after every layer; width embedding_dim
//   z_{f+1}  = embedding row of sparse feature f    f = 0 .. num_sparse-1
//   t        = [ z_0 | z_i . z_j for 0 <= i < j <= num_sparse ]   (dot interaction)
//   logit    = top_mlp(t)                            ReLU on hidden layers, last layer linear
//   p        = sigmoid(logit), loss = mean binary cross-entropy
//
// The pairwise dots are ordered (0,1), (0,2), ..., (0,F), (1,2), ..., (F-1,F), so
// top_in = embedding_dim + (F + 1) * F / 2 with F = num_sparse.
//
// Dense parameter layout (flat floats, in this order): for each bottom layer, then each top layer,
// its weight matrix W [in x out] stored input-major (W(i, o) at i * out + o), followed by its bias
// [out]. Bottom layer 0 has in = num_dense; top layer 0 has in = top_in. InitDense draws weights of
// ReLU layers from N(0, 2 / in) (He) and of the final linear layer from N(0, 2 / (in + out))
// (Glorot); biases start at 0. Embedding rows are initialised by the sparse table, not here.
//
// Speed: forward + backward of the default config runs at about 110k samples/s per core (batch
// 256, Xeon with AVX-512; the kernels are cloned per vector ISA, see worker/data/multiversion.h).
//
// Thread-safety: see Model (scratch buffers; one object per thread).
#pragma once

#include <memory>
#include <vector>

#include "common/status.h"
#include "worker/models/model.h"

namespace osprey::models {

struct DlrmConfig {
  int num_dense = 13;                   // dense input features, >= 0
  int num_sparse = 26;                  // sparse features (embedding lookups per sample), >= 0
  int embedding_dim = 16;               // d: row width of the sparse table, >= 1
  std::vector<int> bottom_mlp = {64, 16};  // layer widths; last must equal embedding_dim
  std::vector<int> top_mlp = {64, 1};      // layer widths; last must be 1 (the logit)
};

// Returns OK or InvalidArgument naming the offending field, e.g. "DlrmConfig.bottom_mlp: last
// layer width 8 must equal embedding_dim 16".
Status ValidateDlrmConfig(const DlrmConfig& config);

class Dlrm final : public Model {
 public:
  // Validates `config` (ValidateDlrmConfig) and builds the model.
  static StatusOr<std::unique_ptr<Dlrm>> Make(const DlrmConfig& config);

  size_t num_dense_params() const override { return num_params_; }
  int embedding_dim() const override { return config_.embedding_dim; }
  int num_dense_features() const override { return config_.num_dense; }
  int num_sparse_features() const override { return config_.num_sparse; }
  // "bottom.<l>.weight", "bottom.<l>.bias", ..., "top.<l>.weight", "top.<l>.bias" in layout order.
  codec::TensorLayout dense_tensors() const override;
  void InitDense(uint64_t seed, float* params) const override;
  float ForwardBackward(const float* dense_params, const float* rows, size_t num_rows, const int32_t* row_index,
                        const Batch& batch, float* dense_grad, float* row_grad, float* probs) override;
  void Predict(const float* dense_params, const float* rows, size_t num_rows, const int32_t* row_index,
               const Batch& batch, float* probs) override;

  const DlrmConfig& config() const { return config_; }
  // Width of the top MLP's input: embedding_dim + (num_sparse + 1) * num_sparse / 2.
  int top_input_dim() const { return top_in_; }

 private:
  // One fully connected layer: offsets into the flat parameter vector.
  struct Layer {
    int in;
    int out;
    size_t weight;  // offset of W [in x out]
    size_t bias;    // offset of b [out]
    bool relu;
  };

  explicit Dlrm(const DlrmConfig& config);
  // Forward pass; leaves every activation in the scratch buffers for Backward.
  void Forward(const float* params, const float* rows, const int32_t* row_index, const Batch& batch);
  // Runs `layers` on input [n x layers[0].in]; acts[l] receives layer l's output [n x out].
  void MlpForward(const std::vector<Layer>& layers, const float* params, const float* input, int n,
                  std::vector<std::vector<float>>* acts);
  // Back-propagates d(output of the last layer) (in acts_grad, overwritten) through `layers`;
  // accumulates into grad and, when input_grad is not null, writes d(input) there.
  void MlpBackward(const std::vector<Layer>& layers, const float* params, const float* input, int n,
                   const std::vector<std::vector<float>>& acts, std::vector<float>* out_grad, float* grad,
                   float* input_grad);
  void InteractionForward(int n);
  void InteractionBackward(int n, const float* top_input_grad);

  DlrmConfig config_;
  std::vector<Layer> bottom_;
  std::vector<Layer> top_;
  int top_in_ = 0;
  size_t num_params_ = 0;

  // Scratch, resized per batch (grow-only in practice).
  std::vector<std::vector<float>> bottom_acts_;  // per bottom layer [n x out]
  std::vector<std::vector<float>> top_acts_;     // per top layer [n x out]
  std::vector<float> z_;                         // [n x (F+1) x d]: z_0 then the gathered rows
  std::vector<float> top_input_;                 // [n x top_in]
  std::vector<float> top_input_grad_;            // [n x top_in]
  std::vector<float> z_grad_;                    // [n x (F+1) x d]
  std::vector<float> grad_a_, grad_b_;           // ping-pong activation gradients
  std::vector<float> weight_t_;                  // W^T of the layer being back-propagated
};

}  // namespace osprey::models
