// fused_linear in C++ with PyTorch's dispatcher (CPU, CUDA, Meta and Autograd kernels):
// activation(x @ weight^T + bias) on the core's GEMM with a fused epilogue (its op "linear",
// through the C kernel table, on PyTorch's current stream) or on PyTorch's own ops.
//
// As for the norms (norm_ops.cpp), the kernel choice stays in Python: the eager entry point
// (linear_forward) takes the choice the policy layer resolved once per (policy state,
// signature); the dispatcher's kernels, which see only the requested (kernel, mode) strings,
// ask the resolver that layer registered. Autograd is a C++ autograd Function: the
// activation's derivative from what forward kept (GELU's pre-activation, which the
// GELU_AUX_BIAS epilogue stored, or ReLU's output), dx = dz @ weight, and dweight with dbias
// from one GEMM with the BGRADB epilogue (the op fused_linear_weight_grad).
//
// The results are PyTorch's allocations (at::empty on the current stream) that the core's
// kernel writes into: PyTorch's allocator is the one a CUDA graph capture knows about (a
// captured call's results come from the graph's private pool, where replays write them).
#include <ATen/ATen.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <torch/csrc/autograd/custom_function.h>
#include <torch/csrc/utils/pybind.h>
#include <torch/library.h>

#include <algorithm>
#include <deque>
#include <mutex>
#include <optional>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "core_table.h"

