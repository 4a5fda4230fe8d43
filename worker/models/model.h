// Model: the interface between the worker's training loop and a built-in model (DLRM, logistic
// regression).
//
// A model owns no parameters. Its dense parameters are one flat float vector that lives in a dense
// PS table (num_dense_params() floats, layout documented by each model); its sparse parameters are
// embedding rows of embedding_dim() floats in a sparse PS table, keyed by FeatureKey(f, id). Per
// step the worker dedupes the batch's keys (DedupeKeys), pulls those rows and the dense vector,
// calls ForwardBackward, and pushes dense_grad and row_grad.
//
// Thread-safety: a Model may keep scratch buffers between calls, so one object must not be used by
// two threads at once; create one per thread. Const methods are safe to call concurrently.
#pragma once

#include <cstddef>
#include <cstdint>

#include "common/codec/tensor_layout.h"
#include "common/status.h"
#include "worker/data/batch.h"

namespace osprey::models {

using data::Batch;

class Model {
 public:
  virtual ~Model() = default;

  // Length of the flat dense parameter vector (dense PS table).
  virtual size_t num_dense_params() const = 0;
  // Row width of the sparse PS table.
  virtual int embedding_dim() const = 0;
  // Shape of the batches the model accepts.
  virtual int num_dense_features() const = 0;
  virtual int num_sparse_features() const = 0;

  // The parameter tensors of the flat dense vector, in order (names, offsets, sizes): what the
  // compressor's granularity "layer" chooses k by and reports diagnostics for. They cover
  // [0, num_dense_params()) back to back (codec::ValidateTensorLayout). The default is one tensor
  // "dense" over the whole vector.
  virtual codec::TensorLayout dense_tensors() const { return {{"dense", 0, num_dense_params()}}; }

  // Writes the initial dense parameters to params[0, num_dense_params()); same seed -> same
  // values (across platforms up to libm's last-bit rounding).
  virtual void InitDense(uint64_t seed, float* params) const = 0;

  // Forward and backward pass on one batch.
  //   dense_params  [num_dense_params()]
  //   rows          [num_rows x embedding_dim()], the pulled embedding rows
  //   row_index     [batch.size x num_sparse]: row_index[b * num_sparse + f] is the row of
  //                 sample b / feature f (as produced by DedupeKeys)
  // Outputs (overwritten completely, caller-owned):
  //   dense_grad    [num_dense_params()]            gradient of the MEAN loss over the batch
  //   row_grad      [num_rows x embedding_dim()]    same; a row used several times gets the sum
  //   probs         [batch.size]                    predicted P(y = 1)
  // Returns the mean binary cross-entropy of the batch (an empty batch gives 0 and zero
  // gradients).
  // Preconditions (CheckInputs below verifies them): the batch matches num_dense_features() /
  // num_sparse_features(), every row_index entry is in [0, num_rows).
  virtual float ForwardBackward(const float* dense_params, const float* rows, size_t num_rows,
                                const int32_t* row_index, const Batch& batch, float* dense_grad, float* row_grad,
                                float* probs) = 0;

  // Forward pass only (evaluation); same inputs and preconditions, writes probs [batch.size].
  virtual void Predict(const float* dense_params, const float* rows, size_t num_rows, const int32_t* row_index,
                       const Batch& batch, float* probs) = 0;
};

// Verifies the preconditions of ForwardBackward / Predict in O(batch.size * num_sparse): the
// batch's shape and vector sizes, its feature counts against the model's, and every row_index
// entry against num_rows. Returns InvalidArgument naming the mismatch. The training loop should
// call it on data it did not produce itself (e.g. batches from a user's reader).
Status CheckInputs(const Model& model, const Batch& batch, size_t num_rows, const int32_t* row_index);

}  // namespace osprey::models
