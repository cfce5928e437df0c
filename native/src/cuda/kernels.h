// Small device kernels of the core (launched on a given stream, asynchronous).
#pragma once

#include <cstddef>
#include <cstdint>

#include "xpuruntime/tensor.h"

namespace xrt::cuda {

// Deterministic pseudo-random values in [-1, 1) (inputs for timing kernels: zeros would
// flatter tensor cores). float32, float16 and bfloat16.
void fill_uniform(void* data, DType dtype, std::size_t count, std::uint32_t seed, void* stream);

// y = (x - mean) / sqrt(var + eps) * weight + bias over rows of length d; fp32 statistics.
// float32, float16 and bfloat16.
void layernorm(const void* x, const void* weight, const void* bias, void* y, DType dtype,
               std::int64_t rows, std::int64_t d, double eps, void* stream);

// dz = dy * act'(saved) elementwise over rows of length n (GELU's tanh approximation when
// `gelu`, else ReLU); saved has row stride saved_ld, dy and dz are contiguous.
void activation_grad(const void* dy, const void* saved, std::int64_t saved_ld, void* dz,
                     DType dtype, std::int64_t rows, std::int64_t n, bool gelu, void* stream);

}  // namespace xrt::cuda
