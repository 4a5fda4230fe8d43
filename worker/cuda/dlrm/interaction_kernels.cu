// GpuDlrm's dot interaction, forward and backward, each fused with the embedding gather (and the
// backward with the row-gradient scatter-add), one sample per block. The sample's vectors z_0 ..
// z_F (a few KiB for Criteo shapes) are gathered into shared memory once and then read by every
// pair, instead of materialising a [batch x vectors x d] tensor in global memory.
#include <string>

#include "worker/cuda/cuda_check.cuh"
#include "worker/cuda/dlrm/dlrm_kernels.h"

namespace osprey::cuda::dlrm {
namespace {

constexpr int kThreads = 128;
constexpr size_t kDefaultSmem = 48 * 1024;  // dynamic shared memory a block may use without opt-in

// z[v * d_stride + c] = vector v of sample b: z_0 from the bottom MLP, z_{f+1} the row of feature
// f, or zeros for an index outside [0, num_rows) (a caller bug that must not become a fault).
__device__ __forceinline__ void GatherSample(const InteractionShape& s, int b, const float* __restrict__ bottom_out,
                                             const float* __restrict__ rows, const int32_t* __restrict__ row_index,
                                             float* z) {
  const int vectors = s.num_sparse + 1;
  for (int t = threadIdx.x; t < vectors * s.d; t += blockDim.x) {
    const int v = t / s.d;
    const int c = t - v * s.d;
    float x = 0.0f;
    if (v == 0) {
      x = bottom_out[static_cast<size_t>(b) * s.d + c];
    } else {
      const int32_t r = row_index[static_cast<size_t>(b) * s.num_sparse + (v - 1)];
      if (r >= 0 && static_cast<size_t>(r) < s.num_rows) x = rows[static_cast<size_t>(r) * s.d + c];
    }
    z[v * s.d_stride + c] = x;
  }
}

__global__ void __launch_bounds__(kThreads)
    InteractionForwardKernel(InteractionShape s, const float* __restrict__ bottom_out, const float* __restrict__ rows,
                             const int32_t* __restrict__ row_index, float* __restrict__ top_input) {
  extern __shared__ float z[];
  const int b = blockIdx.x;
  GatherSample(s, b, bottom_out, rows, row_index, z);
  __syncthreads();
  float* out = top_input + static_cast<size_t>(b) * s.top_ld;
  for (int c = threadIdx.x; c < s.d; c += blockDim.x) out[c] = z[c];
  for (int k = threadIdx.x; k < s.num_pairs; k += blockDim.x) {
    const uint32_t pair = s.pairs[k];
    const float* zi = z + static_cast<int>(pair >> 16) * s.d_stride;
    const float* zj = z + static_cast<int>(pair & 0xFFFFu) * s.d_stride;
    float acc = 0.0f;
    for (int c = 0; c < s.d; ++c) acc = fmaf(zi[c], zj[c], acc);
    out[s.d + k] = acc;
  }
}

// d z_v = [v == 0] * g_0 + sum_{j != v} g_{vj} z_j, where g_{ij} (i < j) is the gradient of the
// pair's dot product, at top_grad[d + PairIndex(i, j)].
__global__ void __launch_bounds__(kThreads)
    InteractionBackwardKernel(InteractionShape s, const float* __restrict__ bottom_out,
                              const float* __restrict__ rows, const int32_t* __restrict__ row_index,
                              const float* __restrict__ top_grad, float* __restrict__ z0_grad,
                              float* __restrict__ row_grad) {
  extern __shared__ float smem[];
  const int vectors = s.num_sparse + 1;
  float* z = smem;
  float* pair_grad = smem + vectors * s.d_stride;
  const int b = blockIdx.x;
  const float* tg = top_grad + static_cast<size_t>(b) * s.top_ld;
  GatherSample(s, b, bottom_out, rows, row_index, z);
  for (int k = threadIdx.x; k < s.num_pairs; k += blockDim.x) pair_grad[k] = tg[s.d + k];
  __syncthreads();
  for (int t = threadIdx.x; t < vectors * s.d; t += blockDim.x) {
    const int v = t / s.d;
    const int c = t - v * s.d;
    float acc = v == 0 ? tg[c] : 0.0f;
    // Pairs (j, v) with j < v: row j of the triangle starts at j * (2 * vectors - j - 1) / 2.
    for (int j = 0; j < v; ++j) {
      acc = fmaf(pair_grad[j * (2 * vectors - j - 1) / 2 + (v - j - 1)], z[j * s.d_stride + c], acc);
    }
    // Pairs (v, j) with j > v: contiguous in row v of the triangle.
    const int row_v = v * (2 * vectors - v - 1) / 2 - (v + 1);
    for (int j = v + 1; j < vectors; ++j) acc = fmaf(pair_grad[row_v + j], z[j * s.d_stride + c], acc);
    if (v == 0) {
      z0_grad[static_cast<size_t>(b) * s.d + c] = acc;
    } else {
      const int32_t r = row_index[static_cast<size_t>(b) * s.num_sparse + (v - 1)];
      if (r >= 0 && static_cast<size_t>(r) < s.num_rows) atomicAdd(row_grad + static_cast<size_t>(r) * s.d + c, acc);
    }
  }
}

// Raises `kernel`'s dynamic shared memory limit to `bytes` when that is above the default.
template <typename Kernel>
Status AllowSmem(Kernel kernel, size_t bytes) {
  if (bytes <= kDefaultSmem) return Status::OK();
  OSPREY_CUDA_RETURN_IF_ERROR(
      cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(bytes)));
  return Status::OK();
}

}  // namespace

