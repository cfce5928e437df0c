// The norm kernels as the registry knows them: "xrt" (CUDA float32/float16/bfloat16, and the
// CPU reference for float32/float64) and "cpu" (the CPU reference), for the ops layernorm,
// rmsnorm and their _backward twins.
//
// KernelCall layout. Forward: inputs {x, weight, bias, residual} (absent ones null, trailing
// ones may be left out), scalars {eps}, output y, extra_outputs {sum, mean, rstd} (null or
// left out when not wanted). Backward: inputs {dy, x, weight, mean, rstd, dsum}, output dx,
// extra_outputs {dweight, dbias}.
#include <climits>
#include <cstdio>

#include "builtin_kernels.h"
#include "cpu/norms.h"
#include "xpuruntime/errors.h"
#include "xpuruntime/norms.h"

#if XPURUNTIME_WITH_CUDA
#include <cuda_runtime_api.h>

#include "cuda/cuda_check.h"
#include "cuda/norms.h"
#endif

namespace xrt {

namespace {
constexpr const char* kNoCuda =
    "xpuruntime-core was built without CUDA (XPURUNTIME_CUDA=OFF or no nvcc at build time)";

#if XPURUNTIME_WITH_CUDA
// Makes `device` current for the scope, restoring the previous device afterwards.
class DeviceScope {
 public:
  explicit DeviceScope(int device) {
    XRT_CUDA_CHECK(cudaGetDevice(&previous_));
    if (previous_ != device) XRT_CUDA_CHECK(cudaSetDevice(device));
    device_ = device;
  }
  ~DeviceScope() {
    if (previous_ != device_) cudaSetDevice(previous_);
  }
  DeviceScope(const DeviceScope&) = delete;
  DeviceScope& operator=(const DeviceScope&) = delete;

