// Factories of the built-in kernels, collected by register_builtin_kernels().
#pragma once

#include <vector>

#include "xpuruntime/kernel_registry.h"

namespace xrt {

KernelDef cpu_matmul_kernel();
// layernorm, rmsnorm and their _backward ops: "xrt" (xpuruntime's CUDA kernels for
// fp32/fp16/bf16, the CPU reference for fp32/fp64) then "cpu" (the CPU reference).
std::vector<KernelDef> norm_kernels();
#if XPURUNTIME_WITH_CUDA
// cuBLASLt first, then cuBLAS: registration order is FirstSupported's order.
std::vector<KernelDef> cuda_matmul_kernels();
#endif

// Median of `repeats` timed calls of `body` after one warm-up, in milliseconds (host clock).
double median_host_ms(int repeats, const std::function<void()>& body);

}  // namespace xrt
