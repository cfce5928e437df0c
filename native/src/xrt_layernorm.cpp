// The "xrt" layernorm kernel: xpuruntime's CUDA kernel on CUDA tensors, the reference
// implementation on CPU tensors.
#include "builtin_kernels.h"

#if XPURUNTIME_WITH_CUDA
#include <cuda_runtime_api.h>

#include "cuda/cuda_check.h"
#include "cuda/kernels.h"
#endif

namespace xrt {

namespace {
std::string xrt_layernorm_unsupported(const OpQuery& q) {
  if (q.device.kind == DeviceKind::CPU) {
    if (q.dtype != DType::F32 && q.dtype != DType::F64) {
      return std::string("computes float32/float64 on the CPU, got ") + dtype_name(q.dtype);
    }
    return "";
  }
#if XPURUNTIME_WITH_CUDA
  if (q.dtype != DType::F32 && q.dtype != DType::F16 && q.dtype != DType::BF16) {
    return std::string("computes float32, float16 and bfloat16 on CUDA, got ") +
           dtype_name(q.dtype);
  }
  return "";
#else
  return "xpuruntime-core was built without CUDA (XPURUNTIME_CUDA=OFF or no nvcc at build time)";
#endif
}

std::string run_xrt_layernorm(const KernelCall& call) {
  const Tensor& x = *call.inputs[0];
  if (x.device.kind == DeviceKind::CPU) return run_cpu_layernorm(call);
#if XPURUNTIME_WITH_CUDA
  int previous = 0;
  XRT_CUDA_CHECK(cudaGetDevice(&previous));
  if (previous != x.device.index) XRT_CUDA_CHECK(cudaSetDevice(x.device.index));
  const std::int64_t d = x.shape.back();
  const std::int64_t rows = d == 0 ? 0 : x.numel() / d;
  try {
    cuda::layernorm(x.data, call.inputs[1]->data, call.inputs[2]->data, call.output->data,
                    x.dtype, rows, d, call.scalars.at(0), call.stream);
  } catch (...) {
    if (previous != x.device.index) cudaSetDevice(previous);
    throw;
  }
  if (previous != x.device.index) cudaSetDevice(previous);
  return "xrt CUDA layernorm: one 256-thread block per row, fp32 statistics";
#else
  return "";
#endif
}
}  // namespace

KernelDef xrt_layernorm_kernel() {
  KernelDef def;
  def.op = "layernorm";
  def.name = "xrt";
  def.library = "xpuruntime";
  def.unsupported_reason = xrt_layernorm_unsupported;
  def.run = run_xrt_layernorm;
  return def;
}

}  // namespace xrt
