#include "xpuruntime/ops.h"

#include "gemm.h"
#include "ops_internal.h"
#include "xpuruntime/checked.h"
#include "xpuruntime/errors.h"

namespace xrt {

namespace detail {

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

void require_contiguous(const Tensor& t, const char* op, const char* name) {
  if (!t.is_contiguous()) {
    throw UnsupportedOperationError(std::string(op) + ": " + name + " of shape " +
                                    t.shape_str() + " has strides " + t.strides_str() +
                                    ", and its kernels take contiguous tensors only; call "
                                    ".contiguous() on it first");
  }
}

namespace {
thread_local LastCall t_last_call;
}  // namespace

void note_last_call(const std::shared_ptr<const Decision>& decision, const std::string& detail) {
  if (t_last_call.decision != decision) t_last_call.decision = decision;
  if (t_last_call.detail != detail) t_last_call.detail = detail;
}

const LastCall& last_call() { return t_last_call; }

}  // namespace detail

const LastCall& last_call() { return detail::last_call(); }

namespace {
// A 3-D operand whose batch and row dimensions collapse into one (row-major rows evenly
// spaced across batches) seen as 2-D [B * rows, cols]: one larger GEMM instead of a batch.
bool fold_batch(const Tensor& t, Tensor& folded) {
  if (t.shape.size() != 3) return false;
  const std::int64_t b = t.shape[0], rows = t.shape[1], cols = t.shape[2];
  if (cols > 1 && t.stride(2) != 1) return false;
  if (b > 1 && rows > 0 && t.stride(0) != rows * t.stride(1)) return false;
  folded = t;
  folded.shape = {b * rows, cols};
  folded.strides = {rows > 1 ? t.stride(1) : std::max<std::int64_t>(cols, 1), t.stride(2)};
  return true;
}
}  // namespace

OpResult matmul(const Tensor& a, const Tensor& b, const PolicyChoice& policy, void* stream) {
  const std::size_t an = a.shape.size(), bn = b.shape.size();
  if (an < 2 || an > 3 || bn < 2 || bn > 3) {
    throw InvalidArgumentError("matmul takes 2-D or 3-D (batched) tensors, got shapes " +
                               a.shape_str() + " and " + b.shape_str());
  }
  if (a.shape[an - 1] != b.shape[bn - 2]) {
    throw InvalidArgumentError("matmul: inner dimensions differ: a is " + a.shape_str() +
                               ", b is " + b.shape_str() + " (a.shape[-1] must equal b.shape[-2])");
  }
  if (an == 3 && bn == 3 && a.shape[0] != b.shape[0] && a.shape[0] != 1 && b.shape[0] != 1) {
    throw InvalidArgumentError("matmul: batch sizes differ: a is " + a.shape_str() + ", b is " +
                               b.shape_str() + " (equal, or 1 to broadcast)");
  }
  detail::require_same(a, b, "matmul", "a", "b");
  a.numel();  // shapes are checked (overflow) before any size is derived from them
  b.numel();
  const std::int64_t m = a.shape[an - 2], k = a.shape[an - 1], n = b.shape[bn - 1];
  const std::int64_t batch =
      std::max<std::int64_t>(an == 3 ? a.shape[0] : 1, bn == 3 ? b.shape[0] : 1);
  std::vector<std::int64_t> out_shape =
      an == 3 || bn == 3 ? std::vector<std::int64_t>{batch, m, n} : std::vector<std::int64_t>{m, n};
  checked_nbytes(checked_numel(out_shape, "matmul output"), dtype_size(a.dtype), "matmul output");

  // [B, M, K] @ [K, N] with foldable rows is one [B*M, K] @ [K, N] product.
  Tensor folded;
  const bool fold = an == 3 && bn == 2 && fold_batch(a, folded);
  const Tensor& lhs = fold ? folded : a;
  const std::int64_t rows = fold ? batch * m : m;
  const GemmOperand ga = gemm_operand(lhs, rows, k);
  const GemmOperand gb = gemm_operand(b, k, n);
  const bool tf32 = policy.allow_tf32 && a.dtype == DType::F32;
  OpQuery query{"matmul",
                lhs.shape.size() == 3 || bn == 3 ? std::vector<std::int64_t>{batch, m, k, n}
                                                 : std::vector<std::int64_t>{rows, k, n},
                a.dtype, a.device, gemm_variant(ga, gb, Epilogue::None, tf32)};
  KernelCall call{{&lhs, &b}, {}, nullptr, stream};
  return detail::run_op(query, policy, call, [&](OpResult& r) {
    r.output = Tensor::empty(out_shape, a.dtype, a.device, stream);
  });
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
  detail::require_same(x, weight, "layernorm", "x", "weight");
  detail::require_same(x, bias, "layernorm", "x", "bias");
  checked_nbytes(x.numel(), dtype_size(x.dtype), "layernorm input");
  detail::require_contiguous(x, "layernorm", "x");
  detail::require_contiguous(weight, "layernorm", "weight");
  detail::require_contiguous(bias, "layernorm", "bias");
  OpQuery query{"layernorm", x.shape, x.dtype, x.device};
  KernelCall call{{&x, &weight, &bias}, {eps}, nullptr, stream};
  return detail::run_op(query, policy, call, [&](OpResult& r) {
    r.output = Tensor::empty(x.shape, x.dtype, x.device, stream);
  });
}

}  // namespace xrt
