// GpuDlrm's forward and backward passes: cuBLAS products for the MLPs, the kernels of
// dlrm_kernels.h for everything else.
//
// Row-major on column-major cuBLAS: a row-major matrix M [r x c] is, to cuBLAS, the column-major
// matrix M^T [c x r] with leading dimension c. So every row-major product C = A * B is issued as
// C^T = B^T * A^T with the operands swapped, and the layer's W [in x out] (input-major) is the
// column-major W^T [out x in], ld = out:
//   forward      Y [n x out]  = X [n x in] * W           ->  gemm(N, N, out, n, in;  W, X  -> Y)
//   weight grad  dW [in x out] = X^T * G [n x out]       ->  gemm(N, T, out, in, n;  G, X  -> dW)
//   input grad   dX [n x in]  = G * W^T                  ->  gemm(T, N, in, n, out;  W, G  -> dX)
//   bias grad    db [out]     = G^T * 1                  ->  gemv(N, out x n;        G, 1  -> db)
// All products overwrite (beta = 0): each layer's slice of dense_grad is written exactly once.
//
// bf16 mode: the three gemms read bf16 copies of W, X and G (fp32 accumulation and output); the
// gemv, and everything outside the products, stays fp32. The copies are made where the fp32 value
// is produced: W once per call (Forward), each layer's output by its bias + ReLU kernel, G by the
// ReLU backward mask; only the two MLP inputs (dense features, interaction output) and the
// gradient of the linear last layer need a cast of their own.
#include <utility>

#include "worker/cuda/dlrm/gpu_dlrm_impl.h"

