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

namespace xrt::cuda {

namespace {
constexpr int kLayerNormThreads = 256;

__device__ __forceinline__ float block_sum(float v, float* scratch) {
  for (int offset = 16; offset > 0; offset >>= 1) v += __shfl_xor_sync(0xffffffffu, v, offset);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  v = lane < kLayerNormThreads / 32 ? scratch[lane] : 0.0f;
  for (int offset = 16; offset > 0; offset >>= 1) v += __shfl_xor_sync(0xffffffffu, v, offset);
  __syncthreads();  // scratch is reused by the next reduction
  return v;
}

// One block per row; two passes (mean, then squared deviations) in fp32 for accuracy.
template <typename T>
__global__ void __launch_bounds__(kLayerNormThreads)
    layernorm_kernel(const T* __restrict__ x, const T* __restrict__ w, const T* __restrict__ b,
                     T* __restrict__ y, std::int64_t d, float eps) {
  __shared__ float scratch[32];
  const T* xr = x + blockIdx.x * d;
  T* yr = y + blockIdx.x * d;
  float sum = 0.0f;
  for (std::int64_t i = threadIdx.x; i < d; i += kLayerNormThreads) sum += static_cast<float>(xr[i]);
  const float mean = block_sum(sum, scratch) / static_cast<float>(d);
  float sq = 0.0f;
  for (std::int64_t i = threadIdx.x; i < d; i += kLayerNormThreads) {
    const float dev = static_cast<float>(xr[i]) - mean;
    sq += dev * dev;
  }
  const float inv = rsqrtf(block_sum(sq, scratch) / static_cast<float>(d) + eps);
  for (std::int64_t i = threadIdx.x; i < d; i += kLayerNormThreads) {
    const float v = (static_cast<float>(xr[i]) - mean) * inv;
    yr[i] = static_cast<T>(v * static_cast<float>(w[i]) + static_cast<float>(b[i]));
  }
}

template <typename T>
void launch_layernorm(const void* x, const void* w, const void* b, void* y, std::int64_t rows,
                      std::int64_t d, float eps, cudaStream_t stream) {
  layernorm_kernel<T><<<static_cast<unsigned>(rows), kLayerNormThreads, 0, stream>>>(
      static_cast<const T*>(x), static_cast<const T*>(w), static_cast<const T*>(b),
      static_cast<T*>(y), d, eps);
  XRT_CUDA_CHECK(cudaGetLastError());
}
}  // namespace

void layernorm(const void* x, const void* weight, const void* bias, void* y, DType dtype,
               std::int64_t rows, std::int64_t d, double eps, void* stream) {
  if (rows == 0 || d == 0) return;
  if (rows > 0x7fffffff) throw InvalidArgumentError("layernorm: more than 2^31 - 1 rows");
  auto s = static_cast<cudaStream_t>(stream);
  const float e = static_cast<float>(eps);
  switch (dtype) {
    case DType::F32: launch_layernorm<float>(x, weight, bias, y, rows, d, e, s); break;
    case DType::F16: launch_layernorm<__half>(x, weight, bias, y, rows, d, e, s); break;
    case DType::BF16: launch_layernorm<__nv_bfloat16>(x, weight, bias, y, rows, d, e, s); break;
    default:
      throw InvalidArgumentError(std::string("layernorm: unsupported dtype ") + dtype_name(dtype));
  }
}

}  // namespace xrt::cuda

namespace xrt::cuda {

namespace {
// d/dx of GELU's tanh approximation (cuBLASLt's GELU), in fp32.
__device__ __forceinline__ float gelu_derivative(float x) {
  constexpr float kSqrt2OverPi = 0.7978845608028654f, kCubic = 0.044715f;
  const float t = tanhf(kSqrt2OverPi * (x + kCubic * x * x * x));
  return 0.5f * (1.0f + t) + 0.5f * x * (1.0f - t * t) * kSqrt2OverPi * (1.0f + 3.0f * kCubic * x * x);
}

template <typename T>
__global__ void activation_grad_kernel(const T* __restrict__ dy, const T* __restrict__ saved,
                                       std::int64_t saved_ld, T* __restrict__ dz,
                                       std::int64_t rows, std::int64_t n, bool gelu) {
  const std::int64_t total = rows * n;
  for (std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; i < total;
       i += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    const std::int64_t r = i / n, c = i - r * n;
    const float s = static_cast<float>(saved[r * saved_ld + c]);
    const float g = static_cast<float>(dy[i]);
    dz[i] = static_cast<T>(gelu ? g * gelu_derivative(s) : (s > 0.0f ? g : 0.0f));
  }
}

template <typename T>
void launch_activation_grad(const void* dy, const void* saved, std::int64_t saved_ld, void* dz,
                            std::int64_t rows, std::int64_t n, bool gelu, cudaStream_t stream) {
  const std::int64_t total = rows * n;
  if (total == 0) return;
  const unsigned blocks = static_cast<unsigned>(std::min<std::int64_t>((total + 255) / 256, 65535));
  activation_grad_kernel<T><<<blocks, 256, 0, stream>>>(static_cast<const T*>(dy),
                                                        static_cast<const T*>(saved), saved_ld,
                                                        static_cast<T*>(dz), rows, n, gelu);
  XRT_CUDA_CHECK(cudaGetLastError());
}
}  // namespace

void activation_grad(const void* dy, const void* saved, std::int64_t saved_ld, void* dz,
                     DType dtype, std::int64_t rows, std::int64_t n, bool gelu, void* stream) {
  auto s = static_cast<cudaStream_t>(stream);
  switch (dtype) {
    case DType::F32: launch_activation_grad<float>(dy, saved, saved_ld, dz, rows, n, gelu, s); break;
    case DType::F16: launch_activation_grad<__half>(dy, saved, saved_ld, dz, rows, n, gelu, s); break;
    case DType::BF16:
      launch_activation_grad<__nv_bfloat16>(dy, saved, saved_ld, dz, rows, n, gelu, s);
      break;
    default:
      throw UnsupportedOperationError(std::string("activation gradient on CUDA computes float32, "
                                                  "float16 and bfloat16, got ") +
                                      dtype_name(dtype));
  }
}

}  // namespace xrt::cuda