namespace {

namespace py = pybind11;
using at::Tensor;
using OptTensor = std::optional<Tensor>;
using xrt_torch::CoreError;
using xrt_torch::kernels;

enum Choice : int64_t { kTorch = 0, kCore = 1 };
// How a call reached autograd: through the dispatcher (the ops below autograd run, and the
// backward calls fused_linear_weight_grad, which torch.compile traces).
constexpr int64_t kRedispatch = -1;

enum Activation : int64_t { kNone = 0, kRelu = 1, kGelu = 2 };

int64_t activation_code(c10::string_view name) {
  if (name == "none") return kNone;
  if (name == "relu") return kRelu;
  if (name == "gelu") return kGelu;
  TORCH_CHECK_VALUE(false, "fused_linear: activation must be 'none', 'relu' or 'gelu', got '",
                    std::string(name), "'");
  return kNone;
}

const char* activation_name(int64_t code) {
  return code == kRelu ? "relu" : code == kGelu ? "gelu" : "none";
}

// --- The core's GEMM -------------------------------------------------------------------------

// What a deciding call (the policy layer's first of its kind) learns: the core's decision.
struct Report {
  bool core = false;
  std::string kernel, reason;
  bool fallen_back = false;
};
thread_local Report* report_to = nullptr;

xrt_view view_of(const Tensor& t) {
  if (!t.is_cpu() && !t.is_cuda()) {
    throw CoreError(XRT_UNSUPPORTED, ("linear: the core's kernels run on the CPU and CUDA, not " +
                                      t.device().str()).c_str());
  }
  xrt_view v{};
  v.data = t.data_ptr();
  v.shape = t.sizes().data();
  v.strides = t.strides().data();
  v.ndim = static_cast<int32_t>(t.dim());
  v.dtype = xrt_torch::dtype_code(t.scalar_type());
  v.device = t.is_cuda() ? t.get_device() : -1;
  return v;
}

// GELU's pre-activation as the core's epilogue stores it: an [M, N] matrix whose row stride
// is a multiple of 8 elements (cuBLASLt's rule for GELU_AUX).
Tensor preactivation_buffer(int64_t m, int64_t n, const at::TensorOptions& options) {
  const int64_t row = std::max<int64_t>((n + 7) / 8 * 8, 8);
  return at::empty({m, row}, options).narrow(1, 0, n);
}

std::vector<int64_t> out_shape(const Tensor& x, const Tensor& w) {
  std::vector<int64_t> shape = x.sizes().vec();
  shape.back() = w.size(0);
  return shape;
}

// The policy entry the core resolves: as xpuruntime.ops.linear takes it (no kernel: auto).
struct CorePolicy {
  std::string kernel, mode;
  bool tf32;
};

CorePolicy core_policy(const std::string& kernel, const std::string& mode, const Tensor& x) {
  // TF32 for fp32 GEMMs exactly when PyTorch's own matmuls may use it.
  const bool tf32 = x.scalar_type() == at::kFloat && at::globalContext().allowTF32CuBLAS();
  return {kernel == "auto" ? std::string() : kernel, mode, tf32};
}

void run_core(xrt_linear_args& a, const CorePolicy& policy, const Tensor& on) {
  a.kernel = policy.kernel.c_str();
  a.mode = policy.mode.c_str();
  a.tf32 = policy.tf32;
  a.report = report_to != nullptr;
  xrt_torch::check(kernels().linear(&a, xrt_torch::launch_site(on).second));
  if (report_to != nullptr) {
    report_to->core = true;
    report_to->kernel = a.decision_kernel;
    report_to->reason = a.decision_reason;
    report_to->fallen_back = a.decision_fallen_back != 0;
  }
}

struct Forward {
  Tensor y;
  Tensor z;  // GELU's pre-activation when asked (the core's rows may be padded)
};

Forward core_forward(const Tensor& x, const Tensor& w, const OptTensor& bias, int64_t act,
                     bool save, const CorePolicy& policy) {
  xrt_linear_args a{};
  a.activation = static_cast<int32_t>(act);
  a.save_preactivation = save && act == kGelu;
  a.a = view_of(x);
  a.b = view_of(w);
  if (bias && bias->defined()) a.bias = view_of(*bias);
  const std::vector<int64_t> shape = out_shape(x, w);
  Forward out;
  out.y = at::empty(shape, x.options());
  a.write_into = 1;
  a.out_into = view_of(out.y);
  Tensor z;  // the core's [M, N] view; autograd keeps it with the output's leading dimensions
  if (a.save_preactivation) {
    const int64_t m = c10::multiply_integers(shape.begin(), shape.end() - 1);
    z = preactivation_buffer(m, shape.back(), x.options());
    a.extra_into = view_of(z);
  }
  run_core(a, policy, x);
  if (z.defined()) out.z = z.view(shape);
  return out;
}

Forward torch_forward(const Tensor& x, const Tensor& w, const OptTensor& bias, int64_t act,
                      bool save) {
  Tensor z = at::linear(x, w, bias);
  if (act == kRelu) return {at::relu(z), Tensor()};
  if (act == kGelu) return {at::gelu(z, "tanh"), save ? z : Tensor()};
  return {z, Tensor()};
}

Forward forward(int64_t choice, const Tensor& x, const Tensor& w, const OptTensor& bias,
                int64_t act, bool save, const std::string& kernel, const std::string& mode) {
  if (choice == kCore) return core_forward(x, w, bias, act, save, core_policy(kernel, mode, x));
  return torch_forward(x, w, bias, act, save);
}

// --- The Python policy layer's hooks -------------------------------------------------------

// resolve(x, weight, bias, activation, kernel, mode) -> choice (the dispatcher's kernels), and
// fall_back(op, kernel, mode, chosen, reason): the kernel fallback rule.
py::object* resolver = nullptr;
py::object* fall_back = nullptr;

int64_t resolve(const Tensor& x, const Tensor& w, const OptTensor& bias,
                c10::string_view activation, c10::string_view kernel, c10::string_view mode) {
  TORCH_CHECK(resolver != nullptr, "xpuruntime's native fused_linear has no resolver: import "
                                   "xpuruntime.pytorch.ops first");
  py::gil_scoped_acquire gil;
  return (*resolver)(x, w, bias, std::string(activation), std::string(kernel), std::string(mode))
      .cast<int64_t>();
}

// (dweight, dbias or an empty tensor): the core's BGRADB GEMM where it serves the call (a pin
// it cannot serve follows the fallback rule), else PyTorch's matmul and sum.
std::tuple<Tensor, Tensor> weight_grad(const Tensor& dz, const Tensor& x, bool bias_grad,
                                       const std::string& kernel, const std::string& mode) {
  const Tensor dz2 = dz.reshape({-1, dz.size(-1)}).contiguous();
  const Tensor x2 = x.reshape({-1, x.size(-1)}).contiguous();
  if (kernel != "torch") {
    try {
      xrt_linear_args a{};
      a.weight_grad = 1;
      a.bias_grad = bias_grad;
      a.a = view_of(dz2);
      a.b = view_of(x2);
      const int64_t n = dz2.size(1), k = x2.size(1);
      Tensor dw = at::empty({n, k}, dz2.options());
      Tensor db = bias_grad ? at::empty({n}, dz2.options()) : dz.new_empty({0});
      a.write_into = 1;
      a.out_into = view_of(dw);
      if (bias_grad) a.extra_into = view_of(db);
      run_core(a, core_policy(kernel, mode, x2), dz2);
      return {dw, db};
    } catch (const CoreError& e) {
      if (e.status != XRT_UNSUPPORTED) throw;
      if (kernel != "auto") {
        TORCH_CHECK(fall_back != nullptr, "xpuruntime's native fused_linear has no hooks");
        py::gil_scoped_acquire gil;
        (*fall_back)("linear", kernel, mode, "torch", std::string("weight gradient: ") + e.what());
      }
    }
  }
  return {dz2.t().matmul(x2), bias_grad ? dz2.sum(0) : dz.new_empty({0})};
}

// --- Autograd ----------------------------------------------------------------------------

using LinearFn = std::tuple<Tensor, Tensor>(const Tensor&, const Tensor&, const OptTensor&,
                                            c10::string_view, c10::string_view, c10::string_view);
using WeightGradFn = std::tuple<Tensor, Tensor>(const Tensor&, const Tensor&, bool,
                                                c10::string_view, c10::string_view);

const c10::TypedOperatorHandle<LinearFn>& linear_op() {
  static const auto op = c10::Dispatcher::singleton()
                             .findSchemaOrThrow("xpuruntime::fused_linear", "")
                             .typed<LinearFn>();
  return op;
}

const c10::TypedOperatorHandle<WeightGradFn>& weight_grad_op() {
  static const auto op = c10::Dispatcher::singleton()
                             .findSchemaOrThrow("xpuruntime::fused_linear_weight_grad", "")
                             .typed<WeightGradFn>();
  return op;
}

// The (kernel, mode) pairs calls have asked for, kept for the process (a handful: one per
// policy entry), so that a training call saves a pointer rather than two strings (each saved
// entry is a hashed key and an IValue per call). A deque's elements never move.
using Policy = std::pair<std::string, std::string>;

int64_t intern(const std::string& kernel, const std::string& mode) {
  static std::mutex mutex;
  static std::deque<Policy> seen;
  std::lock_guard<std::mutex> lock(mutex);
  for (const Policy& p : seen) {
    if (p.first == kernel && p.second == mode) return reinterpret_cast<intptr_t>(&p);
  }
  seen.emplace_back(kernel, mode);
  return reinterpret_cast<intptr_t>(&seen.back());
}

const Policy& interned(int64_t id) { return *reinterpret_cast<const Policy*>(id); }

// Saved "call": choice + 1 (0..2), the activation and whether there is a bias, in bits.
constexpr int64_t kHasBias = 1, kActShift = 1, kChoiceShift = 3;

struct LinearFunction : public torch::autograd::Function<LinearFunction> {
  static torch::autograd::variable_list forward(torch::autograd::AutogradContext* ctx,
                                                const Tensor& x, const Tensor& w,
                                                const OptTensor& bias, int64_t act,
                                                const std::string& kernel,
                                                const std::string& mode, int64_t choice) {
    Tensor y, z;
    if (choice == kRedispatch) {
      at::AutoDispatchBelowADInplaceOrView below;
      std::tie(y, z) = linear_op().call(x, w, bias, activation_name(act), kernel, mode);
    } else {
      Forward out = ::forward(choice, x, w, bias, act, true, kernel, mode);
      y = out.y;
      z = out.z;
    }
    ctx->save_for_backward({x, w, act == kGelu ? z : act == kRelu ? y : Tensor()});
    ctx->set_materialize_grads(false);
    ctx->saved_data["call"] = ((choice + 1) << kChoiceShift) | (act << kActShift) |
                              (bias && bias->defined() ? kHasBias : 0);
    ctx->saved_data["policy"] = intern(kernel, mode);
    if (choice != kRedispatch) return {y};
    ctx->mark_non_differentiable({z});
    return {y, z};
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    // (x, weight, bias, activation, kernel, mode, choice)
    torch::autograd::variable_list result(7);
    const Tensor& grad = grads[0];
    if (!grad.defined()) return result;
    const int64_t call = ctx->saved_data["call"].toInt();
    const int64_t choice = (call >> kChoiceShift) - 1;
    const int64_t act = (call >> kActShift) & 3;
    const bool has_bias = call & kHasBias;
    const Policy& policy = interned(ctx->saved_data["policy"].toInt());
    const auto saved = ctx->get_saved_variables();
    const Tensor &x = saved[0], &w = saved[1];
    Tensor dz = grad;
    if (act == kGelu) dz = at::gelu_backward(grad, saved[2], "tanh");
    if (act == kRelu) dz = at::threshold_backward(grad, saved[2], 0);
    if (ctx->needs_input_grad(0)) result[0] = dz.matmul(w);
    const bool weight_wanted = ctx->needs_input_grad(1);
    const bool bias_wanted = has_bias && ctx->needs_input_grad(2);
    if (weight_wanted || bias_wanted) {
      // The bias gradient comes with the weight's GEMM whenever there is a bias (BGRADB).
      auto [dw, db] = choice == kRedispatch
                          ? weight_grad_op().call(dz, x, has_bias, policy.first, policy.second)
                          : weight_grad(dz, x, has_bias, policy.first, policy.second);
      if (weight_wanted) result[1] = dw;
      if (bias_wanted) result[2] = db;
    }
    return result;
  }
};

// --- The dispatcher's kernels ----------------------------------------------------------------

std::tuple<Tensor, Tensor> linear_kernel(const Tensor& x, const Tensor& w, const OptTensor& bias,
                                         c10::string_view activation, c10::string_view kernel,
                                         c10::string_view mode) {
  const int64_t choice = resolve(x, w, bias, activation, kernel, mode);
  const int64_t act = activation_code(activation);
  Forward out = forward(choice, x, w, bias, act, act == kGelu, std::string(kernel),
                        std::string(mode));
  // The pre-activation as the Meta kernel promises it: contiguous (the core pads its rows).
  return {out.y, act == kGelu ? out.z.contiguous() : x.new_empty({0})};
}

std::tuple<Tensor, Tensor> weight_grad_kernel(const Tensor& dz, const Tensor& x, bool bias_grad,
                                              c10::string_view kernel, c10::string_view mode) {
  return weight_grad(dz, x, bias_grad, std::string(kernel), std::string(mode));
}

// Meta: shapes only, symbolic where PyTorch traces with dynamic shapes.
std::tuple<Tensor, Tensor> linear_meta(const Tensor& x, const Tensor& w, const OptTensor&,
                                       c10::string_view activation, c10::string_view,
                                       c10::string_view) {
  std::vector<c10::SymInt> shape = x.sym_sizes().vec();
  shape.back() = w.sym_size(0);
  Tensor y = at::empty_symint(shape, x.options());
  return {y, activation == "gelu" ? at::empty_like(y) : x.new_empty({0})};
}

std::tuple<Tensor, Tensor> weight_grad_meta(const Tensor& dz, const Tensor& x, bool bias_grad,
                                            c10::string_view, c10::string_view) {
  const c10::SymInt n = dz.sym_size(-1);
  return {at::empty_symint({n, x.sym_size(-1)}, dz.options()),
          bias_grad ? at::empty_symint({n}, dz.options()) : dz.new_empty({0})};
}

std::tuple<Tensor, Tensor> linear_autograd(const Tensor& x, const Tensor& w,
                                           const OptTensor& bias, c10::string_view activation,
                                           c10::string_view kernel, c10::string_view mode) {
  auto out = LinearFunction::apply(x, w, bias, activation_code(activation), std::string(kernel),
                                   std::string(mode), kRedispatch);
  return {out[0], out[1]};
}

// --- The eager entry point ---------------------------------------------------------------------

bool needs_grad(const Tensor& x, const Tensor& w, const OptTensor& bias) {
  if (!at::GradMode::is_enabled()) return false;
  return x.requires_grad() || w.requires_grad() || (bias && bias->requires_grad());
}

// y for a choice (kCore or kTorch) the policy layer resolved; with `report`, (y, the core's
// decision as (kernel, fallen_back, reason), or None when PyTorch's kernel ran).
py::object linear_forward(const Tensor& x, const Tensor& w, const OptTensor& bias,
                          const std::string& activation, const std::string& kernel,
                          const std::string& mode, int64_t choice, bool report) {
  const int64_t act = activation_code(activation);
  Report decision;
  Tensor y;
  {
    py::gil_scoped_release no_gil;
    report_to = report ? &decision : nullptr;
    try {
      if (needs_grad(x, w, bias)) {
        y = LinearFunction::apply(x, w, bias, act, kernel, mode, choice)[0];
      } else {
        y = forward(choice, x, w, bias, act, false, kernel, mode).y;
      }
    } catch (...) {
      report_to = nullptr;
      throw;
    }
    report_to = nullptr;
  }
  if (!report) return py::cast(y);
  if (!decision.core) return py::make_tuple(y, py::none());
  return py::make_tuple(y, py::make_tuple(decision.kernel, decision.fallen_back, decision.reason));
}

}  // namespace

