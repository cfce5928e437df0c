// linear and its backward helpers: GEMMs with fused epilogues (op "linear"; see gemm.h).
#include "builtin_kernels.h"
#include "gemm.h"
#include "ops_internal.h"
#include "xpuruntime/checked.h"
#include "xpuruntime/errors.h"

namespace xrt {

namespace {
// x [..., K] seen as a 2-D [M, K] view (leading dimensions must collapse).
Tensor rows_view(const Tensor& x, const char* op, const char* name) {
  if (x.shape.empty()) {
    throw InvalidArgumentError(std::string(op) + ": " + name + " must have at least one dimension");
  }
  Tensor v = x;
  const std::size_t nd = x.shape.size();
  const std::int64_t cols = x.shape.back();
  std::int64_t rows = 1;
  for (std::size_t i = 0; i + 1 < nd; ++i) rows = checked_mul(rows, x.shape[i], op);
  // The leading dimensions collapse when each steps over the next one exactly.
  std::int64_t row_stride = nd >= 2 ? x.stride(nd - 2) : std::max<std::int64_t>(cols, 1);
  for (std::size_t i = 0; i + 2 < nd; ++i) {
    if (x.shape[i] > 1 && x.stride(i) != x.stride(i + 1) * x.shape[i + 1]) {
      throw UnsupportedOperationError(std::string(op) + ": the leading dimensions of " + name +
                                      " (shape " + x.shape_str() + ", strides " +
                                      x.strides_str() + ") do not form one row index; call "
                                      ".contiguous() on it first");
    }
  }
  if (rows <= 1) row_stride = std::max<std::int64_t>(cols, 1);
  v.shape = {rows, cols};
  v.strides = {row_stride, nd >= 1 ? x.stride(nd - 1) : 1};
  return v;
}

Tensor transposed(const Tensor& t) {
  Tensor v = t;
  v.shape = {t.shape[1], t.shape[0]};
  v.strides = {t.stride(1), t.stride(0)};
  return v;
}

void require_vector(const Tensor& v, std::int64_t n, const char* op, const char* name) {
  if (v.shape != std::vector<std::int64_t>{n}) {
    throw InvalidArgumentError(std::string(op) + ": " + name + " must have shape [" +
                               std::to_string(n) + "], got " + v.shape_str());
  }
  detail::require_contiguous(v, op, name);
}

Epilogue forward_epilogue(Activation a, bool bias, bool save) {
  switch (a) {
    case Activation::None: return bias ? Epilogue::Bias : Epilogue::None;
    case Activation::Relu: return bias ? Epilogue::ReluBias : Epilogue::Relu;
    case Activation::Gelu:
      if (save) return bias ? Epilogue::GeluAuxBias : Epilogue::GeluAux;
      return bias ? Epilogue::GeluBias : Epilogue::Gelu;
  }
  return Epilogue::None;
}

// The pre-activation buffer: [rows, cols] with a row stride rounded up to 8 elements
// (cuBLASLt's requirement for GELU_AUX / DGELU), returned as a strided view.
Tensor preactivation_buffer(std::int64_t rows, std::int64_t cols, DType dtype, DeviceRef device,
                            void* stream) {
  const std::int64_t ld = std::max<std::int64_t>(checked_add(cols, 7, "linear") / 8 * 8, 8);
  Tensor t = Tensor::empty({rows, ld}, dtype, device, stream);
  t.shape = {rows, cols};
  t.strides = {ld, 1};
  return t;
}
// A caller's result storage (LinearOutputs) checked against what the core would allocate:
// `like`'s dtype and device, `shape`, contiguous.
Tensor provided(const Tensor* t, const std::vector<std::int64_t>& shape, const Tensor& like,
                const char* op, const char* name) {
  if (t == nullptr) {
    throw InvalidArgumentError(std::string(op) + ": the caller provides the output but not " +
                               name);
  }
  detail::require_same(like, *t, op, "x", name);
  if (t->shape != shape) {
    Tensor expected;
    expected.shape = shape;
    throw InvalidArgumentError(std::string(op) + ": " + name + " must have shape " +
                               expected.shape_str() + ", got " + t->shape_str());
  }
  detail::require_contiguous(*t, op, name);
  return *t;
}

// A caller's pre-activation buffer: [rows, cols], unit column stride, a row stride that is a
// multiple of 8 and at least cols (as preactivation_buffer lays it out).
Tensor provided_preactivation(const Tensor* t, std::int64_t rows, std::int64_t cols,
                              const Tensor& like) {
  if (t == nullptr) {
    throw InvalidArgumentError("linear: the caller provides the output but not the "
                               "pre-activation that save_preactivation returns");
  }
  detail::require_same(like, *t, "linear", "x", "pre-activation");
  const bool laid_out = t->shape == std::vector<std::int64_t>{rows, cols} &&
                        (cols <= 1 || t->stride(1) == 1) && t->stride(0) >= cols &&
                        t->stride(0) % 8 == 0;
  if (!laid_out) {
    throw InvalidArgumentError("linear: the pre-activation must be a [" + std::to_string(rows) +
                               ", " + std::to_string(cols) + "] matrix with unit column stride " +
                               "and a row stride that is a multiple of 8, got shape " +
                               t->shape_str() + " strides " + t->strides_str());
  }
  return *t;
}

// An output the call has no use for is a caller's mistake, not something to ignore.
void refuse_extra(const LinearOutputs& into, const char* op, const char* why) {
  if (into.output != nullptr && into.extra != nullptr) {
    throw InvalidArgumentError(std::string(op) + ": a second output was provided but " + why);
  }
}
}  // namespace

Activation activation_from_name(const std::string& name) {
  if (name.empty() || name == "none") return Activation::None;
  if (name == "relu") return Activation::Relu;
  if (name == "gelu") return Activation::Gelu;
  throw InvalidArgumentError("unknown activation '" + name +
                             "'; valid activations: None, 'relu', 'gelu' (tanh approximation)");
}

OpResult linear(const Tensor& x, const Tensor& w, const Tensor* bias, Activation activation,
                bool save_preactivation, const PolicyChoice& policy, void* stream,
                const LinearOutputs& into) {
  if (w.shape.size() != 2) {
    throw InvalidArgumentError("linear: weight must be 2-D [out_features, in_features], got " +
                               w.shape_str());
  }
  if (x.shape.empty() || x.shape.back() != w.shape[1]) {
    throw InvalidArgumentError("linear: x " + x.shape_str() + " and weight " + w.shape_str() +
                               " differ in in_features (x.shape[-1] must equal weight.shape[1])");
  }
  if (save_preactivation && activation != Activation::Gelu) {
    throw InvalidArgumentError("linear: save_preactivation applies to activation='gelu' only "
                               "(ReLU's backward uses the output itself)");
  }
  detail::require_same(x, w, "linear", "x", "weight");
  if (bias != nullptr) {
    detail::require_same(x, *bias, "linear", "x", "bias");
    require_vector(*bias, w.shape[0], "linear", "bias");
  }
  x.numel();
  w.numel();
  const Tensor x2 = rows_view(x, "linear", "x");
  const Tensor wt = transposed(w);
  const std::int64_t m = x2.shape[0], k = x2.shape[1], n = w.shape[0];
  std::vector<std::int64_t> out_shape(x.shape.begin(), x.shape.end() - 1);
  out_shape.push_back(n);
  checked_nbytes(checked_numel(out_shape, "linear output"), dtype_size(x.dtype), "linear output");
  if (!save_preactivation) refuse_extra(into, "linear", "save_preactivation is off");
  const Epilogue epilogue = forward_epilogue(activation, bias != nullptr, save_preactivation);
  const GemmOperand ga = gemm_operand(x2, m, k);
  const GemmOperand gb = gemm_operand(wt, k, n);
  const bool tf32 = policy.allow_tf32 && x.dtype == DType::F32;
  OpQuery query{"linear", {m, k, n}, x.dtype, x.device, gemm_variant(ga, gb, epilogue, tf32)};
  KernelCall call{{&x2, &wt}, {}, nullptr, stream};
  if (bias != nullptr) call.inputs.push_back(bias);
  OpResult r = detail::run_op(query, policy, call, [&](OpResult& res) {
    if (into.output != nullptr) {
      res.output = provided(into.output, out_shape, x, "linear", "the output");
      res.output.shape = {m, n};
      res.output.strides = {n, 1};
      if (save_preactivation) res.extra.push_back(provided_preactivation(into.extra, m, n, x));
      return;
    }
    res.output = Tensor::empty({m, n}, x.dtype, x.device, stream);
    if (save_preactivation) res.extra.push_back(preactivation_buffer(m, n, x.dtype, x.device, stream));
  });
  r.output.shape = out_shape;
  r.output.strides = Tensor::contiguous_strides(out_shape);
  return r;
}

OpResult linear_weight_grad(const Tensor& dz, const Tensor& x, bool bias_grad,
                            const PolicyChoice& policy, void* stream,
                            const LinearOutputs& into) {
  detail::require_same(dz, x, "linear_weight_grad", "dz", "x");
  const Tensor dz2 = rows_view(dz, "linear_weight_grad", "dz");
  const Tensor x2 = rows_view(x, "linear_weight_grad", "x");
  if (dz2.shape[0] != x2.shape[0]) {
    throw InvalidArgumentError("linear_weight_grad: dz " + dz.shape_str() + " and x " +
                               x.shape_str() + " differ in their leading (row) dimensions");
  }
  const std::int64_t rows = dz2.shape[0], n = dz2.shape[1], k = x2.shape[1];
  const Tensor dzt = transposed(dz2);  // [N, rows]
  const GemmOperand ga = gemm_operand(dzt, n, rows);
  const GemmOperand gb = gemm_operand(x2, rows, k);
  const bool tf32 = policy.allow_tf32 && x.dtype == DType::F32;
  const Epilogue e = bias_grad ? Epilogue::BGradB : Epilogue::None;
  if (!bias_grad) refuse_extra(into, "linear_weight_grad", "bias_grad is off");
  OpQuery query{"linear", {n, rows, k}, x.dtype, x.device, gemm_variant(ga, gb, e, tf32)};
  KernelCall call{{&dzt, &x2}, {}, nullptr, stream};
  return detail::run_op(query, policy, call, [&](OpResult& res) {
    if (into.output != nullptr) {
      res.output = provided(into.output, {n, k}, x, "linear_weight_grad", "the output");
      if (bias_grad) {
        res.extra.push_back(provided(into.extra, {n}, x, "linear_weight_grad", "the bias grad"));
      }
      return;
    }
    res.output = Tensor::empty({n, k}, x.dtype, x.device, stream);
    if (bias_grad) res.extra.push_back(Tensor::empty({n}, x.dtype, x.device, stream));
  });
}

OpResult linear_gelu_grad(const Tensor& g, const Tensor& w, const Tensor& preactivation,
                          bool bias_grad, const PolicyChoice& policy, void* stream) {
  detail::require_same(g, w, "linear_gelu_grad", "g", "w");
  detail::require_same(g, preactivation, "linear_gelu_grad", "g", "preactivation");
  if (g.shape.size() != 2 || w.shape.size() != 2 || g.shape[1] != w.shape[0]) {
    throw InvalidArgumentError("linear_gelu_grad: g must be [M, P] and w [P, N], got " +
                               g.shape_str() + " and " + w.shape_str());
  }
  const std::int64_t m = g.shape[0], p = g.shape[1], n = w.shape[1];
  if (preactivation.shape != std::vector<std::int64_t>{m, n} ||
      (n > 1 && preactivation.stride(1) != 1)) {
    throw InvalidArgumentError("linear_gelu_grad: preactivation must be a [" + std::to_string(m) +
                               ", " + std::to_string(n) + "] matrix with unit column stride " +
                               "(as linear(..., save_preactivation=True) returns), got shape " +
                               preactivation.shape_str() + " strides " + preactivation.strides_str());
  }
  const GemmOperand ga = gemm_operand(g, m, p);
  const GemmOperand gb = gemm_operand(w, p, n);
  const bool tf32 = policy.allow_tf32 && g.dtype == DType::F32;
  const Epilogue e = bias_grad ? Epilogue::DGeluBGrad : Epilogue::DGelu;
  OpQuery query{"linear", {m, p, n}, g.dtype, g.device, gemm_variant(ga, gb, e, tf32)};
  KernelCall call{{&g, &w, &preactivation}, {}, nullptr, stream};
  return detail::run_op(query, policy, call, [&](OpResult& res) {
    res.output = Tensor::empty({m, n}, g.dtype, g.device, stream);
    if (bias_grad) res.extra.push_back(Tensor::empty({n}, g.dtype, g.device, stream));
  });
}

Tensor activation_grad(const Tensor& dy, const Tensor& saved, Activation activation, void* stream) {
  if (activation == Activation::None) {
    throw InvalidArgumentError("activation_grad needs activation 'relu' or 'gelu'");
  }
  detail::require_same(dy, saved, "activation_grad", "dy", "saved");
  detail::require_contiguous(dy, "activation_grad", "dy");
  const Tensor s2 = rows_view(saved, "activation_grad", "saved");
  const Tensor d2 = rows_view(dy, "activation_grad", "dy");
  if (s2.shape != d2.shape || (s2.shape[1] > 1 && s2.strides[1] != 1)) {
    throw InvalidArgumentError("activation_grad: saved " + saved.shape_str() + " must match dy " +
                               dy.shape_str() + " with unit stride along the last dimension");
  }
  Tensor dz = Tensor::empty(dy.shape, dy.dtype, dy.device, stream);
  const bool gelu_grad = activation == Activation::Gelu;
  if (dy.device.kind == DeviceKind::CPU) {
    cpu_activation_grad(dy, saved, s2.strides[0], dz, gelu_grad);
  } else {
#if XPURUNTIME_WITH_CUDA
    cuda_activation_grad(dy, saved, s2.strides[0], dz, gelu_grad, stream);
#else
    throw UnsupportedOperationError("activation_grad on CUDA needs a CUDA build of xpuruntime-core");
#endif
  }
  return dz;
}

}  // namespace xrt
