// The LayerNorm/RMSNorm custom ops in C++ with PyTorch's dispatcher (CPU, CUDA, Meta and
// Autograd kernels), calling the core's kernels through its C kernel table (core_table.h) on
// PyTorch's memory and current stream.
//
// Which kernel a call runs (the core's, or PyTorch's own) is the policy's business and stays
// in Python: the eager entry points (norm_forward below) take the choice the Python policy
// layer resolved once per (policy state, signature); the dispatcher's kernels, which see only
// the requested (kernel, mode) strings (torch.compile, opcheck, tracing), ask the resolver
// that layer registered. Autograd is a C++ autograd Function either way, so a training call
// costs what PyTorch's own native_layer_norm costs: no Python autograd.Function, no trip
// back into Python for the backward.
#include <ATen/ATen.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <torch/csrc/autograd/custom_function.h>
#include <torch/csrc/utils/pybind.h>
#include <torch/library.h>
#include <torch/version.h>

#include <array>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include "core_table.h"

namespace {

namespace py = pybind11;
using at::Tensor;
using OptTensor = std::optional<Tensor>;

using xrt_torch::check;
using xrt_torch::kernels;
using xrt_torch::launch_site;

int32_t dtype_code(at::ScalarType type) {
  const int32_t code = xrt_torch::dtype_code(type);
  TORCH_CHECK_VALUE(code >= 0, "norm kernels take float32, float64, float16 or bfloat16");
  return code;
}

at::ScalarType stats_type(at::ScalarType type) {
  return type == at::kDouble ? at::kDouble : at::kFloat;
}

int64_t width(at::IntArrayRef shape) {
  int64_t h = 1;
  for (int64_t d : shape) h *= d;
  return h;
}

const void* pointer(const OptTensor& t) {
  return t.has_value() && t->defined() ? t->data_ptr() : nullptr;
}

Tensor contiguous(const Tensor& t) { return t.is_contiguous() ? t : t.contiguous(); }

OptTensor contiguous(const OptTensor& t) {
  if (!t.has_value() || !t->defined()) return std::nullopt;
  return contiguous(*t);
}

Tensor empty_of(const Tensor& x) { return at::empty({0}, x.options()); }

// --- One forward / backward on the chosen kernel -------------------------------------------

enum Choice : int64_t { kTorch = 0, kCore = 1 };

struct Outputs {
  Tensor y, total, stats;  // total: x + residual (residual form); stats: [rows] stats or undefined
};

Outputs core_forward(bool rms, const Tensor& x_in, const OptTensor& residual_in,
                     at::IntArrayRef shape, const OptTensor& weight_in,
                     const OptTensor& bias_in, double eps, bool keep_stats) {
  const Tensor x = contiguous(x_in);
  const OptTensor residual = contiguous(residual_in), weight = contiguous(weight_in),
                  bias = contiguous(bias_in);
  const int64_t h = width(shape);
  const int64_t rows = h ? x.numel() / h : 0;
  Outputs out;
  out.y = at::empty_like(x);
  if (residual) out.total = at::empty_like(x);
  if (keep_stats) out.stats = at::empty({rms ? 1 : 2, rows}, x.options().dtype(stats_type(x.scalar_type())));
  xrt_norm_forward_args a{};
  a.rms = rms;
  a.dtype = dtype_code(x.scalar_type());
  a.rows = rows;
  a.h = h;
  a.x = x.data_ptr();
  a.residual = pointer(residual);
  a.weight = pointer(weight);
  a.bias = pointer(bias);
  a.y = out.y.data_ptr();
  a.sum = out.total.defined() ? out.total.data_ptr() : nullptr;
  if (keep_stats) {
    char* first = static_cast<char*>(out.stats.data_ptr());
    a.mean = rms ? nullptr : first;
    a.rstd = rms ? first : first + rows * out.stats.element_size();
  }
  a.eps = eps;
  const auto [device, stream] = launch_site(x);
  check(kernels().norm_forward(&a, device, stream));
  return out;
}

std::vector<int64_t> lead_shape(const Tensor& x, at::IntArrayRef shape) {
  std::vector<int64_t> lead(x.sizes().begin(), x.sizes().end() - shape.size());
  lead.insert(lead.end(), shape.size(), 1);
  return lead;
}

std::vector<int64_t> normalized_dims(at::IntArrayRef shape) {
  std::vector<int64_t> dims;
  for (int64_t i = -static_cast<int64_t>(shape.size()); i < 0; ++i) dims.push_back(i);
  return dims;
}

Outputs torch_forward(bool rms, const Tensor& x, const OptTensor& residual,
                      at::IntArrayRef shape, const OptTensor& weight, const OptTensor& bias,
                      double eps, bool keep_stats) {
  Outputs out;
  if (residual) out.total = (x + *residual).contiguous();
  const Tensor& source = out.total.defined() ? out.total : x;
  if (!keep_stats) {  // eager inference: PyTorch's public functions, nothing else
    out.y = rms ? at::rms_norm(source, shape, weight, eps) : at::layer_norm(source, shape, weight, bias, eps);
    out.y = contiguous(out.y);
    return out;
  }
  Tensor stats;
  if (rms) {
#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 8)
    auto [y, rstd] = at::_fused_rms_norm(source, shape, weight, eps);
    out.y = y;
#else
    const Tensor wide = source.to(stats_type(source.scalar_type()));
    const Tensor rstd = at::rsqrt(wide.square().mean(normalized_dims(shape), true) + eps);
    out.y = (wide * rstd).to(source.scalar_type());
    if (weight) out.y = out.y * *weight;
#endif
    stats = rstd.reshape({1, -1});
  } else {
    auto [y, mean, rstd] = at::native_layer_norm(source, shape, weight, bias, eps);
    out.y = y;
    stats = at::stack({mean.reshape(-1), rstd.reshape(-1)});
  }
  out.y = contiguous(out.y);
  out.stats = stats.to(stats_type(source.scalar_type()));
  return out;
}

Outputs forward(int64_t choice, bool rms, const Tensor& x, const OptTensor& residual,
                at::IntArrayRef shape, const OptTensor& weight, const OptTensor& bias, double eps,
                bool keep_stats) {
  auto run = choice == kCore ? core_forward : torch_forward;
  return run(rms, x, residual, shape, weight, bias, eps, keep_stats);
}

using Grads = std::tuple<Tensor, Tensor, Tensor>;  // dx, dweight, dbias (empty if not asked)

Grads core_backward(bool rms, const Tensor& grad_in, const Tensor& x_in, at::IntArrayRef shape,
                    const OptTensor& weight_in, const Tensor& stats_in,
                    const OptTensor& grad_sum_in, bool weight_grad, bool bias_grad) {
  const Tensor grad = contiguous(grad_in), x = contiguous(x_in), stats = contiguous(stats_in);
  const OptTensor weight = contiguous(weight_in), grad_sum = contiguous(grad_sum_in);
  const int64_t h = width(shape);
  const int64_t rows = h ? x.numel() / h : 0;
  const Tensor dx = at::empty_like(x);
  const Tensor dweight = weight_grad && weight ? at::empty_like(*weight) : Tensor();
  const Tensor dbias = bias_grad ? at::empty(shape, x.options()) : Tensor();
  xrt_norm_backward_args a{};
  a.rms = rms;
  a.dtype = dtype_code(x.scalar_type());
  a.rows = rows;
  a.h = h;
  a.dy = grad.data_ptr();
  a.x = x.data_ptr();
  a.weight = pointer(weight);
  char* first = static_cast<char*>(stats.data_ptr());
  a.mean = rms ? nullptr : first;
  a.rstd = rms ? first : first + rows * stats.element_size();
  a.dsum = pointer(grad_sum);
  a.dx = dx.data_ptr();
  a.dweight = dweight.defined() ? dweight.data_ptr() : nullptr;
  a.dbias = dbias.defined() ? dbias.data_ptr() : nullptr;
  const auto [device, stream] = launch_site(x);
  Tensor workspace;
  if (device >= 0 && (a.dweight || a.dbias)) {
    // dweight/dbias partial sums in PyTorch's memory, so streams and graph capture treat it
    // like any tensor of the call.
    size_t bytes = 0;
    check(kernels().norm_backward_workspace_bytes(&a, device, &bytes));
    if (bytes) {
      workspace = at::empty({static_cast<int64_t>(bytes)}, x.options().dtype(at::kByte));
      a.workspace = workspace.data_ptr();
      a.workspace_bytes = bytes;
    }
  }
  check(kernels().norm_backward(&a, device, stream));
  return {dx, dweight.defined() ? dweight : empty_of(x), dbias.defined() ? dbias : empty_of(x)};
}

Grads torch_backward(bool rms, const Tensor& grad, const Tensor& x, at::IntArrayRef shape,
                     const OptTensor& weight, const Tensor& stats, const OptTensor& grad_sum,
                     bool weight_grad, bool bias_grad) {
  const bool dweight_asked = weight.has_value() && weight_grad;
  const std::vector<int64_t> lead = lead_shape(x, shape);
  Tensor dx, dweight, dbias;
  if (rms) {
#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 8)
    if (x.is_cuda()) {  // PyTorch's fused backward is a CUDA kernel only
      std::tie(dx, dweight) = at::_fused_rms_norm_backward(
          grad.contiguous(), x, shape, stats[0].reshape(lead), weight, {true, dweight_asked});
    }
#endif
    if (!dx.defined()) {  // PyTorch's ops on the saved rstd
      const auto wide = stats_type(x.scalar_type());
      const Tensor rstd = stats[0].reshape(lead);
      const Tensor xhat = x.to(wide) * rstd;
      const Tensor scaled = weight ? grad.to(wide) * weight->to(wide) : grad.to(wide);
      const Tensor dot = (xhat * scaled).mean(normalized_dims(shape), true);
      dx = (rstd * (scaled - xhat * dot)).to(x.scalar_type());
      if (dweight_asked) {
        std::vector<int64_t> rows_dims;
        for (int64_t i = 0; i < x.dim() - static_cast<int64_t>(shape.size()); ++i) rows_dims.push_back(i);
        dweight = (grad.to(wide) * xhat).sum(rows_dims).to(x.scalar_type());
      }
    }
  } else {
    std::tie(dx, dweight, dbias) = at::native_layer_norm_backward(
        grad.contiguous(), x, shape, stats[0].reshape(lead), stats[1].reshape(lead), weight,
        bias_grad ? OptTensor(at::zeros(shape, x.options())) : std::nullopt,
        {true, dweight_asked, bias_grad});
  }
  if (grad_sum) dx = dx + *grad_sum;
  return {dx.contiguous(), dweight.defined() ? dweight : empty_of(x),
          dbias.defined() ? dbias : empty_of(x)};
}

Grads backward(int64_t choice, bool rms, const Tensor& grad, const Tensor& x,
               at::IntArrayRef shape, const OptTensor& weight, const Tensor& stats,
               const OptTensor& grad_sum, bool weight_grad, bool bias_grad) {
  auto run = choice == kCore ? core_backward : torch_backward;
  return run(rms, grad, x, shape, weight, stats, grad_sum, weight_grad, bias_grad);
}

// --- The Python policy layer's resolver (the dispatcher's kernels only) --------------------

py::object* resolver = nullptr;  // resolve(rms, x, residual, shape, weight, bias, kernel, mode)

int64_t resolve(bool rms, const Tensor& x, const OptTensor& residual, at::IntArrayRef shape,
                const OptTensor& weight, const OptTensor& bias, c10::string_view kernel,
                c10::string_view mode) {
  TORCH_CHECK(resolver != nullptr, "xpuruntime's native norms have no resolver: import "
                                   "xpuruntime.pytorch.ops first");
  py::gil_scoped_acquire gil;
  // A Python error (a bad argument, a pin refused under fallback='error') propagates as it
  // was raised: PyTorch's bindings restore error_already_set.
  return (*resolver)(rms, x, residual, shape.vec(), weight, bias, std::string(kernel),
                     std::string(mode))
      .cast<int64_t>();
}

// --- Autograd ----------------------------------------------------------------------------

// The typed handles of one norm's three ops (looked up once).
using PlainFn = std::tuple<Tensor, Tensor>(const Tensor&, at::IntArrayRef, const OptTensor&,
                                           const OptTensor&, double, c10::string_view,
                                           c10::string_view);
using AddFn = std::tuple<Tensor, Tensor, Tensor>(const Tensor&, const Tensor&, at::IntArrayRef,
                                                 const OptTensor&, const OptTensor&, double,
                                                 c10::string_view, c10::string_view);
using GradsFn = Grads(const Tensor&, const Tensor&, at::IntArrayRef, const OptTensor&,
                      const Tensor&, const OptTensor&, bool, bool, c10::string_view,
                      c10::string_view);

struct NormOps {
  c10::TypedOperatorHandle<PlainFn> plain;
  c10::TypedOperatorHandle<AddFn> add;
  c10::TypedOperatorHandle<GradsFn> grads;
};

const NormOps& ops_of(bool rms) {
  static auto find = [](const char* name) {
    return c10::Dispatcher::singleton().findSchemaOrThrow(name, "");
  };
  static const NormOps layernorm{find("xpuruntime::fused_layernorm").typed<PlainFn>(),
                                 find("xpuruntime::fused_add_layernorm").typed<AddFn>(),
                                 find("xpuruntime::fused_layernorm_backward").typed<GradsFn>()};
  static const NormOps rmsnorm{find("xpuruntime::fused_rmsnorm").typed<PlainFn>(),
                               find("xpuruntime::fused_add_rmsnorm").typed<AddFn>(),
                               find("xpuruntime::fused_rmsnorm_backward").typed<GradsFn>()};
  return rms ? rmsnorm : layernorm;
}

// How a call reached autograd: with a resolved choice (the eager entry point: kernels run
// directly) or through the dispatcher (kRedispatch: the ops below autograd run, and the
// backward is the _backward op, which torch.compile traces).
constexpr int64_t kRedispatch = -1;
// The saved "call" entry: choice * 16 plus these flags.
constexpr int64_t kRms = 1, kResidual = 2, kWeightGrad = 4, kBiasGrad = 8;

struct NormFunction : public torch::autograd::Function<NormFunction> {
  static torch::autograd::variable_list forward(
      torch::autograd::AutogradContext* ctx, bool rms, const Tensor& x, const OptTensor& residual,
      std::vector<int64_t> shape, const OptTensor& weight, const OptTensor& bias, double eps,
      std::string kernel, std::string mode, int64_t choice) {
    Outputs out;
    if (choice == kRedispatch) {
      at::AutoDispatchBelowADInplaceOrView below;
      const NormOps& ops = ops_of(rms);
      if (residual) {
        std::tie(out.y, out.total, out.stats) =
            ops.add.call(x, *residual, shape, weight, bias, eps, kernel, mode);
      } else {
        std::tie(out.y, out.stats) = ops.plain.call(x, shape, weight, bias, eps, kernel, mode);
      }
    } else {
      out = forward_kernel(choice, rms, x, residual, shape, weight, bias, eps);
    }
    ctx->save_for_backward({residual ? out.total : x, weight.value_or(Tensor()), out.stats});
    ctx->mark_non_differentiable({out.stats});
    ctx->set_materialize_grads(false);
    // Few entries: each is a hashed string key and an IValue, paid on every training call.
    ctx->saved_data["shape"] = std::move(shape);
    ctx->saved_data["call"] = choice * 16 + (rms ? kRms : 0) + (residual ? kResidual : 0) +
                              (weight && weight->requires_grad() ? kWeightGrad : 0) +
                              (bias && bias->requires_grad() ? kBiasGrad : 0);
    if (choice == kRedispatch) {
      ctx->saved_data["kernel"] = std::move(kernel);
      ctx->saved_data["mode"] = std::move(mode);
    }
    if (residual) return {out.y, out.total, out.stats};
    return {out.y, out.stats};
  }

