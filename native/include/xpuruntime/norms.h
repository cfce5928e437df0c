// LayerNorm and RMSNorm over the last dimension: forward (optionally fused with a residual
// add, `s = x + residual; y = norm(s)`, returning both) and backward (dx, dweight, dbias).
//
// Two levels:
//   - norm_forward / norm_backward: validate tensors, resolve the kernel through the
//     Dispatcher under a kernel policy (ops "layernorm"/"rmsnorm" and their "_backward"
//     twins), allocate the results and run the kernel;
//   - run_norm_forward / run_norm_backward: the kernels themselves on raw pointers, for callers
//     that resolved the kernel once and own the memory (the PyTorch custom ops).
//
// Statistics (mean, rstd = 1/sqrt(var + eps)) are float32 for float32/float16/bfloat16 inputs
// and float64 for float64 inputs, one value per row; the backward takes them from the forward.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "xpuruntime/dispatcher.h"
#include "xpuruntime/ops.h"
#include "xpuruntime/tensor.h"

namespace xrt {

enum class NormKind : std::uint8_t { LayerNorm, RMSNorm };

// Registry op names: "layernorm"/"rmsnorm" (forward) and "layernorm_backward"/"rmsnorm_backward".
const char* norm_op_name(NormKind kind, bool backward);
// float64 for float64 inputs, float32 otherwise.
DType norm_stats_dtype(DType input);

// Raw arguments of one forward call over `rows` rows of `h` contiguous elements. Optional
// pointers are null when absent; `sum` is required with `residual`; `mean` is unused by
// RMSNorm. Stats have norm_stats_dtype(dtype).
struct NormForwardArgs {
  NormKind kind = NormKind::LayerNorm;
  DType dtype = DType::F32;
  std::int64_t rows = 0;
  std::int64_t h = 0;
  const void* x = nullptr;
  const void* residual = nullptr;
  const void* weight = nullptr;
  const void* bias = nullptr;
  void* y = nullptr;
  void* sum = nullptr;
  void* mean = nullptr;
  void* rstd = nullptr;
  double eps = 1e-5;
};

// Raw arguments of one backward call. `x` is the normalised input (the sum in the residual
// form); `dsum` (optional) is the gradient reaching that sum from elsewhere and is added to
// dx. dweight/dbias are computed when non-null. On CUDA they are reduced through a float32
// workspace of partial sums: `workspace` (at least norm_backward_workspace_bytes; memory of
// the caller's allocator, as CUDA graph capture needs) or, when null, the memory pool.
struct NormBackwardArgs {
  NormKind kind = NormKind::LayerNorm;
  DType dtype = DType::F32;
  std::int64_t rows = 0;
  std::int64_t h = 0;
  const void* dy = nullptr;
  const void* x = nullptr;
  const void* weight = nullptr;
  const void* mean = nullptr;
  const void* rstd = nullptr;
  const void* dsum = nullptr;
  void* dx = nullptr;
  void* dweight = nullptr;
  void* dbias = nullptr;
  void* workspace = nullptr;
  std::size_t workspace_bytes = 0;
};

// How a kernel ran: the vectorised path (16-byte loads, a row held in registers by a group
// of warps) or the generic one (any width or alignment), and its launch shape.
struct NormLaunch {
  bool cuda = false;
  bool vectorised = false;
  int vectors_per_thread = 0;  // 16-byte vectors of a row each thread holds
  int warps_per_row = 0;
  int rows_per_block = 0;
  std::int64_t blocks = 0;
};
std::string describe(const NormLaunch& launch);

// Runs the kernel for `device` (the CPU reference, or CUDA on that device and `stream`).
// Arguments are trusted: callers validate shapes, dtypes and devices first.
NormLaunch run_norm_forward(const NormForwardArgs& args, DeviceRef device, void* stream);
NormLaunch run_norm_backward(const NormBackwardArgs& args, DeviceRef device, void* stream);
// Bytes of workspace run_norm_backward needs for these sizes (0 on the CPU or without
// dweight/dbias), whatever the alignment of the pointers.
std::size_t norm_backward_workspace_bytes(const NormBackwardArgs& args, DeviceRef device);

struct NormForwardResult {
  Tensor y;
  Tensor sum;   // x + residual; empty without a residual
  Tensor mean;  // [rows]; empty for RMSNorm or when stats were not asked for
  Tensor rstd;  // [rows]; empty when stats were not asked for
  std::shared_ptr<const Decision> decision;
  std::string detail;
};

struct NormBackwardResult {
  Tensor dx;
  Tensor dweight;  // empty without weight
  Tensor dbias;    // empty unless asked for
  std::shared_ptr<const Decision> decision;
  std::string detail;
};

// y = norm(x [+ residual]) * weight + bias over the last dimension of x. weight/bias may be
// null (RMSNorm takes no bias). `keep_stats` returns mean/rstd for the backward.
NormForwardResult norm_forward(NormKind kind, const Tensor& x, const Tensor* residual,
                               const Tensor* weight, const Tensor* bias, double eps,
                               bool keep_stats, const PolicyChoice& policy, void* stream);
// Gradients of norm_forward given dy, the normalised input x and the forward's stats
// (mean: LayerNorm only). dweight is computed when weight is given, dbias when `with_dbias`.
NormBackwardResult norm_backward(NormKind kind, const Tensor& dy, const Tensor& x,
                                 const Tensor* weight, const Tensor* mean, const Tensor& rstd,
                                 const Tensor* dsum, bool with_dbias, const PolicyChoice& policy,
                                 void* stream);

}  // namespace xrt
