// Turns CUDA runtime errors into Status with file:line. For worker/cuda and the host code of the GPU
// loop (worker/gpu_trainer.cc, worker/gpu/); headers that code outside them includes must not
// include this one.
#pragma once

#include <cuda_runtime.h>

#include <string>

#include "common/status.h"

namespace osprey::cuda {

// Also clears the runtime's last error (a failed call records it), so a later
// OSPREY_CUDA_RETURN_IF_LAUNCH_FAILED does not blame this failure on another launch.
inline Status CudaStatus(cudaError_t err, const char* expr, const char* file, int line) {
  (void)cudaGetLastError();
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
