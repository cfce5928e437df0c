// Factories of the built-in kernels, collected by register_builtin_kernels().
#pragma once

#include <vector>

#include "xpuruntime/kernel_registry.h"

namespace xrt {

KernelDef cpu_matmul_kernel();
KernelDef cpu_layernorm_kernel();
// The reference CPU layer norm, shared by the "cpu" and "xrt" layernorm kernels.
std::string run_cpu_layernorm(const KernelCall& call);
// "xrt" layernorm: xpuruntime's own kernel, CUDA (fp32/fp16/bf16) and CPU (fp32/fp64).
KernelDef xrt_layernorm_kernel();
#if XPURUNTIME_WITH_CUDA
// cuBLASLt first, then cuBLAS: registration order is FirstSupported's order.
std::vector<KernelDef> cuda_matmul_kernels();
#endif

// Median of `repeats` timed calls of `body` after one warm-up, in milliseconds (host clock).
double median_host_ms(int repeats, const std::function<void()>& body);

}  // namespace xrt
