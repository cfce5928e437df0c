// fused_attention's PyTorch-backend path in C++ with PyTorch's dispatcher (CPU and CUDA
// kernels, the autograd node): PyTorch's SDPA backends called through their own ATen entry
// points (FlashAttention-2, PyTorch's CPU flash kernel for CPU tensors, memory-efficient,
// cuDNN), with the input preparation SDPA does before calling one: head sizes padded to a
// multiple of 8 for flash (the scale still that of the true head size), boolean masks made
// additive and expanded for the mask-taking backends, the memory-efficient kernel's mask rows
// aligned to 16 elements.
//
// The kernel choice stays in Python (ops/attention.py): whether a backend can serve a call is
// PyTorch's own check (torch.backends.cuda.can_use_*), asked once per call signature, and the
// decision record and the fallback rule live there. So the eager entry points take what
// that layer resolved: attention_decided on the first call of its kind, which it remembers
// per (policy state, call signature), and the calls after it never reach Python:
// xpuruntime.pytorch.ops.fused_attention is itself a C function here (attention_entry: the
// checks that nothing intercepts the call, whether it needs grad, and one lookup, then the
// kernel), whose slow path for every other call is the policy layer's Python function (which
// torch.compile traces in its place, registered there with substitute_in_graph). Nothing
// in Python runs between the user's call and the entry point. The dispatcher's kernels, which
// see only the requested (kernel, mode), ask the policy layer's hook, and hand the kernels
// that are not an entry point (math, PyTorch's own choice) back to it. The fake kernels are
// Python's too (torch.library.register_fake): the results' layouts depend on the device,
// which a Meta kernel's tensors do not carry; they reuse the entry functions below, which run
// on fake tensors through the dispatcher.
//
// Eager calls return the entry point's output and let PyTorch's autograd run the backend's
// own backward, exactly as SDPA does. The op xpuruntime::fused_attention (torch.compile,
// tracing) returns what the backward needs (log-sum-exp, dropout RNG state) and its autograd
// node calls xpuruntime::fused_attention_backward, which the tracer sees.
#include <ATen/ATen.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/PythonTorchFunctionTLS.h>
#include <c10/util/SmallVector.h>
#include <c10/core/impl/LocalDispatchKeySet.h>
#include <c10/core/impl/TorchDispatchModeTLS.h>
#include <torch/csrc/autograd/custom_function.h>
#include <torch/csrc/Exceptions.h>
#include <torch/csrc/autograd/python_variable.h>
#include <torch/csrc/jit/frontend/tracer.h>
#include <torch/csrc/utils/pybind.h>
#include <torch/library.h>
#include <torch/version.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <optional>
#include <string>
#include <tuple>
#include <unordered_map>
#include <utility>
#include <vector>

