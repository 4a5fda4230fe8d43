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
#include <utility>

#include "worker/cuda/dlrm/gpu_dlrm_impl.h"

namespace osprey::cuda {
namespace {

constexpr float kOne = 1.0f;
constexpr float kZero = 0.0f;

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

Status GpuDlrm::Impl::MlpForward(const std::vector<DenseLayer>& layers, const float* params, const float* input,
                                 int input_ld, int n, std::vector<DeviceBuffer>* acts, cudaStream_t stream) {
  const float* x = input;
  int x_ld = input_ld;
  for (size_t l = 0; l < layers.size(); ++l) {
    const DenseLayer& layer = layers[l];
    float* y = (*acts)[l].as<float>();
    if (layer.in == 0) {
      // No inputs (num_dense == 0): the layer's output is its bias. cuBLAS rejects ld = 0.
      OSPREY_CUDA_RETURN_IF_ERROR(
          cudaMemsetAsync(y, 0, sizeof(float) * static_cast<size_t>(n) * static_cast<size_t>(layer.out), stream));
    } else {
      OSPREY_CUBLAS_RETURN_IF_ERROR(cublasSgemm(blas, CUBLAS_OP_N, CUBLAS_OP_N, layer.out, n, layer.in, &kOne,
                                                params + layer.weight, layer.out, x, x_ld, &kZero, y, layer.out));
    }
    OSPREY_RETURN_IF_ERROR(dlrm::BiasActivation(y, params + layer.bias, n, layer.out, layer.relu, stream));
    x = y;
    x_ld = layer.out;
  }
  return Status::OK();
}

Status GpuDlrm::Impl::MlpBackward(const std::vector<DenseLayer>& layers, const float* params, const float* input,
                                  int input_ld, int n, const std::vector<DeviceBuffer>& acts, float* grad,
                                  float* spare, float* dense_grad, float* input_grad, int input_grad_ld,
                                  cudaStream_t stream) {
  // `g` holds d loss / d(output of layer l), masked in place into d loss / d(pre-activation).
  float* g = grad;
  float* next = spare;
  const float* ones = buffers.ones.as<float>();
  for (size_t l = layers.size(); l-- > 0;) {
    const DenseLayer& layer = layers[l];
    if (layer.relu) {
      OSPREY_RETURN_IF_ERROR(
          dlrm::ReluGrad(g, acts[l].as<float>(), static_cast<size_t>(n) * static_cast<size_t>(layer.out), stream));
    }
    const float* x = l > 0 ? acts[l - 1].as<float>() : input;
    const int x_ld = l > 0 ? layers[l - 1].out : input_ld;
    if (layer.in > 0) {
      OSPREY_CUBLAS_RETURN_IF_ERROR(cublasSgemm(blas, CUBLAS_OP_N, CUBLAS_OP_T, layer.out, layer.in, n, &kOne, g,
                                                layer.out, x, x_ld, &kZero, dense_grad + layer.weight, layer.out));
    }
    OSPREY_CUBLAS_RETURN_IF_ERROR(cublasSgemv(blas, CUBLAS_OP_N, layer.out, n, &kOne, g, layer.out, ones, 1, &kZero,
                                              dense_grad + layer.bias, 1));
    if (l == 0 && input_grad == nullptr) break;
    float* dst = l > 0 ? next : input_grad;
    const int dst_ld = l > 0 ? layer.in : input_grad_ld;
    if (layer.in > 0) {
      OSPREY_CUBLAS_RETURN_IF_ERROR(cublasSgemm(blas, CUBLAS_OP_T, CUBLAS_OP_N, layer.in, n, layer.out, &kOne,
                                                params + layer.weight, layer.out, g, layer.out, &kZero, dst, dst_ld));
    }
    if (l > 0) std::swap(g, next);
  }
  return Status::OK();
}

Status GpuDlrm::Impl::Forward(const float* params, const float* rows, size_t num_rows, const int32_t* row_index,
                              const float* dense, int n, cudaStream_t stream) {
  OSPREY_RETURN_IF_ERROR(MlpForward(bottom, params, dense, config.num_dense, n, &buffers.bottom_acts, stream));
  OSPREY_RETURN_IF_ERROR(dlrm::InteractionForward(ShapeFor(num_rows), n, buffers.bottom_acts.back().as<float>(), rows,
                                                  row_index, buffers.top_input.as<float>(), stream));
  return MlpForward(top, params, buffers.top_input.as<float>(), top_ld, n, &buffers.top_acts, stream);
}

Status GpuDlrm::Impl::ForwardBackward(const float* params, const float* rows, size_t num_rows,
                                      const int32_t* row_index, const float* dense, const float* labels, int n,
                                      float* dense_grad, float* row_grad, float* probs, float* loss,
                                      cudaStream_t stream) {
  OSPREY_RETURN_IF_ERROR(Forward(params, rows, num_rows, row_index, dense, n, stream));
  float* grad = buffers.grad_a.as<float>();
  float* spare = buffers.grad_b.as<float>();
  float* top_grad = buffers.top_grad.as<float>();
  OSPREY_RETURN_IF_ERROR(dlrm::LogitLoss(buffers.top_acts.back().as<float>(), labels, n, probs, grad, loss, stream));
  OSPREY_RETURN_IF_ERROR(MlpBackward(top, params, buffers.top_input.as<float>(), top_ld, n, buffers.top_acts, grad,
                                     spare, dense_grad, top_grad, top_ld, stream));
  // d loss / d z_0 lands in `grad` [n x d]: the bottom MLP's output gradient.
  OSPREY_RETURN_IF_ERROR(dlrm::InteractionBackward(ShapeFor(num_rows), n, buffers.bottom_acts.back().as<float>(),
                                                   rows, row_index, top_grad, grad, row_grad, stream));
  return MlpBackward(bottom, params, dense, config.num_dense, n, buffers.bottom_acts, grad, spare, dense_grad,
                     /*input_grad=*/nullptr, 0, stream);
}

}  // namespace osprey::cuda
