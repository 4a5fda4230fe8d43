// Private to worker/cuda/dlrm: GpuDlrm's state, shared by gpu_dlrm.cc (lifecycle, argument
// checks, host conveniences) and dlrm_passes.cc (the forward and backward passes).
#pragma once

#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <string>
#include <vector>

#include "worker/cuda/codec_kernels.h"
#include "worker/cuda/cuda_check.cuh"
#include "worker/cuda/dlrm/dlrm_kernels.h"
#include "worker/cuda/dlrm/gpu_dlrm.h"

namespace osprey::cuda {

inline Status CublasStatus(cublasStatus_t st, const char* expr, const char* file, int line) {
  const std::string what = std::string(file) + ":" + std::to_string(line) + ": " + expr + ": " +
                           cublasGetStatusName(st) + " (" + cublasGetStatusString(st) + ")";
  if (st == CUBLAS_STATUS_ALLOC_FAILED) return ResourceExhausted(what);
  return Internal(what);
}

}  // namespace osprey::cuda

// Returns a Status from the enclosing function when the cuBLAS call fails.
#define OSPREY_CUBLAS_RETURN_IF_ERROR(expr)                                                \
  do {                                                                                     \
    const cublasStatus_t _osprey_cublas_st = (expr);                                       \
    if (_osprey_cublas_st != CUBLAS_STATUS_SUCCESS) {                                      \
      return ::osprey::cuda::CublasStatus(_osprey_cublas_st, #expr, __FILE__, __LINE__); \
    }                                                                                      \
  } while (0)

namespace osprey::cuda {

// Makes a device current for a scope and restores the caller's device when the scope ends, so
// that GpuDlrm never changes which device the calling thread works on.
class ScopedDevice {
 public:
  ScopedDevice() = default;
  ScopedDevice(const ScopedDevice&) = delete;
  ScopedDevice& operator=(const ScopedDevice&) = delete;
  ~ScopedDevice() {
    if (restore_ >= 0) (void)cudaSetDevice(restore_);
  }

  Status Enter(int device) {
    // Launch failures are read with cudaGetLastError right after each launch; clear a stale,
    // non-sticky error left by unrelated earlier CUDA calls so it is not blamed on our kernels.
    (void)cudaGetLastError();
    int current = 0;
    OSPREY_CUDA_RETURN_IF_ERROR(cudaGetDevice(&current));
    if (current != device) {
      OSPREY_CUDA_RETURN_IF_ERROR(cudaSetDevice(device));
      restore_ = current;
    }
    return Status::OK();
  }

 private:
  int restore_ = -1;
};

// One fully connected layer: offsets into the flat parameter vector (models::Dlrm's layout).
struct DenseLayer {
  int in = 0;
  int out = 0;
  size_t weight = 0;  // W [in x out], input-major
  size_t bias = 0;    // b [out]
  bool relu = false;
};

// A matrix operand of a product: its fp32 data and, in bf16 mode, its bf16 copy, each with its
// own row stride (in elements). Only the one the mode uses need be set.
struct Operand {
  const float* f32 = nullptr;
  int ld = 0;
  const __nv_bfloat16* bf16 = nullptr;
  int bf16_ld = 0;
};

// Rows of bf16 operands that a caller pads: a multiple of 8 elements keeps every row 16-byte
// aligned, which cuBLAS's bf16 tensor-core kernels need (other strides work, more slowly).
inline int Bf16Ld(int cols) { return (cols + 7) / 8 * 8; }

struct GpuDlrm::Impl {
  // One MLP's activations: per layer, its output [max_batch x out] and, in bf16 mode, the bf16
  // copy of that output where it is the next layer's input (every layer but the last; the other
  // entries are empty buffers, whose data() is null).
  struct MlpActs {
    std::vector<DeviceBuffer> f32;
    std::vector<DeviceBuffer> bf16;
  };
  // Device memory sized for max_batch samples at Make.
  struct Buffers {
    DeviceBuffer pairs;           // u32 [num_pairs], see dlrm::InteractionShape
    MlpActs bottom_acts;          // per bottom layer
    MlpActs top_acts;             // per top layer
    DeviceBuffer top_input;       // [max_batch x top_ld]
    DeviceBuffer top_grad;        // d loss / d top_input, [max_batch x top_ld]
    DeviceBuffer grad_a, grad_b;  // ping-pong activation gradients [max_batch x widest]
    DeviceBuffer ones;            // [max_batch] of 1.0f: bias gradients as a gemv
    // bf16 mode only (empty otherwise): the operands' bf16 copies.
    DeviceBuffer params_bf16;     // [num_params]: the whole parameter vector (biases unused)
    DeviceBuffer dense_bf16;      // [max_batch x Bf16Ld(num_dense)]: the bottom MLP's input
    DeviceBuffer top_input_bf16;  // [max_batch x Bf16Ld(top_in)]: the top MLP's input
    DeviceBuffer grad_bf16;       // [max_batch x widest]: the pre-activation gradient of one layer
  };
  // Grow-only device copies of the *Host conveniences' arguments and results.
  struct Staging {
    DeviceBuffer params, rows, row_index, dense, labels, dense_grad, row_grad, probs, loss;
  };

  ~Impl();

  // The passes (dlrm_passes.cc). Preconditions: arguments checked, device current, cuBLAS on
  // `stream`, 0 < n <= max_batch.
  // Forward leaves every activation in `buffers` (and, in bf16 mode, the bf16 copies of the
  // parameters and of every product's input); the logits in buffers.top_acts.f32.back().
  Status Forward(const float* params, const float* rows, size_t num_rows, const int32_t* row_index,
                 const float* dense, int n, cudaStream_t stream);
  // Forward, loss and backward, calling `hooks` (may be null) as GpuDlrm::ForwardBackward says;
  // row_grad must already be zero.
  Status ForwardBackward(const float* params, const float* rows, size_t num_rows, const int32_t* row_index,
                         const float* dense, const float* labels, int n, float* dense_grad, float* row_grad,
                         float* probs, float* loss, const BackwardHooks* hooks, cudaStream_t stream);
  // Runs `layers` on input [n x layers[0].in]; acts receives each layer's output (and its bf16
  // copy where acts has one).
  Status MlpForward(const std::vector<DenseLayer>& layers, const float* params, Operand input, int n, MlpActs* acts,
                    cudaStream_t stream);
  // Back-propagates d(output of the last layer), in `grad` (clobbered, as is `spare`, both
  // [n x widest]) through `layers`: writes each layer's W and b gradient into dense_grad, calling
  // hooks->dense_ready(layer.weight) once both are enqueued, and, when input_grad is not null,
  // d(input) there with row stride input_grad_ld. `input` and `acts` as Forward left them.
  Status MlpBackward(const std::vector<DenseLayer>& layers, const float* params, Operand input, int n,
                     const MlpActs& acts, float* grad, float* spare, float* dense_grad, float* input_grad,
                     int input_grad_ld, const BackwardHooks* hooks, cudaStream_t stream);
  // C [m x n] (column-major, ldc) = op_a(A) * op_b(B): cublasSgemm on the fp32 operands, or in
  // bf16 mode cublasGemmEx on their bf16 copies with fp32 accumulation and output.
  Status Gemm(cublasOperation_t op_a, cublasOperation_t op_b, int m, int n, int k, const Operand& a,
              const Operand& b, float* c, int ldc);
  // Layer `layer`'s W as the column-major W^T [out x in] of the products (dlrm_passes.cc).
  Operand Weights(const float* params, const DenseLayer& layer) const;
  // The two MLPs' inputs as operands: the caller's dense features, the interaction's output.
  Operand DenseInput(const float* dense) const;
  Operand TopInput() const;
  dlrm::InteractionShape ShapeFor(size_t num_rows) const;
  bool bf16() const { return options.precision == MlpPrecision::kBf16; }

  models::DlrmConfig config;
  GpuDlrmOptions options;
  int device = 0;
  int max_batch = 0;
  int top_in = 0;     // embedding_dim + (F + 1) * F / 2
  int top_ld = 0;     // top_in rounded up to 4 floats: 16-byte aligned rows for the tensor cores
  int num_pairs = 0;
  size_t num_params = 0;
  std::vector<DenseLayer> bottom;
  std::vector<DenseLayer> top;
  cublasHandle_t blas = nullptr;
  cudaStream_t host_stream = nullptr;  // the *Host conveniences' stream
  Buffers buffers;
  Staging staging;
};

}  // namespace osprey::cuda
