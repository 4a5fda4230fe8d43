// GpuDlrm: models::Dlrm's forward and backward pass on one CUDA device, with the same math and
// the same parameter layout, so the worker can swap it in for the CPU model.
//
// Math and layout are exactly those of worker/models/dlrm.h: the flat dense parameter vector holds,
// for each bottom then each top layer, W [in x out] input-major and then b [out]; the bottom MLP has
// ReLU after every layer, the top MLP on hidden layers only; the interaction is [z_0 | z_i . z_j for
// i < j] in the order (0,1), (0,2), ..., (F-1,F); the loss is the mean binary cross-entropy and
// every gradient is that of the MEAN loss, a row used several times getting the sum of its uses.
// Parameters come from the caller (no InitDense here: use models::Dlrm::InitDense on the host).
//
// Compute: MLP layers through cuBLAS with fused bias + ReLU kernels, in one of three precisions
// (MlpPrecision: fp32, tf32 tensor cores, or bf16 operands with fp32 accumulation; the parameters
// and every other tensor stay fp32); embedding gather, dot interaction and its backward fused in
// one kernel each (one sample per block, the sample's vectors in shared memory), row gradients
// scatter-added with atomics; interaction and loss are fp32 in every mode. BackwardHooks let a
// caller start sending finished gradients while the rest of the backward pass runs.
//
// Conventions (as in worker/cuda/codec_kernels.h): pointers named d_* are device memory on this
// object's device, borrowed for the call; work is enqueued on `stream` (a cudaStream_t passed as
// void*; nullptr is the legacy default stream) and the call returns without waiting, so outputs are
// valid once the stream reaches that point. Returned Statuses report argument, launch and cuBLAS
// errors; a fault inside a kernel surfaces at the caller's next synchronizing call. Each call makes
// this object's device current for its duration and restores the caller's device afterwards.
//
// Thread-safety: a GpuDlrm owns scratch buffers and a cuBLAS handle, so calls on one object must
// not overlap: call it from one thread at a time, and when two calls use different streams, order
// them (an event) so the second cannot start before the first finished. Distinct objects are
// independent. This header includes no CUDA header.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "common/status.h"
#include "worker/data/batch.h"
#include "worker/models/dlrm.h"

namespace osprey::cuda {

// How the MLPs' matrix products (forward, weight gradient, input gradient) are computed. Only the
// products' operands change: accumulation, bias, ReLU, bias gradients, interaction and loss are
// fp32 in every mode, and the parameters the caller passes stay fp32 (the master weights).
enum class MlpPrecision {
  // cuBLAS sgemm, default math: agrees with the CPU model up to summation order (~1e-6 relative).
  kFp32,
  // sgemm on TF32 tensor cores (operands rounded to 10 mantissa bits, fp32 accumulation): several
  // times faster than kFp32; agrees with the CPU model to ~1e-3 relative (a few 1e-3 through deep
  // MLPs).
  kTf32,
  // cublasGemmEx with bf16 operands (8 significant bits) and fp32 accumulation: each call casts
  // the weights to a bf16 copy once and keeps bf16 copies of every product's input activations
  // and of the pre-activation gradients. Agrees with the CPU model to a few 1e-3 relative (default
  // config: loss 1e-3, gradients up to ~5e-3 normwise), and to ~1e-4 with the CPU model whose
  // product operands are rounded to bf16 (tests/gpu_dlrm/bf16_reference.h). Needs 2 more bytes
  // of device memory per parameter and per activation. On the Criteo Kaggle shape it runs at
  // about tf32's speed (H200): those MLPs are too small for the products to dominate.
  kBf16,
};

// "fp32", "tf32" or "bf16" (as in the job config's worker.precision); InvalidArgument naming the
// value and the choices otherwise.
StatusOr<MlpPrecision> ParseMlpPrecision(const std::string& name);
// The name ParseMlpPrecision accepts for `precision`.
const char* MlpPrecisionName(MlpPrecision precision);

struct GpuDlrmOptions {
  MlpPrecision precision = MlpPrecision::kTf32;
};

// Observes the backward pass as ForwardBackward enqueues it, so a caller can start communicating
// finished gradients while the rest of backward runs.
struct BackwardHooks {
  // Called on the calling thread, inside ForwardBackward, each time the gradients of the dense
  // parameters [from, num_dense_params()) have all been enqueued on the stream; `from` strictly
  // decreases from call to call and the last call has from == 0. (Layout: bottom layers then top
  // layers, so the top MLP's gradients come first.) A caller records a cudaEvent on the stream
  // in the hook to know when that range is complete on the device.
  std::function<void(size_t from)> dense_ready;
  // Called once, when d_row_grad has been completely enqueued (after the interaction backward,
  // before the bottom MLP's backward).
  std::function<void()> rows_ready;
};

class GpuDlrm {
 public:
  // Builds the model for batches of at most max_batch samples on CUDA device `device` and
  // allocates all its device memory there (scratch for max_batch samples; no allocation per call
  // except in the *Host conveniences, see below). Errors:
  //   InvalidArgument     config fails models::ValidateDlrmConfig; max_batch < 1 or too large for
  //                       32-bit matrix dimensions; device outside [0, device count) (the message
  //                       names the count); num_sparse too large for the interaction kernel's
  //                       shared memory on this device; options.precision not an MlpPrecision;
  //   FailedPrecondition  "no CUDA device" (no device visible or no usable driver); the device's
  //                       compute capability has no kernel image in this build;
  //   ResourceExhausted   device out of memory; Internal for other CUDA / cuBLAS errors.
  static StatusOr<std::unique_ptr<GpuDlrm>> Make(const models::DlrmConfig& config, int device, int max_batch,
                                                 const GpuDlrmOptions& options = GpuDlrmOptions());
  // Frees the device memory; work enqueued by earlier calls must have finished (synchronize the
  // streams passed to them first).
  ~GpuDlrm();
  GpuDlrm(const GpuDlrm&) = delete;
  GpuDlrm& operator=(const GpuDlrm&) = delete;

