// activation_grad's CUDA path: the elementwise kernel of kernels.cu on the tensor's device.
#include <cuda_runtime_api.h>

#include "builtin_kernels.h"
#include "cuda/cuda_check.h"
#include "cuda/kernels.h"

namespace xrt {

void cuda_activation_grad(const Tensor& dy, const Tensor& saved, std::int64_t saved_ld, Tensor& dz,
                          bool gelu_grad, void* stream) {
  int previous = 0;
  XRT_CUDA_CHECK(cudaGetDevice(&previous));
  if (previous != dy.device.index) XRT_CUDA_CHECK(cudaSetDevice(dy.device.index));
  const std::int64_t n = dy.shape.empty() ? 1 : dy.shape.back();
  const std::int64_t rows = n == 0 ? 0 : dy.numel() / n;
  try {
    cuda::activation_grad(dy.data, saved.data, saved_ld, dz.data, dy.dtype, rows, n, gelu_grad,
                          stream);
  } catch (...) {
    if (previous != dy.device.index) cudaSetDevice(previous);
    throw;
  }
  if (previous != dy.device.index) cudaSetDevice(previous);
}

}  // namespace xrt
