// Reference CPU layer normalisation over the last dimension (two-pass mean and variance in
// double for accuracy).
#include <cmath>

#include "builtin_kernels.h"

namespace xrt {

namespace {
template <typename T>
void layernorm_cpu(const T* x, const T* w, const T* b, T* y, std::int64_t rows, std::int64_t d,
                   double eps) {
  for (std::int64_t r = 0; r < rows; ++r) {
    const T* xr = x + r * d;
    T* yr = y + r * d;
    double mean = 0;
    for (std::int64_t i = 0; i < d; ++i) mean += xr[i];
    mean /= static_cast<double>(d);
    double var = 0;
    for (std::int64_t i = 0; i < d; ++i) var += (xr[i] - mean) * (xr[i] - mean);
    var /= static_cast<double>(d);
    const double inv = 1.0 / std::sqrt(var + eps);
    for (std::int64_t i = 0; i < d; ++i) {
      yr[i] = static_cast<T>((xr[i] - mean) * inv * w[i] + b[i]);
    }
  }
}

}  // namespace

std::string run_cpu_layernorm(const KernelCall& call) {
  const Tensor& x = *call.inputs[0];
  const std::int64_t d = x.shape.back();
  const std::int64_t rows = d == 0 ? 0 : x.numel() / d;
  const double eps = call.scalars.at(0);
  if (x.dtype == DType::F32) {
    layernorm_cpu(static_cast<const float*>(x.data), static_cast<const float*>(call.inputs[1]->data),
                  static_cast<const float*>(call.inputs[2]->data),
                  static_cast<float*>(call.output->data), rows, d, eps);
  } else {
    layernorm_cpu(static_cast<const double*>(x.data),
                  static_cast<const double*>(call.inputs[1]->data),
                  static_cast<const double*>(call.inputs[2]->data),
                  static_cast<double*>(call.output->data), rows, d, eps);
  }
  return "";
}

KernelDef cpu_layernorm_kernel() {
  KernelDef def;
  def.op = "layernorm";
  def.name = "cpu";
  def.library = "xpuruntime CPU reference";
  def.unsupported_reason = [](const OpQuery& q) -> std::string {
    if (q.device.kind != DeviceKind::CPU) {
      return "runs on the CPU only, inputs are on " + q.device.str();
    }
    if (q.dtype != DType::F32 && q.dtype != DType::F64) {
      return std::string("computes float32/float64 only, got ") + dtype_name(q.dtype);
    }
    return "";
  };
  def.run = run_cpu_layernorm;
  return def;
}

}  // namespace xrt
