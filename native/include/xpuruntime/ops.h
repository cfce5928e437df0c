// Ops: resolve a kernel through the Dispatcher, allocate the output, run it.
#pragma once

#include <memory>
#include <string>

#include "xpuruntime/dispatcher.h"
#include "xpuruntime/tensor.h"

namespace xrt {

struct PolicyChoice {
  std::string kernel;  // "" = auto
  Mode mode = Mode::Auto;
  Strategy strategy = Strategy::FirstSupported;
};

struct OpResult {
  Tensor output;
  std::shared_ptr<const Decision> decision;
  std::string detail;  // what the kernel reported (cuBLASLt algorithm, ...)
};

// a [M, K] @ b [K, N] -> [M, N], row-major, same dtype and device.
OpResult matmul(const Tensor& a, const Tensor& b, const PolicyChoice& policy, void* stream);
// Normalises over the last dimension; weight and bias have its length.
OpResult layernorm(const Tensor& x, const Tensor& weight, const Tensor& bias, double eps,
                   const PolicyChoice& policy, void* stream);

}  // namespace xrt
