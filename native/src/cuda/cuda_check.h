// Error checking for CUDA runtime calls (CUDA builds only).
#pragma once

#include <cuda_runtime_api.h>

#include <string>

#include "xpuruntime/errors.h"

namespace xrt {

[[noreturn]] inline void throw_cuda_error(cudaError_t code, const char* call) {
  throw CudaError(std::string(call) + " failed: " + cudaGetErrorName(code) + " (" +
                  cudaGetErrorString(code) + ")");
}

}  // namespace xrt

#define XRT_CUDA_CHECK(expr)                                    \
  do {                                                          \
    const cudaError_t xrt_status_ = (expr);                     \
    if (xrt_status_ != cudaSuccess) {                           \
      cudaGetLastError(); /* clear the sticky-free error */     \
      ::xrt::throw_cuda_error(xrt_status_, #expr);              \
    }                                                           \
  } while (0)