  // Same values as models::Dlrm's accessors for the same config.
  size_t num_dense_params() const;
  int top_input_dim() const;
  int embedding_dim() const;
  int num_dense_features() const;
  int num_sparse_features() const;
  int device() const;
  int max_batch() const;

  // Forward and backward pass on one batch of `batch` samples (models::Model::ForwardBackward on
  // the device). Inputs:
  //   d_dense_params    [num_dense_params()]
  //   d_rows            [num_rows x embedding_dim()]     the pulled embedding rows
  //   d_row_index       [batch x num_sparse]             row of sample b / feature f at b * num_sparse + f
  //   d_dense_features  [batch x num_dense]              row-major (data::Batch::dense)
  //   d_labels          [batch]                          0 or 1
  // Outputs, overwritten completely (also for batch == 0: zero gradients, loss 0):
  //   d_dense_grad      [num_dense_params()]             gradient of the mean loss
  //   d_row_grad        [num_rows x embedding_dim()]     same; a row used several times gets the sum
  //   d_probs           [batch]                          P(y = 1)
  //   d_loss            [1]                              mean binary cross-entropy
  // Pointers to empty arrays may be null. Errors: InvalidArgument for batch outside [0, max_batch]
  // or a null pointer that must not be; Internal for CUDA / cuBLAS errors.
  // Precondition (not checked on the device, as for the CPU model; models::CheckInputs on the host
  // data verifies it): every row_index entry is in [0, num_rows). An entry outside it does not
  // fault: it reads as a zero row and its gradient is dropped.
  // `hooks` (borrowed for the call; null or empty functions: none) are called as BackwardHooks
  // says: for each top layer, last to first, dense_ready(that layer's weight offset) once its W
  // and b gradients are enqueued; then rows_ready(); then the same for each bottom layer, the
  // last call being dense_ready(0). For batch == 0: rows_ready() then dense_ready(0), after the
  // zeroing is enqueued. A hook may enqueue work on `stream` (an event record, a stream wait) but
  // must not call this object; time spent in it delays the enqueueing of the rest of the pass, so
  // it should hand slow work to another thread. When the call returns an error, the hooks may have
  // been called for only part of the gradients.
  Status ForwardBackward(const float* d_dense_params, const float* d_rows, size_t num_rows,
                         const int32_t* d_row_index, const float* d_dense_features, const float* d_labels, int batch,
                         float* d_dense_grad, float* d_row_grad, float* d_probs, float* d_loss, void* stream,
                         const BackwardHooks* hooks = nullptr);

  // Forward pass only: writes d_probs [batch]. Same inputs, errors and preconditions.
  Status Predict(const float* d_dense_params, const float* d_rows, size_t num_rows, const int32_t* d_row_index,
                 const float* d_dense_features, int batch, float* d_probs, void* stream);

  // Host conveniences for tests and for the CPU-side worker until the full GPU pipeline exists:
  // the arguments of models::Model::ForwardBackward / Predict (host memory, sizes as there), copied
  // to device staging buffers, computed, and copied back; the call returns when results are on the
  // host. Staging buffers grow to the largest call seen and are reused. Runs on a stream of its
  // own. Errors: InvalidArgument for a batch whose shape or feature counts do not match the model,
  // batch.size > max_batch, or a row_index entry outside [0, num_rows) (checked on the host, as
  // models::CheckInputs does); ResourceExhausted / Internal for CUDA errors.
  Status ForwardBackwardHost(const float* dense_params, const float* rows, size_t num_rows, const int32_t* row_index,
                             const data::Batch& batch, float* dense_grad, float* row_grad, float* probs, float* loss);
  Status PredictHost(const float* dense_params, const float* rows, size_t num_rows, const int32_t* row_index,
                     const data::Batch& batch, float* probs);

  struct Impl;

 private:
  explicit GpuDlrm(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace osprey::cuda
