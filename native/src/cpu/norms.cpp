// Reference LayerNorm/RMSNorm on the CPU, the yardstick of the CUDA kernels: every sum in
// float64, two-pass statistics. The residual form normalises the sum rounded to the input
// dtype (what it returns and what the backward sees), as the CUDA kernels do.
#include "cpu/norms.h"

#include <cmath>
#include <vector>

namespace xrt::cpu {

namespace {
template <typename T, typename S>
void forward(const NormForwardArgs& a) {
  const bool rms = a.kind == NormKind::RMSNorm;
  const auto* w = static_cast<const T*>(a.weight);
  const auto* b = static_cast<const T*>(a.bias);
  for (std::int64_t r = 0; r < a.rows; ++r) {
    const std::int64_t offset = r * a.h;
    const T* x = static_cast<const T*>(a.x) + offset;
    if (a.residual != nullptr) {
      const T* res = static_cast<const T*>(a.residual) + offset;
      T* sum = static_cast<T*>(a.sum) + offset;
      for (std::int64_t i = 0; i < a.h; ++i) sum[i] = static_cast<T>(x[i] + res[i]);
      x = sum;
    }
    double mean = 0;
    if (!rms) {
      for (std::int64_t i = 0; i < a.h; ++i) mean += x[i];
      mean /= static_cast<double>(a.h);
    }
    double var = 0;
    for (std::int64_t i = 0; i < a.h; ++i) var += (x[i] - mean) * (x[i] - mean);
    var /= static_cast<double>(a.h);
    const double rstd = 1.0 / std::sqrt(var + a.eps);
    if (a.mean != nullptr) static_cast<S*>(a.mean)[r] = static_cast<S>(mean);
    if (a.rstd != nullptr) static_cast<S*>(a.rstd)[r] = static_cast<S>(rstd);
    T* y = static_cast<T*>(a.y) + offset;
    for (std::int64_t i = 0; i < a.h; ++i) {
      double v = (x[i] - mean) * rstd;
      if (w != nullptr) v *= w[i];
      if (b != nullptr) v += b[i];
      y[i] = static_cast<T>(v);
    }
  }
}

template <typename T, typename S>
void backward(const NormBackwardArgs& a) {
  const bool rms = a.kind == NormKind::RMSNorm;
  const auto* w = static_cast<const T*>(a.weight);
  std::vector<double> dweight(a.dweight != nullptr ? static_cast<std::size_t>(a.h) : 0, 0.0);
  std::vector<double> dbias(a.dbias != nullptr ? static_cast<std::size_t>(a.h) : 0, 0.0);
  for (std::int64_t r = 0; r < a.rows; ++r) {
    const std::int64_t offset = r * a.h;
    const T* dy = static_cast<const T*>(a.dy) + offset;
    const T* x = static_cast<const T*>(a.x) + offset;
    const double mean = rms ? 0.0 : static_cast<const S*>(a.mean)[r];
    const double rstd = static_cast<const S*>(a.rstd)[r];
    double sum_xg = 0, sum_g = 0;  // sums of xhat * (w * dy) and of w * dy
    for (std::int64_t i = 0; i < a.h; ++i) {
      const double g = w != nullptr ? double(dy[i]) * w[i] : double(dy[i]);
      sum_xg += (x[i] - mean) * rstd * g;
      sum_g += g;
    }
    const double c_xg = sum_xg / static_cast<double>(a.h);
    const double c_g = rms ? 0.0 : sum_g / static_cast<double>(a.h);
    T* dx = static_cast<T*>(a.dx) + offset;
    const T* dsum = a.dsum != nullptr ? static_cast<const T*>(a.dsum) + offset : nullptr;
    for (std::int64_t i = 0; i < a.h; ++i) {
      const double xhat = (x[i] - mean) * rstd;
      const double g = w != nullptr ? double(dy[i]) * w[i] : double(dy[i]);
      double v = rstd * (g - xhat * c_xg - c_g);
      if (dsum != nullptr) v += dsum[i];
      dx[i] = static_cast<T>(v);
      if (!dweight.empty()) dweight[static_cast<std::size_t>(i)] += double(dy[i]) * xhat;
      if (!dbias.empty()) dbias[static_cast<std::size_t>(i)] += dy[i];
    }
  }
  for (std::size_t i = 0; i < dweight.size(); ++i) static_cast<T*>(a.dweight)[i] = static_cast<T>(dweight[i]);
  for (std::size_t i = 0; i < dbias.size(); ++i) static_cast<T*>(a.dbias)[i] = static_cast<T>(dbias[i]);
}
}  // namespace

void norm_forward(const NormForwardArgs& args) {
  if (args.dtype == DType::F64) {
    forward<double, double>(args);
  } else {
    forward<float, float>(args);
  }
}

void norm_backward(const NormBackwardArgs& args) {
  if (args.dtype == DType::F64) {
    backward<double, double>(args);
  } else {
    backward<float, float>(args);
  }
}

}  // namespace xrt::cpu