namespace {

namespace py = pybind11;
using at::Tensor;
using OptTensor = std::optional<Tensor>;
using Saved = std::tuple<Tensor, Tensor, Tensor, Tensor>;  // output, lse, seed, offset
using Grads = std::tuple<Tensor, Tensor, Tensor>;

// The backends with an ATen entry point; flash is PyTorch's CPU flash kernel on CPU tensors.
enum Entry : int64_t { kFlash = 0, kEfficient = 1, kCudnn = 2 };
constexpr int64_t kNotAnEntry = -1;

int64_t entry_code(c10::string_view kernel) {
  if (kernel == "flash_v2") return kFlash;
  if (kernel == "efficient") return kEfficient;
  if (kernel == "cudnn") return kCudnn;
  return kNotAnEntry;
}

// --- Input preparation, as SDPA does it --------------------------------------------------

Tensor pad_to(const Tensor& t, int64_t multiple) {
  const c10::SymInt extra = (multiple - t.sym_size(-1) % multiple) % multiple;
  if (extra == 0) return t;
  return at::constant_pad_nd_symint(t, {c10::SymInt(0), extra}, 0);
}

// `mask` as the additive bias the fused kernels take; with `expand`, expanded to
// (batch, heads, L, S) and its rows padded to `align` elements and sliced back (the
// memory-efficient kernel reads them aligned).
OptTensor additive_mask(const OptTensor& mask, const Tensor& q, const Tensor& k, int64_t align,
                        bool expand) {
  if (!mask || !mask->defined()) return std::nullopt;
  Tensor bias = *mask;
  if (bias.scalar_type() == at::kBool) {
    bias = at::zeros_symint(mask->sym_sizes(), q.options().device(mask->device()))
               .masked_fill_(mask->logical_not(), -std::numeric_limits<double>::infinity());
  }
  if (!expand) return bias;
  bias = bias.expand_symint({q.sym_size(0), q.sym_size(1), q.sym_size(-2), k.sym_size(-2)});
  const c10::SymInt columns = bias.sym_size(-1);
  if (align > 1 && columns % align != 0) {
    return pad_to(bias, align).narrow_symint(-1, 0, columns);
  }
  return bias;
}

// The scale of the true head size, for a call whose head size is padded.
std::optional<double> true_scale(const Tensor& q, std::optional<double> scale) {
  if (scale) return scale;
  return 1.0 / std::sqrt(static_cast<double>(q.sym_size(-1).guard_int(__FILE__, __LINE__)));
}

// What a backend keeps none of (an undefined result): an empty tensor, a distinct one per
// result (an op's outputs may not alias one another). Without dropout the RNG state is
// unused by every backward, and the entry points return it uninitialised, on a device that
// differs between their meta and CUDA kernels (flash: the CPU in one, the GPU in the other):
// the op returns none then, so its fake and real results agree.
Saved kept(const Tensor& q, double dropout_p, Tensor out, Tensor lse, Tensor seed,
           Tensor offset) {
  const auto empty = [&](const Tensor& t, at::ScalarType type) {
    return t.defined() ? t : q.new_empty({0}, q.options().dtype(type));
  };
  if (dropout_p == 0.0) seed = offset = Tensor();
  return {std::move(out), empty(lse, at::kFloat), empty(seed, at::kLong), empty(offset, at::kLong)};
}

// --- Forward and backward ------------------------------------------------------------------

// (output, log-sum-exp, seed, offset) as the entry point returns them: undefined (or, for the
// RNG state without dropout, uninitialised) where the backend keeps none.
Saved entry_raw(int64_t code, const Tensor& q, const Tensor& k, const Tensor& v,
                const OptTensor& mask, double dropout_p, bool is_causal,
                std::optional<double> scale, bool need_lse) {
  if (code == kFlash && q.is_cuda()) {
    const c10::SymInt head = q.sym_size(-1);
    if (head % 8 != 0) {
      auto r = at::_scaled_dot_product_flash_attention(pad_to(q, 8), pad_to(k, 8), pad_to(v, 8),
                                                       dropout_p, is_causal, false,
                                                       true_scale(q, scale));
      return {std::get<0>(r).narrow_symint(-1, 0, head), std::get<1>(r), std::get<6>(r),
              std::get<7>(r)};
    }
    auto r = at::_scaled_dot_product_flash_attention(q, k, v, dropout_p, is_causal, false, scale);
    return {std::get<0>(r), std::get<1>(r), std::get<6>(r), std::get<7>(r)};
  }
  if (code == kFlash) {
    auto [out, lse] = at::_scaled_dot_product_flash_attention_for_cpu(
        q, k, v, dropout_p, is_causal, additive_mask(mask, q, k, 1, false), scale);
    return {out, lse, Tensor(), Tensor()};
  }
  if (code == kEfficient) {
    auto [out, lse, seed, offset] = at::_scaled_dot_product_efficient_attention(
        q, k, v, additive_mask(mask, q, k, 16, true), need_lse, dropout_p, is_causal, scale);
    return {out, lse, seed, offset};
  }
  TORCH_CHECK_VALUE(code == kCudnn, "fused_attention: no ATen entry point for code ", code);
  auto r = at::_scaled_dot_product_cudnn_attention(q, k, v, additive_mask(mask, q, k, 1, true),
                                                   need_lse, dropout_p, is_causal, false, scale);
  return {std::get<0>(r), std::get<1>(r), std::get<6>(r), std::get<7>(r)};
}

// (output, log-sum-exp, seed, offset) from the entry point, empty where the backend keeps
// none: the op's results.
Saved entry_forward(int64_t code, const Tensor& q, const Tensor& k, const Tensor& v,
                    const OptTensor& mask, double dropout_p, bool is_causal,
                    std::optional<double> scale, bool need_lse) {
  auto [out, lse, seed, offset] =
      entry_raw(code, q, k, v, mask, dropout_p, is_causal, scale, need_lse);
  return kept(q, dropout_p, std::move(out), std::move(lse), std::move(seed), std::move(offset));
}

// (dq, dk, dv) from the backend's own backward, given what its forward kept.
Grads entry_backward(int64_t code, const Tensor& grad_in, const Tensor& q, const Tensor& k,
                     const Tensor& v, const Tensor& out, const Tensor& lse, const Tensor& seed,
                     const Tensor& offset, const OptTensor& mask, double dropout_p,
                     bool is_causal, std::optional<double> scale) {
  // An expanded gradient (of .sum()): the kernels read rows.
  const Tensor grad = grad_in.sym_stride(-1) != 1 ? grad_in.contiguous() : grad_in;
  if (code == kFlash && q.is_cuda()) {
    const c10::SymInt head = q.sym_size(-1);
    const bool padded = head % 8 != 0;
    auto [dq, dk, dv] = at::_scaled_dot_product_flash_attention_backward_symint(
        pad_to(grad, 8), pad_to(q, 8), pad_to(k, 8), pad_to(v, 8), pad_to(out, 8), lse, Tensor(),
        Tensor(), q.sym_size(-2), k.sym_size(-2), dropout_p, is_causal, seed, offset,
        padded ? true_scale(q, scale) : scale);
    if (!padded) return {dq, dk, dv};
    return {dq.narrow_symint(-1, 0, head), dk.narrow_symint(-1, 0, head),
            dv.narrow_symint(-1, 0, head)};
  }
  if (code == kFlash) {
    return at::_scaled_dot_product_flash_attention_for_cpu_backward(
        grad, q, k, v, out, lse, dropout_p, is_causal, additive_mask(mask, q, k, 1, false),
        scale);
  }
  if (code == kEfficient) {
    const OptTensor bias = additive_mask(mask, q, k, 16, true);
    auto [dq, dk, dv, dbias] = at::_scaled_dot_product_efficient_attention_backward(
        grad, q, k, v, bias.value_or(Tensor()), out, lse, seed, offset, dropout_p,
        {true, true, true, false}, is_causal, scale);
    return {dq, dk, dv};
  }
  TORCH_CHECK_VALUE(code == kCudnn, "fused_attention: no ATen entry point for code ", code);
  const OptTensor bias = additive_mask(mask, q, k, 1, true);
  return at::_scaled_dot_product_cudnn_attention_backward_symint(
      grad, q, k, v, out, lse, seed, offset, bias.value_or(Tensor()), Tensor(), Tensor(),
      q.sym_size(-2), k.sym_size(-2), dropout_p, is_causal, scale);
}

// --- The Python policy layer's hooks ---------------------------------------------------------

// choose(record, kernel, mode, q, k, v, mask, dropout_p, is_causal, scale, needs_grad) -> the
// kernel that runs the call (recorded with `record`); forward_other(...) and
// backward_other(...): the kernels that are not an entry point (math, PyTorch's choice).
struct Hooks {
  py::object choose, forward_other, backward_other;
};
Hooks* hooks = nullptr;

const Hooks& the_hooks() {
  TORCH_CHECK(hooks != nullptr, "xpuruntime's native fused_attention has no hooks: import "
                                "xpuruntime.pytorch.ops first");
  return *hooks;
}

std::string choose(bool record, c10::string_view kernel, c10::string_view mode, const Tensor& q,
                   const Tensor& k, const Tensor& v, const OptTensor& mask, double dropout_p,
                   bool is_causal, std::optional<double> scale, bool needs_grad) {
  const Hooks& h = the_hooks();
  py::gil_scoped_acquire gil;
  return h.choose(record, std::string(kernel), std::string(mode), q, k, v, mask, dropout_p,
                  is_causal, scale, needs_grad)
      .cast<std::string>();
}

// --- The dispatcher's kernels ----------------------------------------------------------------

Saved attention_kernel(const Tensor& q, const Tensor& k, const Tensor& v, const OptTensor& mask,
                       double dropout_p, bool is_causal, std::optional<double> scale,
                       c10::string_view kernel, c10::string_view mode, bool need_lse) {
  // The op may be called with a kernel that cannot serve the call: resolved (and recorded)
  // by the policy layer.
  const std::string chosen =
      choose(true, kernel, mode, q, k, v, mask, dropout_p, is_causal, scale, need_lse);
  const int64_t code = entry_code(chosen);
  if (code != kNotAnEntry) {
    return entry_forward(code, q, k, v, mask, dropout_p, is_causal, scale, need_lse);
  }
  const Hooks& h = the_hooks();
  py::gil_scoped_acquire gil;
  return h.forward_other(q, k, v, mask, dropout_p, is_causal, scale, chosen, need_lse)
      .cast<Saved>();
}

Grads attention_backward_kernel(const Tensor& grad, const Tensor& q, const Tensor& k,
                                const Tensor& v, const Tensor& out, const Tensor& lse,
                                const Tensor& seed, const Tensor& offset, const OptTensor& mask,
                                double dropout_p, bool is_causal, std::optional<double> scale,
                                c10::string_view kernel, c10::string_view mode) {
  // The forward's choice (a fallback was recorded there): the same answer, asked again.
  const std::string chosen =
      choose(false, kernel, mode, q, k, v, mask, dropout_p, is_causal, scale, true);
  const int64_t code = entry_code(chosen);
  if (code != kNotAnEntry) {
    return entry_backward(code, grad, q, k, v, out, lse, seed, offset, mask, dropout_p,
                          is_causal, scale);
  }
  const Hooks& h = the_hooks();
  py::gil_scoped_acquire gil;
  return h.backward_other(grad, q, k, v, std::make_tuple(out, lse, seed, offset), mask,
                          dropout_p, is_causal, scale, chosen)
      .cast<Grads>();
}

using AttentionFn = Saved(const Tensor&, const Tensor&, const Tensor&, const OptTensor&, double,
                          bool, std::optional<double>, c10::string_view, c10::string_view, bool);
using BackwardFn = Grads(const Tensor&, const Tensor&, const Tensor&, const Tensor&,
                         const Tensor&, const Tensor&, const Tensor&, const Tensor&,
                         const OptTensor&, double, bool, std::optional<double>,
                         c10::string_view, c10::string_view);

const c10::TypedOperatorHandle<AttentionFn>& attention_op() {
  static const auto op = c10::Dispatcher::singleton()
                             .findSchemaOrThrow("xpuruntime::fused_attention", "")
                             .typed<AttentionFn>();
  return op;
}

const c10::TypedOperatorHandle<BackwardFn>& backward_op() {
  static const auto op = c10::Dispatcher::singleton()
                             .findSchemaOrThrow("xpuruntime::fused_attention_backward", "")
                             .typed<BackwardFn>();
  return op;
}

// The autograd node of the op: forward below autograd, backward through the backward op (so
// that torch.compile traces it). lse and the RNG state are outputs but not differentiable.
struct AttentionFunction : public torch::autograd::Function<AttentionFunction> {
  static torch::autograd::variable_list forward(torch::autograd::AutogradContext* ctx,
                                                const Tensor& q, const Tensor& k,
                                                const Tensor& v, const OptTensor& mask,
                                                double dropout_p, bool is_causal,
                                                std::optional<double> scale,
                                                const std::string& kernel,
                                                const std::string& mode, bool need_lse) {
    Tensor out, lse, seed, offset;
    {
      at::AutoDispatchBelowADInplaceOrView below;
      std::tie(out, lse, seed, offset) =
          attention_op().call(q, k, v, mask, dropout_p, is_causal, scale, kernel, mode, need_lse);
    }
    ctx->save_for_backward({q, k, v, mask.value_or(Tensor()), out, lse, seed, offset});
    ctx->saved_data["dropout_p"] = dropout_p;
    ctx->saved_data["is_causal"] = is_causal;
    ctx->saved_data["scale"] = scale;
    ctx->saved_data["kernel"] = kernel;
    ctx->saved_data["mode"] = mode;
    ctx->mark_non_differentiable({lse, seed, offset});
    return {out, lse, seed, offset};
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    const OptTensor mask = saved[3].defined() ? OptTensor(saved[3]) : std::nullopt;
    const c10::IValue& scale = ctx->saved_data["scale"];
    auto [dq, dk, dv] = backward_op().call(
        grads[0], saved[0], saved[1], saved[2], saved[4], saved[5], saved[6], saved[7], mask,
        ctx->saved_data["dropout_p"].toDouble(), ctx->saved_data["is_causal"].toBool(),
        scale.isNone() ? std::nullopt : std::optional<double>(scale.toDouble()),
        ctx->saved_data["kernel"].toStringRef(), ctx->saved_data["mode"].toStringRef());
    // (query, key, value, attn_mask, dropout_p, is_causal, scale, kernel, mode, need_lse)
    return {dq, dk, dv, Tensor(), Tensor(), Tensor(), Tensor(), Tensor(), Tensor(), Tensor()};
  }
};

Saved attention_autograd(const Tensor& q, const Tensor& k, const Tensor& v, const OptTensor& mask,
                         double dropout_p, bool is_causal, std::optional<double> scale,
                         c10::string_view kernel, c10::string_view mode, bool need_lse) {
  auto r = AttentionFunction::apply(q, k, v, mask, dropout_p, is_causal, scale,
                                    std::string(kernel), std::string(mode), need_lse);
  return {r[0], r[1], r[2], r[3]};
}

// --- The eager entry point -----------------------------------------------------------------------

// The eager path's choices: call signature -> what serves it, for the policy state in effect
// (the Python layer's State object: a new policy or scope starts afresh, so that its first
// call decides and records). The request (kernel, mode) is not part of the signature: the
// state and the signature determine it (the policy's entry, the lockfile's answer for the
// signature, a refusal's fallback). Read and written with the GIL held.
using Signature = c10::SmallVector<int64_t, 64>;  // four 4-D tensors fit without allocating

struct SignatureHash {
  size_t operator()(const Signature& key) const {
    size_t h = key.size();
    for (int64_t v : key) {
      h ^= std::hash<int64_t>()(v) + 0x9e3779b97f4a7c15ULL + (h << 6) + (h >> 2);
    }
    return h;
  }
};
using Choices = std::unordered_map<Signature, int64_t, SignatureHash>;
Choices* choices = nullptr;
PyObject* choices_state = nullptr;  // a strong reference: its identity keys `choices`

// PyTorch's own SDPA selection (no policy entry): served by at::scaled_dot_product_attention.
constexpr int64_t kSdpa = -2;

void add_meta(Signature& key, const Tensor& t) {
  key.push_back(t.dim());
  key.append(t.sizes().begin(), t.sizes().end());
  key.append(t.strides().begin(), t.strides().end());
  key.push_back(static_cast<int64_t>(t.scalar_type()));
  key.push_back(static_cast<int64_t>(t.device().type()));
  key.push_back(t.device().index());
}

// The choices of `state`, emptied when the state in effect changed.
Choices& choices_of(PyObject* state) {
  if (choices == nullptr) choices = new Choices();  // lives for the process
  if (choices_state != state) {
    choices->clear();
    Py_INCREF(state);
    Py_XSETREF(choices_state, state);
  }
  return *choices;
}

// What the choice depends on (PyTorch's checks read shapes, strides, dtypes, the device, the
// mask's layout, dropout, causality and the scale).
Signature signature(const Tensor& q, const Tensor& k, const Tensor& v, const OptTensor& mask,
                    double dropout_p, bool is_causal, std::optional<double> scale,
                    bool needs_grad) {
  Signature key;
  for (const Tensor* t : {&q, &k, &v}) add_meta(key, *t);
  if (mask && mask->defined()) add_meta(key, *mask);
  int64_t scale_bits = -1;
  if (scale) std::memcpy(&scale_bits, &*scale, sizeof scale_bits);
  key.append({dropout_p > 0.0, is_causal, scale.has_value(), scale_bits, needs_grad});
  return key;
}

// The output of a plain eager call on what serves it; its autograd is PyTorch's own (the
// entry points and SDPA are differentiable ATen ops).
Tensor eager_output(int64_t code, const Tensor& q, const Tensor& k, const Tensor& v,
                    const OptTensor& mask, double dropout_p, bool is_causal,
                    std::optional<double> scale, bool need_lse) {
  py::gil_scoped_release no_gil;
  if (code == kSdpa) {
#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 5)
    return at::scaled_dot_product_attention(q, k, v, mask, dropout_p, is_causal, scale, false);
#else
    return at::scaled_dot_product_attention(q, k, v, mask, dropout_p, is_causal, scale);
#endif
  }
  // Only the output: the eager path makes none of the op's placeholder tensors.
  return std::get<0>(entry_raw(code, q, k, v, mask, dropout_p, is_causal, scale, need_lse));
}

// Whether anything intercepts an op call (what torch._C's _len_torch_dispatch_stack,
// _is_torch_function_mode_enabled, _are_functorch_transforms_active and _get_tracing_state
// report): fake tensors, functionalisation, torch.func transforms, the JIT tracer. Only a
// call nothing intercepts may skip PyTorch's dispatcher.
bool intercepted() {
  const c10::DispatchKeySet included = c10::impl::tls_local_dispatch_key_set().included_;
  return c10::impl::TorchDispatchModeTLS::stack_len() > 0 ||
         at::impl::torch_function_mode_enabled() ||
         included.has(c10::DispatchKey::FuncTorchDynamicLayerFrontMode) ||
         included.has(c10::DispatchKey::FuncTorchDynamicLayerBackMode) ||
         torch::jit::tracer::isTracing();
}

// The value of a Python number argument (float or int), or an error set.
bool number(PyObject* object, double& value) {
  value = PyFloat_AsDouble(object);
  return !(value == -1.0 && PyErr_Occurred());
}

// query, key, value, attn_mask, dropout_p, is_causal, scale, enable_gqa
constexpr Py_ssize_t kParameters = 8;

// fused_attention as Python sees it: a C function (no Python frame on the path a decided call
// takes), the Python policy layer's function its slow path. Set once by attention_entry.
struct CFunction {
  PyObject* slow;                 // the Python function: every call this path does not serve
  PyObject* state_module;         // the namespace holding the policy state in effect ...
  PyObject* state_name;           // ... under this name (None until a first call makes it)
  PyObject* names[kParameters];   // the parameters' names (interned), for keyword arguments
  std::string doc;                // the function's text signature and docstring (ml_doc)
  PyMethodDef def;
};
CFunction* c_function = nullptr;

// The output of a call that a decided call signature serves (a new reference); nullptr with
// an error set; nullptr without one for every other call (the slow path's). Binds arguments
// as Python would, leaving anything unusual (an unknown or repeated keyword, a missing
// argument) to the slow path, which raises Python's own error.
PyObject* fast_output(PyObject* const* args, Py_ssize_t nargs, PyObject* kwnames) {
  HANDLE_TH_ERRORS
  if (nargs > kParameters) return nullptr;
  PyObject* bound[kParameters] = {nullptr};
  std::copy(args, args + nargs, bound);
  const Py_ssize_t keywords = kwnames == nullptr ? 0 : PyTuple_GET_SIZE(kwnames);
  for (Py_ssize_t i = 0; i < keywords; ++i) {
    PyObject* const name = PyTuple_GET_ITEM(kwnames, i);
    Py_ssize_t at = nargs;  // keyword names are interned by the compiler: identity first
    while (at < kParameters && c_function->names[at] != name) ++at;
    if (at == kParameters) {
      at = nargs;
      while (at < kParameters && PyUnicode_Compare(c_function->names[at], name) != 0) ++at;
      if (PyErr_Occurred()) PyErr_Clear();
    }
    if (at == kParameters || bound[at] != nullptr) return nullptr;
    bound[at] = args[nargs + i];
  }
  PyObject* const query = bound[0];
  PyObject* const key = bound[1];
  PyObject* const value = bound[2];
  PyObject* const attn_mask = bound[3];
  const bool masked = attn_mask != nullptr && attn_mask != Py_None;
  if (query == nullptr || key == nullptr || value == nullptr || !THPVariable_CheckExact(query) ||
      !THPVariable_CheckExact(key) || !THPVariable_CheckExact(value) ||
      (masked && !THPVariable_CheckExact(attn_mask)) || intercepted()) {
    return nullptr;
  }
  // The policy state in effect (a module global of the policy layer; None before first use).
  PyObject* const state =
      PyDict_GetItemWithError(c_function->state_module, c_function->state_name);
  if (state == nullptr || state == Py_None) return nullptr;
  double dropout_p = 0.0;
  if (bound[4] != nullptr && !number(bound[4], dropout_p)) return nullptr;
  const int is_causal = bound[5] == nullptr ? 0 : PyObject_IsTrue(bound[5]);
  const int enable_gqa = bound[7] == nullptr ? 0 : PyObject_IsTrue(bound[7]);
  if (is_causal < 0 || enable_gqa < 0) return nullptr;
  std::optional<double> scale;
  if (bound[6] != nullptr && bound[6] != Py_None) {
    double given = 0.0;
    if (!number(bound[6], given)) return nullptr;
    scale = given;
  }
  // Owning references, taken with the GIL held (as PyTorch's own bindings take theirs): a
  // tensor that only its Python object owns has the kernels' first reference to it keep that
  // object alive, which takes the GIL, so without these every copy a kernel makes would.
  const Tensor q = THPVariable_Unpack(query);
  const Tensor k = THPVariable_Unpack(key);
  const Tensor v = THPVariable_Unpack(value);
  // Grouped key/value heads: the policy layer repeats them (as SDPA's enable_gqa does).
  if (enable_gqa && (q.dim() < 3 || k.dim() < 3 || k.size(-3) != q.size(-3))) return nullptr;
  const OptTensor mask = masked ? OptTensor(THPVariable_Unpack(attn_mask)) : std::nullopt;
  const bool needs_grad = at::GradMode::is_enabled() &&
                          (q.requires_grad() || k.requires_grad() || v.requires_grad());
  const Choices& known = choices_of(state);
  const auto found =
      known.find(signature(q, k, v, mask, dropout_p, is_causal != 0, scale, needs_grad));
  if (found == known.end()) return nullptr;
  return THPVariable_Wrap(eager_output(found->second, q, k, v, mask, dropout_p, is_causal != 0,
                                       scale, needs_grad));
  END_HANDLE_TH_ERRORS
}

// The C function: the fast path's output, else (a miss, its argument errors included) the slow
// path with the arguments as given. The slow path is outside the fast path's error and
// warning handling: PyTorch's warnings reach Python there as they would from a Python caller.
PyObject* fused_attention_entry(PyObject* /*self*/, PyObject* const* args, Py_ssize_t nargs,
                                PyObject* kwnames) {
  PyObject* const out = fast_output(args, nargs, kwnames);
  if (out != nullptr || PyErr_Occurred()) return out;
  return PyObject_Vectorcall(c_function->slow, args, nargs, kwnames);
}

// The first call of its kind, decided (and recorded) by the policy layer under `state`: what
// serves it (`code`: an entry point, or kSdpa) remembered, then run.
Tensor attention_decided(const py::object& state, const Tensor& q, const Tensor& k,
                         const Tensor& v, const OptTensor& mask, double dropout_p,
                         bool is_causal, std::optional<double> scale, bool needs_grad,
                         int64_t code) {
  choices_of(state.ptr())[signature(q, k, v, mask, dropout_p, is_causal, scale, needs_grad)] =
      code;
  return eager_output(code, q, k, v, mask, dropout_p, is_causal, scale, needs_grad);
}

// fused_attention's C function over `slow` (the Python function with the same parameters),
// reading the policy state in effect as `state_module[state_name]`; `doc` starts with the
// text signature (inspect.signature reads it). Made once.
py::object attention_entry(py::function slow, py::dict state_module, py::str state_name,
                           const std::vector<std::string>& names, const std::string& doc) {
  TORCH_CHECK(c_function == nullptr, "fused_attention's C function is made once");
  TORCH_CHECK_VALUE(static_cast<Py_ssize_t>(names.size()) == kParameters,
                    "fused_attention takes ", kParameters, " parameters, got ", names.size());
  const py::object module_name = py::getattr(slow, "__module__");
  c_function = new CFunction();  // lives for the process
  c_function->slow = slow.release().ptr();
  c_function->state_module = state_module.release().ptr();
  c_function->state_name = state_name.release().ptr();
  for (Py_ssize_t i = 0; i < kParameters; ++i) {
    c_function->names[i] = PyUnicode_InternFromString(names[i].c_str());
  }
  c_function->doc = doc;
  c_function->def = {
      "fused_attention",
      reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(&fused_attention_entry)),
      METH_FASTCALL | METH_KEYWORDS, c_function->doc.c_str()};
  return py::reinterpret_steal<py::object>(
      PyCFunction_NewEx(&c_function->def, nullptr, module_name.ptr()));
}

}  // namespace

