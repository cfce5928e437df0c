// CUDA LayerNorm/RMSNorm kernels (forward with optional residual add, backward with
// dweight/dbias), launched on the current device, asynchronous on `stream`.
#pragma once

#include <cstddef>

#include "xpuruntime/norms.h"

namespace xrt::cuda {

// float32, float16 and bfloat16; statistics are float32.
NormLaunch norm_forward(const NormForwardArgs& args, void* stream);
// dweight/dbias go through a float32 workspace of partial sums: the caller's
// (args.workspace) or, when null, one from the memory pool on `stream`.
NormLaunch norm_backward(const NormBackwardArgs& args, void* stream);
// Workspace bytes norm_backward needs for these sizes at most (whatever the pointers).
std::size_t norm_backward_workspace_bytes(const NormBackwardArgs& args);

}  // namespace xrt::cuda
