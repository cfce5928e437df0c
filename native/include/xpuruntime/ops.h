// Ops: resolve a kernel through the Dispatcher, allocate the outputs, run it.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "xpuruntime/dispatcher.h"
#include "xpuruntime/tensor.h"

namespace xrt {

struct OpResult {
  Tensor output;
  std::shared_ptr<const Decision> decision;
  std::string detail;         // what the kernel reported (cuBLASLt algorithm, ...)
  std::vector<Tensor> extra;  // further outputs (linear's pre-activation, bias gradients)
};

// The decision and kernel detail of this thread's most recent op call (O(1) to record: a
// shared pointer and a string move; read by xpuruntime.ops.last_decision()).
struct LastCall {
  std::shared_ptr<const Decision> decision;
  std::string detail;
  // Counts this thread's native op calls: an op launched from Python (Triton kernels, the
  // norms' raw launches) remembers it, so last_decision() can tell which call came last.
  std::uint64_t serial = 0;
};
const LastCall& last_call();

// a @ b for a [M, K] or [B, M, K] and b [K, N] or [B, K, N] (a 2-D operand is broadcast over
// the batch), same dtype and device; strided views are taken where the kernel can (BLAS
// transposes, any strides on the CPU). The output is contiguous [M, N] or [B, M, N].
OpResult matmul(const Tensor& a, const Tensor& b, const PolicyChoice& policy, void* stream);

enum class Activation : std::uint8_t { None, Relu, Gelu };  // GELU: tanh approximation
Activation activation_from_name(const std::string& name);  // "", "relu", "gelu"

// Result storage the caller owns, for linear and linear_weight_grad: the kernel writes there
// and the OpResult's tensors are views of it (no holder: the caller keeps it alive). A CUDA
// graph capture needs this for the results, since only the capturing allocator (PyTorch's)
// may allocate while a stream captures. Null output: the core allocates both, from its
// caching pool.
// With an output, `extra` is required exactly when the call has a further result, of the
// shape and layout that the core would have allocated (same dtype and device as x).
struct LinearOutputs {
  const Tensor* output = nullptr;
  const Tensor* extra = nullptr;
};

// y = activation(x @ w^T + bias) with x [..., K], w [N, K], bias [N] or null, on a fused GEMM
// epilogue. save_preactivation (GELU only) also returns z = x @ w^T + bias as extra[0], a
// [M, N] view whose row stride is a multiple of 8 (for the backward helpers). A provided
// output is contiguous [..., N]; a provided pre-activation is [M, N] with unit column stride
// and a row stride that is a multiple of 8 (at least N).
OpResult linear(const Tensor& x, const Tensor& w, const Tensor* bias, Activation activation,
                bool save_preactivation, const PolicyChoice& policy, void* stream,
                const LinearOutputs& into = {});
// Backward helpers of linear on the same kernels (op "linear"):
//   weight gradient dw = dz^T @ x [N, K]; with bias_grad, extra[0] = db = sum of dz over rows
//   (the BGRADB epilogue); provided outputs are contiguous [N, K] and [N];
OpResult linear_weight_grad(const Tensor& dz, const Tensor& x, bool bias_grad,
                            const PolicyChoice& policy, void* stream,
                            const LinearOutputs& into = {});
//   through a GELU: dz = (g @ w) * gelu'(preactivation) [M, N] for g [M, P], w [P, N] (the
//   next layer's output gradient and weight); with bias_grad, extra[0] = sum of dz over rows
//   (the DGELU / DGELU_BGRAD epilogues).
OpResult linear_gelu_grad(const Tensor& g, const Tensor& w, const Tensor& preactivation,
                          bool bias_grad, const PolicyChoice& policy, void* stream);
// Elementwise activation gradient dz = dy * act'(saved): GELU takes the pre-activation, ReLU
// the pre-activation or the output (both are > 0 at the same places). Runs where dy lives.
Tensor activation_grad(const Tensor& dy, const Tensor& saved, Activation activation, void* stream);

// Normalises over the last dimension; weight and bias have its length.
OpResult layernorm(const Tensor& x, const Tensor& weight, const Tensor& bias, double eps,
                   const PolicyChoice& policy, void* stream);

}  // namespace xrt