// The schemas the Python layer defined before (the ONNX export translation keys on them).
TORCH_LIBRARY_FRAGMENT(xpuruntime, m) {
  m.def("fused_attention(Tensor query, Tensor key, Tensor value, Tensor? attn_mask, "
        "float dropout_p, bool is_causal, float? scale, str kernel, str mode, bool need_lse) "
        "-> (Tensor, Tensor, Tensor, Tensor)");
  m.def("fused_attention_backward(Tensor grad, Tensor query, Tensor key, Tensor value, "
        "Tensor out, Tensor lse, Tensor seed, Tensor offset, Tensor? attn_mask, "
        "float dropout_p, bool is_causal, float? scale, str kernel, str mode) "
        "-> (Tensor, Tensor, Tensor)");
}

TORCH_LIBRARY_IMPL(xpuruntime, CPU, m) {
  m.impl("fused_attention", attention_kernel);
  m.impl("fused_attention_backward", attention_backward_kernel);
}

TORCH_LIBRARY_IMPL(xpuruntime, CUDA, m) {
  m.impl("fused_attention", attention_kernel);
  m.impl("fused_attention_backward", attention_backward_kernel);
}

TORCH_LIBRARY_IMPL(xpuruntime, Autograd, m) { m.impl("fused_attention", attention_autograd); }

