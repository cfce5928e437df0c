// Factories of the built-in kernels, collected by register_builtin_kernels().
#pragma once

#include <vector>

#include "xpuruntime/kernel_registry.h"

namespace xrt {

KernelDef cpu_matmul_kernel();
// The CPU reference of op "linear" (GEMM with every epilogue of gemm.h).
KernelDef cpu_linear_kernel();
// dz = dy * act'(saved) on the CPU (GELU when gelu_grad, else ReLU); saved is [rows, n] with
// row stride saved_ld; dy and dz contiguous.
void cpu_activation_grad(const Tensor& dy, const Tensor& saved, std::int64_t saved_ld, Tensor& dz,
                         bool gelu_grad);
KernelDef cpu_layernorm_kernel();
// The reference CPU layer norm, shared by the "cpu" and "xrt" layernorm kernels.
std::string run_cpu_layernorm(const KernelCall& call);
// "xrt" layernorm: xpuruntime's own kernel, CUDA (fp32/fp16/bf16) and CPU (fp32/fp64).
KernelDef xrt_layernorm_kernel();
// cuBLASLt first, then cuBLAS: registration order is FirstSupported's order. In a CPU build
// they exist too and say why they cannot run.
std::vector<KernelDef> cuda_matmul_kernels();
// The cuBLASLt kernel of op "linear" (epilogues), likewise present in a CPU build.
KernelDef cuda_linear_kernel();
#if XPURUNTIME_WITH_CUDA
// dz = dy * act'(saved) on the GPU, as cpu_activation_grad.
void cuda_activation_grad(const Tensor& dy, const Tensor& saved, std::int64_t saved_ld, Tensor& dz,
                          bool gelu_grad, void* stream);
#endif

// Median of `repeats` timed calls of `body` after one warm-up, in milliseconds (host clock).
double median_host_ms(int repeats, const std::function<void()>& body);

}  // namespace xrt
