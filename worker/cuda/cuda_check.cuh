// Private to worker/cuda: turns CUDA runtime errors into Status with file:line.
#pragma once

#include <cuda_runtime.h>

#include <string>

#include "common/status.h"

namespace osprey::cuda {

inline Status CudaStatus(cudaError_t err, const char* expr, const char* file, int line) {
  const std::string where = std::string(file) + ":" + std::to_string(line) + ": " + expr + ": ";
  const std::string what = std::string(cudaGetErrorName(err)) + " (" + cudaGetErrorString(err) + ")";
  if (err == cudaErrorMemoryAllocation) return ResourceExhausted(where + what);
  return Internal(where + what);
}

}  // namespace osprey::cuda

// Returns a Status from the enclosing function when the CUDA call fails.
#define OSPREY_CUDA_RETURN_IF_ERROR(expr)                                            \
  do {                                                                               \
    const cudaError_t _osprey_cuda_err = (expr);                                     \
    if (_osprey_cuda_err != cudaSuccess) {                                           \
      return ::osprey::cuda::CudaStatus(_osprey_cuda_err, #expr, __FILE__, __LINE__); \
    }                                                                                \
  } while (0)

// Checks the launch that was just enqueued (configuration errors surface here; faults inside the
// kernel surface at the next synchronizing call).
#define OSPREY_CUDA_RETURN_IF_LAUNCH_FAILED() OSPREY_CUDA_RETURN_IF_ERROR(cudaGetLastError())
