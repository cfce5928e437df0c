// Small device kernels of the core (launched on a given stream, asynchronous).
#pragma once

#include <cstddef>
#include <cstdint>

#include "xpuruntime/tensor.h"

namespace xrt::cuda {

// Deterministic pseudo-random values in [-1, 1) (inputs for timing kernels: zeros would
// flatter tensor cores). float32, float16 and bfloat16.
void fill_uniform(void* data, DType dtype, std::size_t count, std::uint32_t seed, void* stream);

}  // namespace xrt::cuda