  static Outputs forward_kernel(int64_t choice, bool rms, const Tensor& x,
                                const OptTensor& residual, at::IntArrayRef shape,
                                const OptTensor& weight, const OptTensor& bias, double eps) {
    return ::forward(choice, rms, x, residual, shape, weight, bias, eps, true);
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    const int64_t call = ctx->saved_data["call"].toInt();
    const bool residual_form = call & kResidual;
    const Tensor grad = grads[0];
    const Tensor grad_sum = residual_form && grads.size() > 1 ? grads[1] : Tensor();
    // (rms, x, residual, shape, weight, bias, eps, kernel, mode, choice)
    torch::autograd::variable_list result(10);
    if (!grad.defined()) {  // only the residual stream's gradient reached this call
      result[1] = grad_sum;
      if (residual_form) result[2] = grad_sum;
      return result;
    }
    const auto saved = ctx->get_saved_variables();
    const bool rms = call & kRms;
    const std::vector<int64_t> shape = ctx->saved_data["shape"].toIntVector();
    const bool weight_grad = call & kWeightGrad;
    const bool bias_grad = call & kBiasGrad;
    const int64_t choice = call >> 4;  // arithmetic shift: kRedispatch (-1) survives
    const OptTensor weight = saved[1].defined() ? OptTensor(saved[1]) : std::nullopt;
    const OptTensor sum = grad_sum.defined() ? OptTensor(grad_sum) : std::nullopt;
    Grads g;
    if (choice == kRedispatch) {
      g = ops_of(rms).grads.call(grad, saved[0], shape, weight, saved[2], sum, weight_grad,
                                 bias_grad, ctx->saved_data["kernel"].toStringRef(),
                                 ctx->saved_data["mode"].toStringRef());
    } else {
      g = ::backward(choice, rms, grad, saved[0], shape, weight, saved[2], sum, weight_grad,
                     bias_grad);
    }
    result[1] = std::get<0>(g);
    if (residual_form) result[2] = std::get<0>(g);
    if (weight_grad) result[4] = std::get<1>(g);
    if (bias_grad) result[5] = std::get<2>(g);
    return result;
  }
};

// --- The dispatcher's kernels ----------------------------------------------------------------

template <bool RMS>
std::tuple<Tensor, Tensor> plain_kernel(const Tensor& x, at::IntArrayRef shape,
                                        const OptTensor& weight, const OptTensor& bias,
                                        double eps, c10::string_view kernel,
                                        c10::string_view mode) {
  const int64_t choice = resolve(RMS, x, std::nullopt, shape, weight, bias, kernel, mode);
  Outputs out = forward(choice, RMS, x, std::nullopt, shape, weight, bias, eps, true);
  return {out.y, out.stats};
}

template <bool RMS>
std::tuple<Tensor, Tensor, Tensor> add_kernel(const Tensor& x, const Tensor& residual,
                                              at::IntArrayRef shape, const OptTensor& weight,
                                              const OptTensor& bias, double eps,
                                              c10::string_view kernel, c10::string_view mode) {
  const int64_t choice = resolve(RMS, x, residual, shape, weight, bias, kernel, mode);
  Outputs out = forward(choice, RMS, x, residual, shape, weight, bias, eps, true);
  return {out.y, out.total, out.stats};
}

template <bool RMS>
Grads backward_kernel(const Tensor& grad, const Tensor& x, at::IntArrayRef shape,
                      const OptTensor& weight, const Tensor& stats, const OptTensor& grad_sum,
                      bool weight_grad, bool bias_grad, c10::string_view kernel,
                      c10::string_view mode) {
  TORCH_CHECK_VALUE(!(RMS && bias_grad), "rmsnorm has no bias, so there is no bias gradient");
  TORCH_CHECK_VALUE(grad.sizes() == x.sizes() && (!grad_sum || grad_sum->sizes() == x.sizes()),
                    "backward: grad ", grad.sizes(), " and grad_sum must have the input's shape ",
                    x.sizes());
  const int64_t h = std::max<int64_t>(width(shape), 1);
  TORCH_CHECK_VALUE(stats.dim() == 2 && stats.size(0) == (RMS ? 1 : 2) &&
                        stats.size(1) == x.numel() / h,
                    "backward: stats of shape ", stats.sizes(), " are not the forward's");
  // The forward's choice, asked again (the resolver's answer is cached per signature).
  const int64_t choice = resolve(RMS, x, grad_sum, shape, weight, std::nullopt, kernel, mode);
  return backward(choice, RMS, grad, x, shape, weight, stats, grad_sum, weight_grad, bias_grad);
}

// Meta: shapes only, symbolic where PyTorch traces with dynamic shapes.
template <bool RMS>
Tensor meta_stats(const Tensor& x, at::IntArrayRef shape) {
  c10::SymInt rows = x.sym_numel();
  const int64_t h = width(shape);
  rows = h ? rows / h : c10::SymInt(0);
  return at::empty_symint({RMS ? 1 : 2, rows}, x.options().dtype(stats_type(x.scalar_type())));
}

template <bool RMS>
std::tuple<Tensor, Tensor> plain_meta(const Tensor& x, at::IntArrayRef shape, const OptTensor&,
                                      const OptTensor&, double, c10::string_view,
                                      c10::string_view) {
  return {at::empty_like(x, at::MemoryFormat::Contiguous), meta_stats<RMS>(x, shape)};
}

template <bool RMS>
std::tuple<Tensor, Tensor, Tensor> add_meta(const Tensor& x, const Tensor&,
                                            at::IntArrayRef shape, const OptTensor&,
                                            const OptTensor&, double, c10::string_view,
                                            c10::string_view) {
  return {at::empty_like(x, at::MemoryFormat::Contiguous),
          at::empty_like(x, at::MemoryFormat::Contiguous), meta_stats<RMS>(x, shape)};
}

template <bool RMS>
Grads backward_meta(const Tensor&, const Tensor& x, at::IntArrayRef shape,
                    const OptTensor& weight, const Tensor&, const OptTensor&, bool weight_grad,
                    bool bias_grad, c10::string_view, c10::string_view) {
  const Tensor empty = empty_of(x);
  return {at::empty_like(x, at::MemoryFormat::Contiguous),
          weight_grad && weight ? at::empty_like(*weight) : empty,
          bias_grad ? at::empty(shape, x.options()) : empty_of(x)};
}

template <bool RMS>
std::tuple<Tensor, Tensor> plain_autograd(const Tensor& x, at::IntArrayRef shape,
                                          const OptTensor& weight, const OptTensor& bias,
                                          double eps, c10::string_view kernel,
                                          c10::string_view mode) {
  auto out = NormFunction::apply(RMS, x, std::nullopt, shape.vec(), weight, bias, eps,
                                 std::string(kernel), std::string(mode), kRedispatch);
  return {out[0], out[1]};
}

template <bool RMS>
std::tuple<Tensor, Tensor, Tensor> add_autograd(const Tensor& x, const Tensor& residual,
                                                at::IntArrayRef shape, const OptTensor& weight,
                                                const OptTensor& bias, double eps,
                                                c10::string_view kernel, c10::string_view mode) {
  auto out = NormFunction::apply(RMS, x, residual, shape.vec(), weight, bias, eps,
                                 std::string(kernel), std::string(mode), kRedispatch);
  return {out[0], out[1], out[2]};
}

// --- The eager entry point ---------------------------------------------------------------------

bool needs_grad(const Tensor& x, const OptTensor& residual, const OptTensor& weight,
                const OptTensor& bias) {
  if (!at::GradMode::is_enabled()) return false;
  auto wants = [](const OptTensor& t) { return t.has_value() && t->requires_grad(); };
  return x.requires_grad() || wants(residual) || wants(weight) || wants(bias);
}

// y, or (y, x + residual): the policy layer resolved `choice` (kCore or kTorch) for this call.
py::object norm_forward(bool rms, const Tensor& x, const OptTensor& residual,
                        const std::vector<int64_t>& shape, const OptTensor& weight,
                        const OptTensor& bias, double eps, int64_t choice) {
  Tensor y, total;
  {
    py::gil_scoped_release no_gil;
    if (needs_grad(x, residual, weight, bias)) {
      auto out = NormFunction::apply(rms, x, residual, shape, weight, bias, eps, std::string(),
                                     std::string(), choice);
      y = out[0];
      if (residual) total = out[1];
    } else {
      Outputs out = forward(choice, rms, x, residual, shape, weight, bias, eps, false);
      y = out.y;
      total = out.total;
    }
  }
  if (residual) return py::make_tuple(y, total);
  return py::cast(y);
}

}  // namespace