size_t InteractionForwardSmem(const InteractionShape& shape) {
  return sizeof(float) * static_cast<size_t>(shape.num_sparse + 1) * static_cast<size_t>(shape.d_stride);
}

size_t InteractionBackwardSmem(const InteractionShape& shape) {
  return InteractionForwardSmem(shape) + sizeof(float) * static_cast<size_t>(shape.num_pairs);
}

Status PrepareKernels(const InteractionShape& shape) {
  int device = 0;
  OSPREY_CUDA_RETURN_IF_ERROR(cudaGetDevice(&device));
  cudaFuncAttributes attr;
  const cudaError_t err = cudaFuncGetAttributes(&attr, InteractionForwardKernel);
  if (err == cudaErrorNoKernelImageForDevice || err == cudaErrorInvalidDeviceFunction) {
    (void)cudaGetLastError();
    int major = 0, minor = 0;
    OSPREY_CUDA_RETURN_IF_ERROR(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device));
    OSPREY_CUDA_RETURN_IF_ERROR(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device));
    return FailedPrecondition("GpuDlrm: this build has no kernels for CUDA device " + std::to_string(device) +
                              " (compute capability " + std::to_string(major) + "." + std::to_string(minor) +
                              "); rebuild with it in CMAKE_CUDA_ARCHITECTURES");
  }
  OSPREY_CUDA_RETURN_IF_ERROR(err);
  int optin = 0;
  OSPREY_CUDA_RETURN_IF_ERROR(cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, device));
  const size_t need = InteractionBackwardSmem(shape);
  if (need > static_cast<size_t>(optin)) {
    return InvalidArgument("GpuDlrm: num_sparse " + std::to_string(shape.num_sparse) + " with embedding_dim " +
                           std::to_string(shape.d) + " needs " + std::to_string(need) +
                           " bytes of shared memory per sample, device " + std::to_string(device) + " allows " +
                           std::to_string(optin));
  }
  OSPREY_RETURN_IF_ERROR(AllowSmem(InteractionForwardKernel, InteractionForwardSmem(shape)));
  OSPREY_RETURN_IF_ERROR(AllowSmem(InteractionBackwardKernel, need));
  return Status::OK();
}

Status InteractionForward(const InteractionShape& shape, int n, const float* bottom_out, const float* rows,
                          const int32_t* row_index, float* top_input, cudaStream_t stream) {
  if (n <= 0) return Status::OK();
  InteractionForwardKernel<<<n, kThreads, InteractionForwardSmem(shape), stream>>>(shape, bottom_out, rows, row_index,
                                                                                   top_input);
  OSPREY_CUDA_RETURN_IF_LAUNCH_FAILED();
  return Status::OK();
}

Status InteractionBackward(const InteractionShape& shape, int n, const float* bottom_out, const float* rows,
                           const int32_t* row_index, const float* top_grad, float* z0_grad, float* row_grad,
                           cudaStream_t stream) {
  if (n <= 0) return Status::OK();
  InteractionBackwardKernel<<<n, kThreads, InteractionBackwardSmem(shape), stream>>>(
      shape, bottom_out, rows, row_index, top_grad, z0_grad, row_grad);
  OSPREY_CUDA_RETURN_IF_LAUNCH_FAILED();
  return Status::OK();
}

}  // namespace osprey::cuda::dlrm