namespace osprey::cuda {
namespace {

constexpr float kOne = 1.0f;
constexpr float kZero = 0.0f;

// Layer l's output as the operand of layer l + 1's products.
Operand LayerOutput(const GpuDlrm::Impl::MlpActs& acts, const DenseLayer& layer, size_t l) {
  return Operand{acts.f32[l].as<float>(), layer.out, acts.bf16[l].as<__nv_bfloat16>(), layer.out};
}

void NotifyDense(const BackwardHooks* hooks, size_t from) {
  if (hooks != nullptr && hooks->dense_ready) hooks->dense_ready(from);
}

}  // namespace

dlrm::InteractionShape GpuDlrm::Impl::ShapeFor(size_t num_rows) const {
  dlrm::InteractionShape s;
  s.num_sparse = config.num_sparse;
  s.d = config.embedding_dim;
  s.d_stride = s.d % 2 == 0 ? s.d + 1 : s.d;
  s.num_pairs = num_pairs;
  s.top_ld = top_ld;
  s.pairs = buffers.pairs.as<uint32_t>();
  s.num_rows = num_rows;
  return s;
}

Operand GpuDlrm::Impl::Weights(const float* params, const DenseLayer& layer) const {
  const __nv_bfloat16* bf16 = buffers.params_bf16.as<__nv_bfloat16>();
  return Operand{params + layer.weight, layer.out, bf16 != nullptr ? bf16 + layer.weight : nullptr, layer.out};
}

Operand GpuDlrm::Impl::DenseInput(const float* dense) const {
  return Operand{dense, config.num_dense, buffers.dense_bf16.as<__nv_bfloat16>(), Bf16Ld(config.num_dense)};
}

Operand GpuDlrm::Impl::TopInput() const {
  return Operand{buffers.top_input.as<float>(), top_ld, buffers.top_input_bf16.as<__nv_bfloat16>(), Bf16Ld(top_in)};
}

Status GpuDlrm::Impl::Gemm(cublasOperation_t op_a, cublasOperation_t op_b, int m, int n, int k, const Operand& a,
                           const Operand& b, float* c, int ldc) {
  if (bf16()) {
    OSPREY_CUBLAS_RETURN_IF_ERROR(cublasGemmEx(blas, op_a, op_b, m, n, k, &kOne, a.bf16, CUDA_R_16BF, a.bf16_ld,
                                               b.bf16, CUDA_R_16BF, b.bf16_ld, &kZero, c, CUDA_R_32F, ldc,
                                               CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
  } else {
    OSPREY_CUBLAS_RETURN_IF_ERROR(
        cublasSgemm(blas, op_a, op_b, m, n, k, &kOne, a.f32, a.ld, b.f32, b.ld, &kZero, c, ldc));
  }
  return Status::OK();
}

Status GpuDlrm::Impl::MlpForward(const std::vector<DenseLayer>& layers, const float* params, Operand input, int n,
                                 MlpActs* acts, cudaStream_t stream) {
  Operand x = input;
  for (size_t l = 0; l < layers.size(); ++l) {
    const DenseLayer& layer = layers[l];
    float* y = acts->f32[l].as<float>();
    if (layer.in == 0) {
      // No inputs (num_dense == 0): the layer's output is its bias. cuBLAS rejects ld = 0.
      OSPREY_CUDA_RETURN_IF_ERROR(
          cudaMemsetAsync(y, 0, sizeof(float) * static_cast<size_t>(n) * static_cast<size_t>(layer.out), stream));
    } else {
      OSPREY_RETURN_IF_ERROR(Gemm(CUBLAS_OP_N, CUBLAS_OP_N, layer.out, n, layer.in, Weights(params, layer), x, y,
                                  layer.out));
    }
    OSPREY_RETURN_IF_ERROR(dlrm::BiasActivation(y, params + layer.bias, n, layer.out, layer.relu,
                                                acts->bf16[l].as<__nv_bfloat16>(), stream));
    x = LayerOutput(*acts, layer, l);
  }
  return Status::OK();
}

Status GpuDlrm::Impl::MlpBackward(const std::vector<DenseLayer>& layers, const float* params, Operand input, int n,
                                  const MlpActs& acts, float* grad, float* spare, float* dense_grad,
                                  float* input_grad, int input_grad_ld, const BackwardHooks* hooks,
                                  cudaStream_t stream) {
  // `g` holds d loss / d(output of layer l), masked in place into d loss / d(pre-activation).
  float* g = grad;
  float* next = spare;
  __nv_bfloat16* g_bf16 = buffers.grad_bf16.as<__nv_bfloat16>();  // null unless bf16 mode
  const float* ones = buffers.ones.as<float>();
  for (size_t l = layers.size(); l-- > 0;) {
    const DenseLayer& layer = layers[l];
    if (layer.relu) {
      OSPREY_RETURN_IF_ERROR(dlrm::ReluGrad(g, acts.f32[l].as<float>(),
                                            static_cast<size_t>(n) * static_cast<size_t>(layer.out), g_bf16, stream));
    } else if (g_bf16 != nullptr) {
      OSPREY_RETURN_IF_ERROR(dlrm::CastToBf16(g, layer.out, n, layer.out, g_bf16, layer.out, stream));
    }
    const Operand g_op{g, layer.out, g_bf16, layer.out};
    const Operand x = l > 0 ? LayerOutput(acts, layers[l - 1], l - 1) : input;
    if (layer.in > 0) {
      OSPREY_RETURN_IF_ERROR(
          Gemm(CUBLAS_OP_N, CUBLAS_OP_T, layer.out, layer.in, n, g_op, x, dense_grad + layer.weight, layer.out));
    }
    OSPREY_CUBLAS_RETURN_IF_ERROR(cublasSgemv(blas, CUBLAS_OP_N, layer.out, n, &kOne, g, layer.out, ones, 1, &kZero,
                                              dense_grad + layer.bias, 1));
    NotifyDense(hooks, layer.weight);
    if (l == 0 && input_grad == nullptr) break;
    float* dst = l > 0 ? next : input_grad;
    const int dst_ld = l > 0 ? layer.in : input_grad_ld;
    if (layer.in > 0) {
      OSPREY_RETURN_IF_ERROR(
          Gemm(CUBLAS_OP_T, CUBLAS_OP_N, layer.in, n, layer.out, Weights(params, layer), g_op, dst, dst_ld));
    }
    if (l > 0) std::swap(g, next);
  }
  return Status::OK();
}

Status GpuDlrm::Impl::Forward(const float* params, const float* rows, size_t num_rows, const int32_t* row_index,
                              const float* dense, int n, cudaStream_t stream) {
  const int num_dense = config.num_dense;
  if (bf16()) {
    // The whole vector in one launch: the biases ride along (unused) rather than costing a launch
    // per layer. num_params < 2^31 (ValidateDlrmConfig).
    const int count = static_cast<int>(num_params);
    OSPREY_RETURN_IF_ERROR(
        dlrm::CastToBf16(params, count, 1, count, buffers.params_bf16.as<__nv_bfloat16>(), count, stream));
    OSPREY_RETURN_IF_ERROR(dlrm::CastToBf16(dense, num_dense, n, num_dense, buffers.dense_bf16.as<__nv_bfloat16>(),
                                            Bf16Ld(num_dense), stream));
  }
  OSPREY_RETURN_IF_ERROR(MlpForward(bottom, params, DenseInput(dense), n, &buffers.bottom_acts, stream));
  OSPREY_RETURN_IF_ERROR(dlrm::InteractionForward(ShapeFor(num_rows), n, buffers.bottom_acts.f32.back().as<float>(),
                                                  rows, row_index, buffers.top_input.as<float>(), stream));
  if (bf16()) {
    OSPREY_RETURN_IF_ERROR(dlrm::CastToBf16(buffers.top_input.as<float>(), top_ld, n, top_in,
                                            buffers.top_input_bf16.as<__nv_bfloat16>(), Bf16Ld(top_in), stream));
  }
  return MlpForward(top, params, TopInput(), n, &buffers.top_acts, stream);
}

Status GpuDlrm::Impl::ForwardBackward(const float* params, const float* rows, size_t num_rows,
                                      const int32_t* row_index, const float* dense, const float* labels, int n,
                                      float* dense_grad, float* row_grad, float* probs, float* loss,
                                      const BackwardHooks* hooks, cudaStream_t stream) {
  OSPREY_RETURN_IF_ERROR(Forward(params, rows, num_rows, row_index, dense, n, stream));
  float* grad = buffers.grad_a.as<float>();
  float* spare = buffers.grad_b.as<float>();
  float* top_grad = buffers.top_grad.as<float>();
  OSPREY_RETURN_IF_ERROR(
      dlrm::LogitLoss(buffers.top_acts.f32.back().as<float>(), labels, n, probs, grad, loss, stream));
  OSPREY_RETURN_IF_ERROR(MlpBackward(top, params, TopInput(), n, buffers.top_acts, grad, spare, dense_grad, top_grad,
                                     top_ld, hooks, stream));
  // d loss / d z_0 lands in `grad` [n x d]: the bottom MLP's output gradient.
  OSPREY_RETURN_IF_ERROR(dlrm::InteractionBackward(ShapeFor(num_rows), n, buffers.bottom_acts.f32.back().as<float>(),
                                                   rows, row_index, top_grad, grad, row_grad, stream));
  if (hooks != nullptr && hooks->rows_ready) hooks->rows_ready();
  return MlpBackward(bottom, params, DenseInput(dense), n, buffers.bottom_acts, grad, spare, dense_grad,
                     /*input_grad=*/nullptr, 0, hooks, stream);
}

}  // namespace osprey::cuda
