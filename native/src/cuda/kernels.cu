#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "cuda/cuda_check.h"
#include "cuda/kernels.h"

namespace xrt::cuda {

namespace {
__device__ __forceinline__ float hash_unit(std::uint64_t i, std::uint32_t seed) {
  std::uint32_t x = static_cast<std::uint32_t>(i * 2654435761ULL) ^ (seed * 0x9E3779B9u);
  x ^= x >> 16;
  x *= 0x7feb352dU;
  x ^= x >> 15;
  x *= 0x846ca68bU;
  x ^= x >> 16;
  return static_cast<float>(x) * (2.0f / 4294967296.0f) - 1.0f;
}

template <typename T>
__global__ void fill_uniform_kernel(T* out, std::size_t n, std::uint32_t seed) {
  for (std::size_t i = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<std::size_t>(gridDim.x) * blockDim.x) {
    out[i] = static_cast<T>(hash_unit(i, seed));
  }
}

template <typename T>
void launch_fill(void* data, std::size_t n, std::uint32_t seed, cudaStream_t stream) {
  if (n == 0) return;
  const unsigned blocks = static_cast<unsigned>(std::min<std::size_t>((n + 255) / 256, 4096));
  fill_uniform_kernel<T><<<blocks, 256, 0, stream>>>(static_cast<T*>(data), n, seed);
  XRT_CUDA_CHECK(cudaGetLastError());
}
}  // namespace

void fill_uniform(void* data, DType dtype, std::size_t count, std::uint32_t seed, void* stream) {
  auto s = static_cast<cudaStream_t>(stream);
  switch (dtype) {
    case DType::F32: launch_fill<float>(data, count, seed, s); break;
    case DType::F16: launch_fill<__half>(data, count, seed, s); break;
    case DType::BF16: launch_fill<__nv_bfloat16>(data, count, seed, s); break;
    default:
      throw InvalidArgumentError(std::string("fill_uniform: unsupported dtype ") +
                                 dtype_name(dtype));
  }
}

}  // namespace xrt::cuda
