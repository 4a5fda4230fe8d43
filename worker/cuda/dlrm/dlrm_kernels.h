// Private to worker/cuda/dlrm: the launchers of GpuDlrm's own kernels (the matrix products go
// through cuBLAS in dlrm_passes.cc). Every launcher only enqueues on `stream` and returns launch
// errors; all pointers are device memory. Matrices are row-major, sample-major. Every conversion
// to bf16 rounds to nearest, ties to even.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "common/status.h"

namespace osprey::cuda::dlrm {

// y[n x out] = y + b (broadcast over rows), then ReLU when `relu`. When y_bf16 is not null, also
// writes the result as bf16 there ([n x out], the next layer's product operand in bf16 mode).
Status BiasActivation(float* y, const float* bias, int n, int out, bool relu, __nv_bfloat16* y_bf16,
                      cudaStream_t stream);

// g[i] = y[i] > 0 ? g[i] : 0 for i < count (the ReLU backward, y the layer's ReLU output). When
// g_bf16 is not null, also writes the masked g as bf16 there.
Status ReluGrad(float* g, const float* y, size_t count, __nv_bfloat16* g_bf16, cudaStream_t stream);

// dst[r * dst_ld + c] = bf16(src[r * src_ld + c]) for r < rows, c < cols; nothing else is read or
// written (padding columns stay as they are).
Status CastToBf16(const float* src, int src_ld, int rows, int cols, __nv_bfloat16* dst, int dst_ld,
                  cudaStream_t stream);

// For n logits and 0/1 labels: probs = sigmoid(logit), logit_grad = (p - y) / n, and *loss = mean
// of softplus(l) - y * l, summed in double in a fixed order (one block), as models::LogitLossAndGrad.
Status LogitLoss(const float* logits, const float* labels, int n, float* probs, float* logit_grad, float* loss,
                 cudaStream_t stream);

// probs[b] = sigmoid(logits[b]).
Status Sigmoid(const float* logits, int n, float* probs, cudaStream_t stream);

// Shape of the dot interaction: per sample, vectors = num_sparse + 1 vectors of d floats (z_0 from
// the bottom MLP, then the gathered rows), kept in shared memory with row stride d_stride (odd, so
// that the threads of a warp reading different vectors hit different banks).
struct InteractionShape {
  int num_sparse = 0;
  int d = 0;
  int d_stride = 0;
  int num_pairs = 0;         // vectors * (vectors - 1) / 2
  int top_ld = 0;            // row stride of top_input / its gradient (>= d + num_pairs)
  const uint32_t* pairs = nullptr;  // [num_pairs]: (i << 16) | j in the CPU model's order
  size_t num_rows = 0;       // rows outside [0, num_rows) read as zero and take no gradient
};

// Shared memory per block of the two kernels.
size_t InteractionForwardSmem(const InteractionShape& shape);
size_t InteractionBackwardSmem(const InteractionShape& shape);

// Once per device, before the first launch: checks that this build has kernel images for the
// current device (FailedPrecondition naming its compute capability otherwise) and raises the
// kernels' dynamic shared memory limit where `shape` needs more than the default 48 KiB.
// InvalidArgument when it needs more than the device allows per block.
Status PrepareKernels(const InteractionShape& shape);

// top_input[b] = [z_0 | z_i . z_j for i < j] with z_0 = bottom_out[b] and z_{f+1} =
// rows[row_index[b * num_sparse + f]], for b < n.
Status InteractionForward(const InteractionShape& shape, int n, const float* bottom_out, const float* rows,
                          const int32_t* row_index, float* top_input, cudaStream_t stream);

// Given top_grad = d loss / d top_input: writes z0_grad [n x d] (= d loss / d bottom_out) and
// atomically adds each sample's row gradients into row_grad [num_rows x d] (zeroed by the caller).
Status InteractionBackward(const InteractionShape& shape, int n, const float* bottom_out, const float* rows,
                           const int32_t* row_index, const float* top_grad, float* z0_grad, float* row_grad,
                           cudaStream_t stream);

}  // namespace osprey::cuda::dlrm
