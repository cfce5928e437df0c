// CUDA LayerNorm/RMSNorm kernels (forward with optional residual add, backward with
// dweight/dbias), launched on the current device, asynchronous on `stream`.
#pragma once

#include "xpuruntime/norms.h"

namespace xrt::cuda {

// float32, float16 and bfloat16; statistics are float32.
NormLaunch norm_forward(const NormForwardArgs& args, void* stream);
// Needs a float32 workspace for the dweight/dbias partial sums, taken from the memory pool
// on `stream`.
NormLaunch norm_backward(const NormBackwardArgs& args, void* stream);

}  // namespace xrt::cuda