 private:
  int previous_ = 0;
  int device_ = 0;
};
#endif

const Tensor* input(const KernelCall& call, std::size_t i) {
  return i < call.inputs.size() ? call.inputs[i] : nullptr;
}
Tensor* extra_output(const KernelCall& call, std::size_t i) {
  return i < call.extra_outputs.size() ? call.extra_outputs[i] : nullptr;
}
const void* data_of(const Tensor* t) { return t != nullptr ? t->data : nullptr; }
void* data_of(Tensor* t) { return t != nullptr ? t->data : nullptr; }

std::int64_t row_count(const Tensor& x) {
  std::int64_t rows = 1;
  for (std::size_t i = 0; i + 1 < x.shape.size(); ++i) rows *= x.shape[i];
  return rows;
}

NormForwardArgs forward_args(NormKind kind, const KernelCall& call) {
  const Tensor& x = *call.inputs[0];
  NormForwardArgs a;
  a.kind = kind;
  a.dtype = x.dtype;
  a.h = x.shape.back();
  a.rows = row_count(x);
  a.x = x.data;
  a.weight = data_of(input(call, 1));
  a.bias = data_of(input(call, 2));
  a.residual = data_of(input(call, 3));
  a.y = call.output->data;
  a.sum = data_of(extra_output(call, 0));
  a.mean = data_of(extra_output(call, 1));
  a.rstd = data_of(extra_output(call, 2));
  a.eps = call.scalars.at(0);
  return a;
}

NormBackwardArgs backward_args(NormKind kind, const KernelCall& call) {
  const Tensor& x = *call.inputs[1];
  NormBackwardArgs a;
  a.kind = kind;
  a.dtype = x.dtype;
  a.h = x.shape.back();
  a.rows = row_count(x);
  a.dy = call.inputs[0]->data;
  a.x = x.data;
  a.weight = data_of(input(call, 2));
  a.mean = data_of(input(call, 3));
  a.rstd = data_of(input(call, 4));
  a.dsum = data_of(input(call, 5));
  a.dx = call.output->data;
  a.dweight = data_of(extra_output(call, 0));
  a.dbias = data_of(extra_output(call, 1));
  return a;
}

std::string cpu_dtype_reason(DType dtype) {
  if (dtype == DType::F32 || dtype == DType::F64) return "";
  return std::string("computes float32/float64 on the CPU, got ") + dtype_name(dtype);
}

std::string xrt_unsupported(const OpQuery& q) {
  if (q.device.kind == DeviceKind::CPU) return cpu_dtype_reason(q.dtype);
#if XPURUNTIME_WITH_CUDA
  if (q.dtype != DType::F32 && q.dtype != DType::F16 && q.dtype != DType::BF16) {
    return std::string("computes float32, float16 and bfloat16 on CUDA, got ") +
           dtype_name(q.dtype);
  }
  if (!q.shape.empty() && q.shape.back() > INT_MAX) {
    return "normalises rows of up to 2^31 - 1 elements on CUDA, got " +
           std::to_string(q.shape.back());
  }
  return "";
#else
  return kNoCuda;
#endif
}

std::string cpu_unsupported(const OpQuery& q) {
  if (q.device.kind != DeviceKind::CPU) return "runs on the CPU only, inputs are on " + q.device.str();
  return cpu_dtype_reason(q.dtype);
}

KernelDef make_def(NormKind kind, bool backward, const char* name, const char* library,
                   std::string (*unsupported)(const OpQuery&)) {
  KernelDef def;
  def.op = norm_op_name(kind, backward);
  def.name = name;
  def.library = library;
  def.unsupported_reason = unsupported;
  if (backward) {
    def.run = [kind](const KernelCall& call) {
      return describe(run_norm_backward(backward_args(kind, call), call.inputs[1]->device, call.stream));
    };
  } else {
    def.run = [kind](const KernelCall& call) {
      return describe(run_norm_forward(forward_args(kind, call), call.inputs[0]->device, call.stream));
    };
  }
  return def;
}
}  // namespace

const char* norm_op_name(NormKind kind, bool backward) {
  if (kind == NormKind::LayerNorm) return backward ? "layernorm_backward" : "layernorm";
  return backward ? "rmsnorm_backward" : "rmsnorm";
}

DType norm_stats_dtype(DType input) { return input == DType::F64 ? DType::F64 : DType::F32; }

std::string describe(const NormLaunch& launch) {
  if (!launch.cuda) return "xrt CPU reference: float64 accumulation";
  char text[160];
  if (launch.vectorised) {
    std::snprintf(text, sizeof text,
                  "xrt CUDA: %d x 16 B vectors per thread, %d warp(s) per row, %d row(s) per "
                  "block, %lld blocks",
                  launch.vectors_per_thread, launch.warps_per_row, launch.rows_per_block,
                  static_cast<long long>(launch.blocks));
  } else {
    std::snprintf(text, sizeof text,
                  "xrt CUDA generic path (width or alignment not 16-byte vectorisable): %d "
                  "warps per row, %lld blocks",
                  launch.warps_per_row, static_cast<long long>(launch.blocks));
  }
  return text;
}

namespace {
// The CPU reference computes float32/float64 only (the raw entry points do not ask the
// dispatcher, so this is checked here too).
void require_cpu_dtype(DType dtype) {
  const std::string reason = cpu_dtype_reason(dtype);
  if (!reason.empty()) throw UnsupportedOperationError("norm kernel on the CPU " + reason);
}
}  // namespace

NormLaunch run_norm_forward(const NormForwardArgs& args, DeviceRef device, void* stream) {
  if (device.kind == DeviceKind::CPU) {
    require_cpu_dtype(args.dtype);
    cpu::norm_forward(args);
    return {};
  }
#if XPURUNTIME_WITH_CUDA
  DeviceScope scope(device.index);
  return cuda::norm_forward(args, stream);
#else
  (void)stream;
  throw UnsupportedOperationError(kNoCuda);
#endif
}

NormLaunch run_norm_backward(const NormBackwardArgs& args, DeviceRef device, void* stream) {
  if (device.kind == DeviceKind::CPU) {
    require_cpu_dtype(args.dtype);
    cpu::norm_backward(args);
    return {};
  }
#if XPURUNTIME_WITH_CUDA
  DeviceScope scope(device.index);
  return cuda::norm_backward(args, stream);
#else
  (void)stream;
  throw UnsupportedOperationError(kNoCuda);
#endif
}

std::size_t norm_backward_workspace_bytes(const NormBackwardArgs& args, DeviceRef device) {
  if (device.kind == DeviceKind::CPU) return 0;
#if XPURUNTIME_WITH_CUDA
  DeviceScope scope(device.index);
  return cuda::norm_backward_workspace_bytes(args);
#else
  (void)args;
  throw UnsupportedOperationError(kNoCuda);
#endif
}

std::vector<KernelDef> norm_kernels() {
  std::vector<KernelDef> defs;
  for (NormKind kind : {NormKind::LayerNorm, NormKind::RMSNorm}) {
    for (bool backward : {false, true}) {
      defs.push_back(make_def(kind, backward, "xrt", "xpuruntime", xrt_unsupported));
      defs.push_back(make_def(kind, backward, "cpu", "xpuruntime CPU reference", cpu_unsupported));
    }
  }
  return defs;
}

}  // namespace xrt