namespace xrt_torch {

void bind_attention_ops(py::module_& module) {
  module.attr("ATTENTION_FLASH") = static_cast<int64_t>(kFlash);
  module.attr("ATTENTION_EFFICIENT") = static_cast<int64_t>(kEfficient);
  module.attr("ATTENTION_CUDNN") = static_cast<int64_t>(kCudnn);
  module.attr("ATTENTION_SDPA") = kSdpa;
  module.def(
      "set_attention_hooks",
      [](py::object choose_fn, py::object forward_other, py::object backward_other) {
        if (hooks == nullptr) hooks = new Hooks();  // lives for the process
        *hooks = {std::move(choose_fn), std::move(forward_other), std::move(backward_other)};
      },
      "The policy layer's choose(record, kernel, mode, query, key, value, attn_mask, "
      "dropout_p, is_causal, scale, needs_grad) -> kernel, and the forward and backward of "
      "the kernels that are not an ATen entry point.");
  module.def("attention_entry", &attention_entry,
             "fused_attention as a C function over its Python slow path (see csrc/).");
  module.def("attention_decided", &attention_decided,
             "Eager fused_attention on what the policy layer just decided (an entry point or "
             "ATTENTION_SDPA): remembered for this policy state, then run.");
  module.def("attention_forward", &entry_forward,
             "(output, lse, seed, offset) from a backend's entry point.");
  module.def("attention_backward", &entry_backward,
             "(dq, dk, dv) from a backend's backward entry point.");
}

}  // namespace xrt_torch
