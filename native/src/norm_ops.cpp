// The norm ops: check the tensors, resolve the kernel under the policy, allocate, run.
#include <cmath>
#include <limits>
#include <optional>

#include "ops_internal.h"
#include "xpuruntime/errors.h"
#include "xpuruntime/norms.h"
#include "xpuruntime/profiler.h"

namespace xrt {

namespace {
const char* kind_name(NormKind kind) { return norm_op_name(kind, false); }

// The norm kernels index rows as contiguous memory: strided views must be made contiguous.
void require_like(const Tensor& t, const Tensor& x, const char* op, const char* name,
                  const char* x_name) {
  detail::require_contiguous(t, op, name);
  if (t.dtype != x.dtype) {
    throw InvalidArgumentError(std::string(op) + ": " + name + " is " + dtype_name(t.dtype) +
                               " but " + x_name + " is " + dtype_name(x.dtype) +
                               "; convert both to one dtype");
  }
  if (t.device != x.device) {
    throw InvalidArgumentError(std::string(op) + ": " + name + " is on " + t.device.str() +
                               " but " + x_name + " is on " + x.device.str() +
                               "; move both to one device");
  }
}

void require_shape(const Tensor& t, const std::vector<std::int64_t>& shape, const char* op,
                   const char* name, const std::string& why) {
  if (t.shape != shape) {
    Tensor expected;
    expected.shape = shape;
    throw InvalidArgumentError(std::string(op) + ": " + name + " must have shape " +
                               expected.shape_str() + " (" + why + "), got " + t.shape_str());
  }
}

// Rows of x (product of the leading dimensions), with overflow checked.
std::int64_t rows_of(const Tensor& x, const char* op) {
  if (x.shape.empty()) {
    throw InvalidArgumentError(std::string(op) + " takes a tensor of rank >= 1, got a scalar");
  }
  std::int64_t rows = 1;
  for (std::size_t i = 0; i + 1 < x.shape.size(); ++i) {
    if (x.shape[i] < 0 || __builtin_mul_overflow(rows, x.shape[i], &rows)) {
      throw InvalidArgumentError(std::string(op) + ": shape " + x.shape_str() +
                                 " has more rows than int64 can count");
    }
  }
  std::int64_t elements = 0;
  if (__builtin_mul_overflow(rows, x.shape.back(), &elements)) {
    throw InvalidArgumentError(std::string(op) + ": shape " + x.shape_str() +
                               " has more elements than int64 can count");
  }
  return rows;
}

void check_stats(const Tensor& stats, const Tensor& x, std::int64_t rows, const char* op,
                 const char* name) {
  detail::require_contiguous(stats, op, name);
  const DType want = norm_stats_dtype(x.dtype);
  if (stats.dtype != want || stats.device != x.device) {
    throw InvalidArgumentError(std::string(op) + ": " + name + " must be " + dtype_name(want) +
                               " on " + x.device.str() + " (as the forward returned it), got " +
                               dtype_name(stats.dtype) + " on " + stats.device.str());
  }
  require_shape(stats, {rows}, op, name, "one value per row of x");
}

std::shared_ptr<const Decision> resolve(const OpQuery& query, const PolicyChoice& policy) {
  return Dispatcher::instance().resolve(query, policy.kernel, policy.mode, policy.strategy);
}

std::string run(const Decision& decision, const KernelCall& call) {
  std::optional<ScopedRange> range;  // built only when profiling: no string work per call
  if (Profiler::instance().enabled()) {
    range.emplace("xrt::" + decision.op + "[" + decision.kernel + "]", "op");
  }
  return decision.def->run(call);
}
}  // namespace

NormForwardResult norm_forward(NormKind kind, const Tensor& x, const Tensor* residual,
                               const Tensor* weight, const Tensor* bias, double eps,
                               bool keep_stats, const PolicyChoice& policy, void* stream) {
  const char* op = kind_name(kind);
  const std::int64_t rows = rows_of(x, op);
  const std::int64_t h = x.shape.back();
  detail::require_contiguous(x, op, "x");
  const std::string width = "the last dimension of x " + x.shape_str();
  if (weight != nullptr) {
    require_like(*weight, x, op, "weight", "x");
    require_shape(*weight, {h}, op, "weight", width);
  }
  if (bias != nullptr) {
    if (kind == NormKind::RMSNorm) {
      throw InvalidArgumentError("rmsnorm takes no bias; add it to the output instead");
    }
    require_like(*bias, x, op, "bias", "x");
    require_shape(*bias, {h}, op, "bias", width);
  }
  if (residual != nullptr) {
    require_like(*residual, x, op, "residual", "x");
    require_shape(*residual, x.shape, op, "residual", "the shape of x");
  }
  if (!(eps >= 0) || !std::isfinite(eps)) {
    throw InvalidArgumentError(std::string(op) + ": eps must be a finite number >= 0, got " +
                               std::to_string(eps));
  }
  const OpQuery query{op, x.shape, x.dtype, x.device};
  NormForwardResult result;
  // Resolve before allocating: a pin that cannot run must not touch the pool.
  result.decision = resolve(query, policy);
  result.y = Tensor::empty(x.shape, x.dtype, x.device, stream);
  if (residual != nullptr) result.sum = Tensor::empty(x.shape, x.dtype, x.device, stream);
  const DType stats = norm_stats_dtype(x.dtype);
  if (keep_stats) {
    if (kind == NormKind::LayerNorm) result.mean = Tensor::empty({rows}, stats, x.device, stream);
    result.rstd = Tensor::empty({rows}, stats, x.device, stream);
  }
  KernelCall call{{&x, weight, bias, residual}, {eps}, &result.y, stream, {}};
  call.extra_outputs = {residual != nullptr ? &result.sum : nullptr,
                        result.mean.data != nullptr ? &result.mean : nullptr,
                        result.rstd.data != nullptr ? &result.rstd : nullptr};
  result.detail = run(*result.decision, call);
  detail::note_last_call(result.decision, result.detail);
  return result;
}

NormBackwardResult norm_backward(NormKind kind, const Tensor& dy, const Tensor& x,
                                 const Tensor* weight, const Tensor* mean, const Tensor& rstd,
                                 const Tensor* dsum, bool with_dbias, const PolicyChoice& policy,
                                 void* stream) {
  const char* op = norm_op_name(kind, true);
  const std::int64_t rows = rows_of(x, op);
  const std::int64_t h = x.shape.back();
  detail::require_contiguous(x, op, "x");
  require_like(dy, x, op, "dy", "x");
  require_shape(dy, x.shape, op, "dy", "the shape of x");
  if (weight != nullptr) {
    require_like(*weight, x, op, "weight", "x");
    require_shape(*weight, {h}, op, "weight", "the last dimension of x " + x.shape_str());
  }
  if (dsum != nullptr) {
    require_like(*dsum, x, op, "dsum", "x");
    require_shape(*dsum, x.shape, op, "dsum", "the shape of x");
  }
  if (kind == NormKind::LayerNorm) {
    if (mean == nullptr) {
      throw InvalidArgumentError("layernorm_backward needs the mean the forward returned");
    }
    check_stats(*mean, x, rows, op, "mean");
  } else if (with_dbias) {
    throw InvalidArgumentError("rmsnorm has no bias, so there is no dbias to compute");
  }
  check_stats(rstd, x, rows, op, "rstd");
  const OpQuery query{op, x.shape, x.dtype, x.device};
  NormBackwardResult result;
  result.decision = resolve(query, policy);
  result.dx = Tensor::empty(x.shape, x.dtype, x.device, stream);
  if (weight != nullptr) result.dweight = Tensor::empty({h}, x.dtype, x.device, stream);
  if (with_dbias) result.dbias = Tensor::empty({h}, x.dtype, x.device, stream);
  const Tensor* stats_mean = kind == NormKind::LayerNorm ? mean : nullptr;
  KernelCall call{{&dy, &x, weight, stats_mean, &rstd, dsum}, {}, &result.dx, stream, {}};
  call.extra_outputs = {weight != nullptr ? &result.dweight : nullptr,
                        with_dbias ? &result.dbias : nullptr};
  result.detail = run(*result.decision, call);
  detail::note_last_call(result.decision, result.detail);
  return result;
}

}  // namespace xrt