// The schemas the Python layer defined before (the ONNX export translation keys on them).
TORCH_LIBRARY_FRAGMENT(xpuruntime, m) {
  m.def("fused_linear(Tensor x, Tensor weight, Tensor? bias, str activation, str kernel, "
        "str mode) -> (Tensor, Tensor)");
  m.def("fused_linear_weight_grad(Tensor dz, Tensor x, bool bias_grad, str kernel, str mode) "
        "-> (Tensor, Tensor)");
}

TORCH_LIBRARY_IMPL(xpuruntime, CPU, m) {
  m.impl("fused_linear", linear_kernel);
  m.impl("fused_linear_weight_grad", weight_grad_kernel);
}

TORCH_LIBRARY_IMPL(xpuruntime, CUDA, m) {
  m.impl("fused_linear", linear_kernel);
  m.impl("fused_linear_weight_grad", weight_grad_kernel);
}

TORCH_LIBRARY_IMPL(xpuruntime, Meta, m) {
  m.impl("fused_linear", linear_meta);
  m.impl("fused_linear_weight_grad", weight_grad_meta);
}

TORCH_LIBRARY_IMPL(xpuruntime, Autograd, m) { m.impl("fused_linear", linear_autograd); }

namespace xrt_torch {

void bind_linear_ops(py::module_& module) {
  module.def(
      "set_linear_hooks",
      [](py::object resolve_fn, py::object fall_back_fn) {
        if (resolver == nullptr) resolver = new py::object();  // both live for the process
        if (fall_back == nullptr) fall_back = new py::object();
        *resolver = std::move(resolve_fn);
        *fall_back = std::move(fall_back_fn);
      },
      "The policy layer's resolve(x, weight, bias, activation, kernel, mode) -> choice, asked "
      "by the dispatcher's kernels, and fall_back(op, kernel, mode, chosen, reason).");
  module.def("linear_forward", &linear_forward, "Eager fused_linear on a resolved choice.");
}

}  // namespace xrt_torch
