// Element-wise kernels of GpuDlrm's MLPs and loss: bias + ReLU after a cuBLAS product, the ReLU
// backward mask, the bf16 casts of the bf16 mode, and the sigmoid / binary cross-entropy head.
// The bf16 copies are written by the same pass that produces the fp32 value where there is one,
// so bf16 mode costs an extra store, not an extra read of the activations.
#include <string>

#include "worker/cuda/cuda_check.cuh"
#include "worker/cuda/dlrm/dlrm_kernels.h"

namespace osprey::cuda::dlrm {
namespace {

constexpr int kThreads = 256;
constexpr int kLossThreads = 512;  // one block; a power of two for the tree reduction
constexpr size_t kMaxBlocks = 65535;

// Blocks of a grid-stride loop over `count` elements: enough to fill the device, capped so the
// index arithmetic stays cheap.
unsigned int Blocks(size_t count) {
  const size_t blocks = (count + kThreads - 1) / kThreads;
  return static_cast<unsigned int>(blocks < kMaxBlocks ? blocks : kMaxBlocks);
}

// Numerically stable logistic function, the same formula as models::Sigmoid.
__device__ __forceinline__ float StableSigmoid(float logit) {
  if (logit >= 0.0f) return 1.0f / (1.0f + expf(-logit));
  const float e = expf(logit);
  return e / (1.0f + e);
}

__global__ void BiasActivationKernel(float* __restrict__ y, const float* __restrict__ bias, size_t count, int out,
                                     bool relu, __nv_bfloat16* __restrict__ y_bf16) {
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < count;
       i += static_cast<size_t>(gridDim.x) * blockDim.x) {
    float v = y[i] + bias[i % static_cast<size_t>(out)];
    if (relu) v = fmaxf(v, 0.0f);
    y[i] = v;
    if (y_bf16 != nullptr) y_bf16[i] = __float2bfloat16_rn(v);
  }
}

__global__ void ReluGradKernel(float* __restrict__ g, const float* __restrict__ y, size_t count,
                               __nv_bfloat16* __restrict__ g_bf16) {
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < count;
       i += static_cast<size_t>(gridDim.x) * blockDim.x) {
    float v = g[i];
    if (!(y[i] > 0.0f)) {
      v = 0.0f;
      g[i] = v;
    }
    if (g_bf16 != nullptr) g_bf16[i] = __float2bfloat16_rn(v);
  }
}

__global__ void CastToBf16Kernel(const float* __restrict__ src, size_t src_ld, size_t cols, size_t count,
                                 __nv_bfloat16* __restrict__ dst, size_t dst_ld) {
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < count;
       i += static_cast<size_t>(gridDim.x) * blockDim.x) {
    const size_t r = i / cols, c = i - r * cols;
    dst[r * dst_ld + c] = __float2bfloat16_rn(src[r * src_ld + c]);
  }
}

// One block: each thread takes a strided share of the samples, then a fixed-shape tree adds the
// partial sums, so the loss is the same on every run (no atomics).
__global__ void LogitLossKernel(const float* __restrict__ logits, const float* __restrict__ labels, int n,
                                float* __restrict__ probs, float* __restrict__ logit_grad, float* __restrict__ loss) {
  __shared__ double partial[kLossThreads];
  const float inv_n = 1.0f / static_cast<float>(n);
  double sum = 0.0;
  for (int b = threadIdx.x; b < n; b += kLossThreads) {
    const float l = logits[b];
    const float p = StableSigmoid(l);
    probs[b] = p;
    logit_grad[b] = (p - labels[b]) * inv_n;
    const double ld = l;
    sum += fmax(ld, 0.0) + log1p(exp(-fabs(ld))) - static_cast<double>(labels[b]) * ld;
  }
  partial[threadIdx.x] = sum;
  __syncthreads();
  for (int half = kLossThreads / 2; half > 0; half /= 2) {
    if (static_cast<int>(threadIdx.x) < half) partial[threadIdx.x] += partial[threadIdx.x + half];
    __syncthreads();
  }
  if (threadIdx.x == 0) *loss = static_cast<float>(partial[0] / n);
}

__global__ void SigmoidKernel(const float* __restrict__ logits, int n, float* __restrict__ probs) {
  for (int b = blockIdx.x * blockDim.x + threadIdx.x; b < n; b += gridDim.x * blockDim.x) {
    probs[b] = StableSigmoid(logits[b]);
  }
}

}  // namespace

Status BiasActivation(float* y, const float* bias, int n, int out, bool relu, __nv_bfloat16* y_bf16,
                      cudaStream_t stream) {
  const size_t count = static_cast<size_t>(n) * static_cast<size_t>(out);
  if (count == 0) return Status::OK();
  BiasActivationKernel<<<Blocks(count), kThreads, 0, stream>>>(y, bias, count, out, relu, y_bf16);
  OSPREY_CUDA_RETURN_IF_LAUNCH_FAILED();
  return Status::OK();
}

Status ReluGrad(float* g, const float* y, size_t count, __nv_bfloat16* g_bf16, cudaStream_t stream) {
  if (count == 0) return Status::OK();
  ReluGradKernel<<<Blocks(count), kThreads, 0, stream>>>(g, y, count, g_bf16);
  OSPREY_CUDA_RETURN_IF_LAUNCH_FAILED();
  return Status::OK();
}

Status CastToBf16(const float* src, int src_ld, int rows, int cols, __nv_bfloat16* dst, int dst_ld,
                  cudaStream_t stream) {
  if (rows < 0 || cols < 0 || src_ld < cols || dst_ld < cols) {
    return InvalidArgument("CastToBf16: bad shape " + std::to_string(rows) + " x " + std::to_string(cols) +
                           " (src_ld " + std::to_string(src_ld) + ", dst_ld " + std::to_string(dst_ld) + ")");
  }
  const size_t count = static_cast<size_t>(rows) * static_cast<size_t>(cols);
  if (count == 0) return Status::OK();
  CastToBf16Kernel<<<Blocks(count), kThreads, 0, stream>>>(src, static_cast<size_t>(src_ld),
                                                            static_cast<size_t>(cols), count, dst,
                                                            static_cast<size_t>(dst_ld));
  OSPREY_CUDA_RETURN_IF_LAUNCH_FAILED();
  return Status::OK();
}

Status LogitLoss(const float* logits, const float* labels, int n, float* probs, float* logit_grad, float* loss,
                 cudaStream_t stream) {
  if (n <= 0) return InvalidArgument("LogitLoss needs at least one sample");
  LogitLossKernel<<<1, kLossThreads, 0, stream>>>(logits, labels, n, probs, logit_grad, loss);
  OSPREY_CUDA_RETURN_IF_LAUNCH_FAILED();
  return Status::OK();
}

Status Sigmoid(const float* logits, int n, float* probs, cudaStream_t stream) {
  if (n <= 0) return Status::OK();
  SigmoidKernel<<<Blocks(static_cast<size_t>(n)), kThreads, 0, stream>>>(logits, n, probs);
  OSPREY_CUDA_RETURN_IF_LAUNCH_FAILED();
  return Status::OK();
}

}  // namespace osprey::cuda::dlrm
