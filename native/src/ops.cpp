#include "xpuruntime/ops.h"

#include "xpuruntime/errors.h"
#include "xpuruntime/profiler.h"

namespace xrt {

namespace {
void require_same(const Tensor& a, const Tensor& b, const char* op, const char* an,
                  const char* bn) {
  if (a.dtype != b.dtype) {
    throw InvalidArgumentError(std::string(op) + ": " + an + " is " + dtype_name(a.dtype) +
                               " but " + bn + " is " + dtype_name(b.dtype) +
                               "; convert both to one dtype");
  }
  if (a.device != b.device) {
    throw InvalidArgumentError(std::string(op) + ": " + an + " is on " + a.device.str() +
                               " but " + bn + " is on " + b.device.str() +
                               "; move both to one device");
  }
}

OpResult run_resolved(const OpQuery& query, const PolicyChoice& policy, KernelCall call,
                      Tensor output) {
  OpResult result;
  result.decision =
      Dispatcher::instance().resolve(query, policy.kernel, policy.mode, policy.strategy);
  result.output = std::move(output);
  call.output = &result.output;
  ScopedRange range("xrt::" + query.op + "[" + result.decision->kernel + "]", "op");
  result.detail = result.decision->def->run(call);
  return result;
}
}  // namespace

OpResult matmul(const Tensor& a, const Tensor& b, const PolicyChoice& policy, void* stream) {
  if (a.shape.size() != 2 || b.shape.size() != 2) {
    throw InvalidArgumentError("matmul takes 2-D tensors, got shapes " + a.shape_str() +
                               " and " + b.shape_str());
  }
  if (a.shape[1] != b.shape[0]) {
    throw InvalidArgumentError("matmul: inner dimensions differ: a is " + a.shape_str() +
                               ", b is " + b.shape_str() + " (a.shape[1] must equal b.shape[0])");
  }
  require_same(a, b, "matmul", "a", "b");
  OpQuery query{"matmul", {a.shape[0], a.shape[1], b.shape[1]}, a.dtype, a.device};
  KernelCall call{{&a, &b}, {}, nullptr, stream, {}};
  // Resolve before allocating: a pin that cannot run must not touch the pool.
  Dispatcher::instance().resolve(query, policy.kernel, policy.mode, policy.strategy);
  return run_resolved(query, policy, call,
                      Tensor::empty({a.shape[0], b.shape[1]}, a.dtype, a.device, stream));
}

OpResult layernorm(const Tensor& x, const Tensor& weight, const Tensor& bias, double eps,
                   const PolicyChoice& policy, void* stream) {
  if (x.shape.empty()) throw InvalidArgumentError("layernorm takes a tensor of rank >= 1");
  const std::int64_t d = x.shape.back();
  if (weight.shape != std::vector<std::int64_t>{d} || bias.shape != std::vector<std::int64_t>{d}) {
    throw InvalidArgumentError("layernorm: weight and bias must have shape [" +
                               std::to_string(d) + "] (the last dimension of x " +
                               x.shape_str() + "), got " + weight.shape_str() + " and " +
                               bias.shape_str());
  }
  if (!(eps > 0)) throw InvalidArgumentError("layernorm: eps must be > 0, got " + std::to_string(eps));
  require_same(x, weight, "layernorm", "x", "weight");
  require_same(x, bias, "layernorm", "x", "bias");
  OpQuery query{"layernorm", x.shape, x.dtype, x.device};
  KernelCall call{{&x, &weight, &bias}, {eps}, nullptr, stream, {}};
  Dispatcher::instance().resolve(query, policy.kernel, policy.mode, policy.strategy);
  return run_resolved(query, policy, call, Tensor::empty(x.shape, x.dtype, x.device, stream));
}

}  // namespace xrt
