// Private to worker/cuda/sparse: CUDA errors as Status, with "no device" told apart.
#pragma once

#include <cuda_runtime.h>

#include <string>

#include "worker/cuda/cuda_check.cuh"

namespace osprey::cuda::sparse_internal {

// No device, no driver or a driver too old is the caller's environment, not a bug: report it as
// FailedPrecondition "no CUDA device" so callers can fall back to the CPU path. The error code
// alone does not tell (CUB, for one, reports cudaErrorInvalidDevice then), so on the error path
// the device count is asked too. Everything else is CudaStatus's (ResourceExhausted for out of
// memory, Internal otherwise).
inline Status SparseCudaStatus(cudaError_t err, const char* expr, const char* file, int line) {
  int count = 0;
  const cudaError_t count_err = cudaGetDeviceCount(&count);
  if (err == cudaErrorNoDevice || err == cudaErrorInsufficientDriver || count_err != cudaSuccess || count == 0) {
    (void)cudaGetLastError();  // leave no trace for the caller's next check
    return FailedPrecondition(std::string("no CUDA device (") + cudaGetErrorName(err) + ": " + cudaGetErrorString(err) +
                              ") at " + file + ":" + std::to_string(line) + ": " + expr);
  }
  return CudaStatus(err, expr, file, line);
}

}  // namespace osprey::cuda::sparse_internal

#define OSPREY_SPARSE_CUDA_RETURN_IF_ERROR(expr)                                                               \
  do {                                                                                                         \
    const cudaError_t _osprey_sparse_err = (expr);                                                             \
    if (_osprey_sparse_err != cudaSuccess) {                                                                   \
      return ::osprey::cuda::sparse_internal::SparseCudaStatus(_osprey_sparse_err, #expr, __FILE__, __LINE__); \
    }                                                                                                          \
  } while (0)

// Checks the launch that was just enqueued.
#define OSPREY_SPARSE_RETURN_IF_LAUNCH_FAILED() OSPREY_SPARSE_CUDA_RETURN_IF_ERROR(cudaGetLastError())
