#include "worker/models/dlrm.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>

#include "worker/data/multiversion.h"
#include "worker/data/random.h"
#include "worker/models/dense_ops.h"
#include "worker/models/loss.h"

namespace osprey::models {
namespace {

constexpr uint64_t kMaxParams = uint64_t{1} << 31;  // keeps every offset and dimension in int range

// The compute kernels, cloned per vector ISA (see multiversion.h).
OSPREY_MULTIVERSION void Gemm(const float* a, const float* b, float* c, int m, int k, int n) {
  ops::GemmAcc(a, b, c, m, k, n);
}

OSPREY_MULTIVERSION void GemmTn(const float* a, const float* b, float* c, int m, int k, int n) {
  ops::GemmTnAcc(a, b, c, m, k, n);
}

// top_input[b] = [z_b0 | z_bi . z_bj for i < j] for the n samples of z [n x vectors x d].
OSPREY_MULTIVERSION void DotInteraction(const float* z, int n, int vectors, int d, int top_in, float* top_input) {
  const size_t stride = static_cast<size_t>(vectors) * d;
  for (int b = 0; b < n; ++b) {
    const float* zb = z + b * stride;
    float* t = top_input + static_cast<size_t>(b) * top_in;
    std::copy_n(zb, d, t);
    int k = d;
    for (int i = 0; i < vectors; ++i) {
      for (int j = i + 1; j < vectors; ++j) t[k++] = ops::Dot(zb + i * d, zb + j * d, d);
    }
  }
}

// z_grad (overwritten) = d loss / d z, given d loss / d top_input.
OSPREY_MULTIVERSION void DotInteractionGrad(const float* z, const float* top_input_grad, int n, int vectors, int d,
                                            int top_in, float* z_grad) {
  const size_t stride = static_cast<size_t>(vectors) * d;
  std::fill_n(z_grad, n * stride, 0.0f);
  for (int b = 0; b < n; ++b) {
    const float* zb = z + b * stride;
    float* gb = z_grad + b * stride;
    const float* tg = top_input_grad + static_cast<size_t>(b) * top_in;
    ops::Axpy(1.0f, tg, gb, d);  // z_0 also feeds the top MLP directly
    int k = d;
    for (int i = 0; i < vectors; ++i) {
      for (int j = i + 1; j < vectors; ++j) {
        const float g = tg[k++];
        ops::Axpy(g, zb + j * d, gb + i * d, d);
        ops::Axpy(g, zb + i * d, gb + j * d, d);
      }
    }
  }
}

Status CheckWidths(const char* field, const std::vector<int>& widths) {
  if (widths.empty()) return InvalidArgument(std::string("DlrmConfig.") + field + " must have at least one layer");
  for (size_t l = 0; l < widths.size(); ++l) {
    if (widths[l] < 1) {
      return InvalidArgument(std::string("DlrmConfig.") + field + "[" + std::to_string(l) + "] must be >= 1, got " +
                             std::to_string(widths[l]));
    }
  }
  return Status::OK();
}

// Parameter count of an MLP with input width `in`, or kMaxParams when it does not fit.
uint64_t MlpParams(uint64_t in, const std::vector<int>& widths) {
  uint64_t total = 0;
  for (int out : widths) {
    total += in * static_cast<uint64_t>(out) + static_cast<uint64_t>(out);
    if (total >= kMaxParams) return kMaxParams;
    in = static_cast<uint64_t>(out);
  }
  return total;
}

}  // namespace

Status ValidateDlrmConfig(const DlrmConfig& config) {
  if (config.num_dense < 0) {
    return InvalidArgument("DlrmConfig.num_dense must be >= 0, got " + std::to_string(config.num_dense));
  }
  if (config.num_sparse < 0 || config.num_sparse >= data::kMaxSparseFeatures) {
    return InvalidArgument("DlrmConfig.num_sparse must be in [0, 65536), got " + std::to_string(config.num_sparse));
  }
  if (config.embedding_dim < 1) {
    return InvalidArgument("DlrmConfig.embedding_dim must be >= 1, got " + std::to_string(config.embedding_dim));
  }
  OSPREY_RETURN_IF_ERROR(CheckWidths("bottom_mlp", config.bottom_mlp));
  OSPREY_RETURN_IF_ERROR(CheckWidths("top_mlp", config.top_mlp));
  if (config.bottom_mlp.back() != config.embedding_dim) {
    return InvalidArgument("DlrmConfig.bottom_mlp: last layer width " + std::to_string(config.bottom_mlp.back()) +
                           " must equal embedding_dim " + std::to_string(config.embedding_dim));
  }
  if (config.top_mlp.back() != 1) {
    return InvalidArgument("DlrmConfig.top_mlp: last layer width must be 1 (the logit), got " +
                           std::to_string(config.top_mlp.back()));
  }
  const uint64_t vectors = static_cast<uint64_t>(config.num_sparse) + 1;
  const uint64_t top_in = static_cast<uint64_t>(config.embedding_dim) + vectors * (vectors - 1) / 2;
  const uint64_t params = MlpParams(static_cast<uint64_t>(config.num_dense), config.bottom_mlp) +
                          MlpParams(top_in, config.top_mlp);
  if (params >= kMaxParams) {
    return InvalidArgument("DlrmConfig: the MLPs need 2^31 or more dense parameters (num_sparse " +
                           std::to_string(config.num_sparse) + " gives a top MLP input of " +
                           std::to_string(top_in) + ")");
  }
  return Status::OK();
}

StatusOr<std::unique_ptr<Dlrm>> Dlrm::Make(const DlrmConfig& config) {
  OSPREY_RETURN_IF_ERROR(ValidateDlrmConfig(config));
  return std::unique_ptr<Dlrm>(new Dlrm(config));
}

Dlrm::Dlrm(const DlrmConfig& config) : config_(config) {
  const int64_t vectors = config.num_sparse + 1;
  top_in_ = static_cast<int>(config.embedding_dim + vectors * (vectors - 1) / 2);  // < 2^31: validated
  size_t offset = 0;
  auto add_layers = [&offset](int in, const std::vector<int>& widths, bool relu_last, std::vector<Layer>* layers) {
    for (size_t l = 0; l < widths.size(); ++l) {
      const int out = widths[l];
      const size_t weights = static_cast<size_t>(in) * out;
      layers->push_back({in, out, offset, offset + weights, relu_last || l + 1 < widths.size()});
      offset += weights + out;
      in = out;
    }
  };
  add_layers(config.num_dense, config.bottom_mlp, /*relu_last=*/true, &bottom_);
  add_layers(top_in_, config.top_mlp, /*relu_last=*/false, &top_);
  num_params_ = offset;
}

codec::TensorLayout Dlrm::dense_tensors() const {
  codec::TensorLayout out;
  auto add = [&out](const char* part, const std::vector<Layer>& layers) {
    for (size_t l = 0; l < layers.size(); ++l) {
      const Layer& x = layers[l];
      const std::string prefix = std::string(part) + "." + std::to_string(l);
      const uint64_t weights = static_cast<uint64_t>(x.in) * static_cast<uint64_t>(x.out);
      if (weights > 0) out.push_back({prefix + ".weight", x.weight, weights});  // none when num_dense is 0
      out.push_back({prefix + ".bias", x.bias, static_cast<uint64_t>(x.out)});
    }
  };
  add("bottom", bottom_);
  add("top", top_);
  return out;
}

void Dlrm::InitDense(uint64_t seed, float* params) const {
  data::Rng rng(seed);
  for (const auto* layers : {&bottom_, &top_}) {
    for (const Layer& layer : *layers) {
      const double fan = layer.relu ? layer.in : 0.5 * (layer.in + layer.out);
      const double stddev = fan > 0 ? std::sqrt(2.0 / fan) : 0.0;
      const size_t weights = static_cast<size_t>(layer.in) * layer.out;
      for (size_t i = 0; i < weights; ++i) params[layer.weight + i] = static_cast<float>(stddev * rng.NextNormal());
      std::fill_n(params + layer.bias, layer.out, 0.0f);
    }
  }
}

void Dlrm::MlpForward(const std::vector<Layer>& layers, const float* params, const float* input, int n,
                      std::vector<std::vector<float>>* acts) {
  acts->resize(layers.size());
  const float* x = input;
  for (size_t l = 0; l < layers.size(); ++l) {
    const Layer& layer = layers[l];
    std::vector<float>& y = (*acts)[l];
    y.resize(static_cast<size_t>(n) * layer.out);
    for (int b = 0; b < n; ++b) {
      std::copy_n(params + layer.bias, layer.out, y.data() + static_cast<size_t>(b) * layer.out);
    }
    Gemm(x, params + layer.weight, y.data(), n, layer.in, layer.out);
    if (layer.relu) {
      for (float& v : y) v = std::max(v, 0.0f);
    }
    x = y.data();
  }
}

void Dlrm::Forward(const float* params, const float* rows, const int32_t* row_index, const Batch& batch) {
  const int n = batch.size;
  const int d = config_.embedding_dim;
  const int num_sparse = config_.num_sparse;
  const size_t stride = static_cast<size_t>(num_sparse + 1) * d;  // floats of z per sample
  MlpForward(bottom_, params, batch.dense.data(), n, &bottom_acts_);
  const float* z0 = bottom_acts_.back().data();
  z_.resize(static_cast<size_t>(n) * stride);
  for (int b = 0; b < n; ++b) {
    float* zb = z_.data() + b * stride;
    std::copy_n(z0 + static_cast<size_t>(b) * d, d, zb);
    const int32_t* index = row_index + static_cast<size_t>(b) * num_sparse;
    for (int f = 0; f < num_sparse; ++f) {
      std::memcpy(zb + static_cast<size_t>(f + 1) * d, rows + static_cast<size_t>(index[f]) * d, d * sizeof(float));
    }
  }
  InteractionForward(n);
  MlpForward(top_, params, top_input_.data(), n, &top_acts_);
}

void Dlrm::InteractionForward(int n) {
  top_input_.resize(static_cast<size_t>(n) * top_in_);
  DotInteraction(z_.data(), n, config_.num_sparse + 1, config_.embedding_dim, top_in_, top_input_.data());
}

void Dlrm::InteractionBackward(int n, const float* top_input_grad) {
  z_grad_.resize(z_.size());
  DotInteractionGrad(z_.data(), top_input_grad, n, config_.num_sparse + 1, config_.embedding_dim, top_in_,
                     z_grad_.data());
}

void Dlrm::MlpBackward(const std::vector<Layer>& layers, const float* params, const float* input, int n,
                       const std::vector<std::vector<float>>& acts, std::vector<float>* out_grad, float* grad,
                       float* input_grad) {
  // `g` holds d(loss)/d(output of layer l), overwritten in place into d/d(pre-activation).
  std::vector<float>& g = *out_grad;
  for (size_t l = layers.size(); l-- > 0;) {
    const Layer& layer = layers[l];
    if (layer.relu) {
      const std::vector<float>& y = acts[l];
      for (size_t i = 0; i < g.size(); ++i) g[i] = y[i] > 0.0f ? g[i] : 0.0f;
    }
    const float* x = l > 0 ? acts[l - 1].data() : input;
    GemmTn(x, g.data(), grad + layer.weight, n, layer.in, layer.out);
    for (int b = 0; b < n; ++b) {
      ops::Axpy(1.0f, g.data() + static_cast<size_t>(b) * layer.out, grad + layer.bias, layer.out);
    }
    if (l == 0 && input_grad == nullptr) break;
    // d(input) = g * W^T; W^T is materialised so the product is again a contiguous axpy.
    weight_t_.resize(static_cast<size_t>(layer.in) * layer.out);
    ops::Transpose(params + layer.weight, weight_t_.data(), layer.in, layer.out);
    float* dst = input_grad;
    if (l > 0) {
      grad_b_.assign(static_cast<size_t>(n) * layer.in, 0.0f);
      dst = grad_b_.data();
    } else {
      std::fill_n(dst, static_cast<size_t>(n) * layer.in, 0.0f);
    }
    Gemm(g.data(), weight_t_.data(), dst, n, layer.out, layer.in);
    if (l > 0) g.swap(grad_b_);
  }
}

float Dlrm::ForwardBackward(const float* dense_params, const float* rows, size_t num_rows, const int32_t* row_index,
                            const Batch& batch, float* dense_grad, float* row_grad, float* probs) {
  const int n = batch.size;
  const int d = config_.embedding_dim;
  const int num_sparse = config_.num_sparse;
  std::fill_n(dense_grad, num_params_, 0.0f);
  std::fill_n(row_grad, num_rows * d, 0.0f);
  if (n <= 0) return 0.0f;
  Forward(dense_params, rows, row_index, batch);

  grad_a_.resize(n);
  const double loss = LogitLossAndGrad(top_acts_.back().data(), batch.labels.data(), n, probs, grad_a_.data());

  top_input_grad_.resize(static_cast<size_t>(n) * top_in_);
  MlpBackward(top_, dense_params, top_input_.data(), n, top_acts_, &grad_a_, dense_grad, top_input_grad_.data());
  InteractionBackward(n, top_input_grad_.data());

  const size_t stride = static_cast<size_t>(num_sparse + 1) * d;
  grad_a_.resize(static_cast<size_t>(n) * d);
  for (int b = 0; b < n; ++b) std::copy_n(z_grad_.data() + b * stride, d, grad_a_.data() + static_cast<size_t>(b) * d);
  MlpBackward(bottom_, dense_params, batch.dense.data(), n, bottom_acts_, &grad_a_, dense_grad, nullptr);

  for (int b = 0; b < n; ++b) {
    const int32_t* index = row_index + static_cast<size_t>(b) * num_sparse;
    const float* gb = z_grad_.data() + b * stride + d;
    for (int f = 0; f < num_sparse; ++f) {
      ops::Axpy(1.0f, gb + static_cast<size_t>(f) * d, row_grad + static_cast<size_t>(index[f]) * d, d);
    }
  }
  return static_cast<float>(loss);
}

void Dlrm::Predict(const float* dense_params, const float* rows, size_t num_rows, const int32_t* row_index,
                   const Batch& batch, float* probs) {
  if (batch.size <= 0) return;
  Forward(dense_params, rows, row_index, batch);
  const float* logits = top_acts_.back().data();
  for (int b = 0; b < batch.size; ++b) probs[b] = Sigmoid(logits[b]);
}

}  // namespace osprey::models