// The schemas the Python layer defined before (ONNX export translations key on them).
#define XRT_NORM_SCHEMAS(m, NAME)                                                           \
  m.def("fused_" NAME "(Tensor input, int[] normalized_shape, Tensor? weight, Tensor? bias, " \
        "float eps, str kernel, str mode) -> (Tensor, Tensor)");                            \
  m.def("fused_add_" NAME "(Tensor input, Tensor residual, int[] normalized_shape, "        \
        "Tensor? weight, Tensor? bias, float eps, str kernel, str mode) "                     \
        "-> (Tensor, Tensor, Tensor)");                                                     \
  m.def("fused_" NAME "_backward(Tensor grad, Tensor input, int[] normalized_shape, "       \
        "Tensor? weight, Tensor stats, Tensor? grad_sum, bool weight_grad, bool bias_grad, " \
        "str kernel, str mode) -> (Tensor, Tensor, Tensor)")

TORCH_LIBRARY_FRAGMENT(xpuruntime, m) {
  XRT_NORM_SCHEMAS(m, "layernorm");
  XRT_NORM_SCHEMAS(m, "rmsnorm");
}

#define XRT_NORM_IMPLS(m, NAME, RMS, PLAIN, ADD, GRADS)         \
  m.impl("fused_" NAME, PLAIN<RMS>);                              \
  m.impl("fused_add_" NAME, ADD<RMS>);                            \
  m.impl("fused_" NAME "_backward", GRADS<RMS>)

TORCH_LIBRARY_IMPL(xpuruntime, CPU, m) {
  XRT_NORM_IMPLS(m, "layernorm", false, plain_kernel, add_kernel, backward_kernel);
  XRT_NORM_IMPLS(m, "rmsnorm", true, plain_kernel, add_kernel, backward_kernel);
}

TORCH_LIBRARY_IMPL(xpuruntime, CUDA, m) {
  XRT_NORM_IMPLS(m, "layernorm", false, plain_kernel, add_kernel, backward_kernel);
  XRT_NORM_IMPLS(m, "rmsnorm", true, plain_kernel, add_kernel, backward_kernel);
}

TORCH_LIBRARY_IMPL(xpuruntime, Meta, m) {
  XRT_NORM_IMPLS(m, "layernorm", false, plain_meta, add_meta, backward_meta);
  XRT_NORM_IMPLS(m, "rmsnorm", true, plain_meta, add_meta, backward_meta);
}

TORCH_LIBRARY_IMPL(xpuruntime, Autograd, m) {
  m.impl("fused_layernorm", plain_autograd<false>);
  m.impl("fused_add_layernorm", add_autograd<false>);
  m.impl("fused_rmsnorm", plain_autograd<true>);
  m.impl("fused_add_rmsnorm", add_autograd<true>);
}

namespace xrt_torch {

void bind_norm_ops(py::module_& module) {
  module.def(
      "set_resolver",
      [](py::object fn) {
        if (resolver == nullptr) resolver = new py::object();  // lives for the process
        *resolver = std::move(fn);
      },
      "The policy layer's resolve(rms, x, residual, shape, weight, bias, kernel, mode) -> "
      "choice, asked by the dispatcher's kernels.");
  module.def("norm_forward", &norm_forward, "Eager LayerNorm/RMSNorm on a resolved choice.");
  module.attr("CHOICE_TORCH") = static_cast<int64_t>(kTorch);
  module.attr("CHOICE_CORE") = static_cast<int64_t>(kCore);
}

}  // namespace xrt_torch
