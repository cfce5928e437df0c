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
// per (policy state, call signature), attention_fast on the calls after it (the checks that
// nothing intercepts the call, whether it needs grad, and one lookup, all here: no Python
// runs between the user's call and the entry point). The dispatcher's kernels, which
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

// --- The eager entry points ---------------------------------------------------------------------

// The eager path's choices: call signature -> what serves it, for the policy state in effect
// (the Python layer's State object: a new policy or scope starts afresh, so that its first
// call decides and records). The request (kernel, mode) is not part of the signature: the
// state and the signature determine it (the policy's entry, the lockfile's answer for the
// signature, a refusal's fallback). Read and written with the GIL held.
struct SignatureHash {
  size_t operator()(const std::vector<int64_t>& key) const {
    size_t h = key.size();
    for (int64_t v : key) {
      h ^= std::hash<int64_t>()(v) + 0x9e3779b97f4a7c15ULL + (h << 6) + (h >> 2);
    }
    return h;
  }
};
std::unordered_map<std::vector<int64_t>, int64_t, SignatureHash>* choices = nullptr;
py::object* choices_state = nullptr;

// PyTorch's own SDPA selection (no policy entry): served by at::scaled_dot_product_attention.
constexpr int64_t kSdpa = -2;

void add_meta(std::vector<int64_t>& key, const Tensor& t) {
  key.push_back(t.dim());
  key.insert(key.end(), t.sizes().begin(), t.sizes().end());
  key.insert(key.end(), t.strides().begin(), t.strides().end());
  key.push_back(static_cast<int64_t>(t.scalar_type()));
  key.push_back(static_cast<int64_t>(t.device().type()));
  key.push_back(t.device().index());
}

// The choices of `state`, emptied when the state in effect changed.
std::unordered_map<std::vector<int64_t>, int64_t, SignatureHash>& choices_of(
    const py::object& state) {
  if (choices == nullptr) {  // live for the process
    choices = new std::unordered_map<std::vector<int64_t>, int64_t, SignatureHash>();
    choices_state = new py::object();
  }
  if (!choices_state->is(state)) {
    choices->clear();
    *choices_state = state;
  }
  return *choices;
}

// What the choice depends on (PyTorch's checks read shapes, strides, dtypes, the device, the
// mask's layout, dropout, causality and the scale); none of it allocates beyond the key.
std::vector<int64_t> signature(const Tensor& q, const Tensor& k, const Tensor& v,
                               const OptTensor& mask, double dropout_p, bool is_causal,
                               std::optional<double> scale, bool needs_grad) {
  std::vector<int64_t> key;
  key.reserve(48);
  for (const Tensor* t : {&q, &k, &v}) add_meta(key, *t);
  if (mask && mask->defined()) add_meta(key, *mask);
  int64_t scale_bits = -1;
  if (scale) std::memcpy(&scale_bits, &*scale, sizeof scale_bits);
  key.insert(key.end(), {dropout_p > 0.0, is_causal, scale.has_value(), scale_bits, needs_grad});
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

// fused_attention's eager fast path, attention_fast(state, query, key, value, attn_mask,
// dropout_p, is_causal, scale, enable_gqa): a call on plain tensors that nothing intercepts,
// whose kind `state` decided before (attention_decided), runs here with no Python in between;
// the rest (None) goes through the policy layer. A CPython vectorcall function rather than a
// pybind11 one: argument conversion is most of what this path costs beyond the kernel's own
// launch, and here it is a few pointer checks.
PyObject* attention_fast(PyObject* /*module*/, PyObject* const* args, Py_ssize_t nargs) {
  HANDLE_TH_ERRORS
  if (nargs != 9) {
    PyErr_SetString(PyExc_TypeError, "attention_fast takes 9 positional arguments");
    return nullptr;
  }
  PyObject* const query = args[1];
  PyObject* const key = args[2];
  PyObject* const value = args[3];
  PyObject* const attn_mask = args[4];
  const bool masked = attn_mask != Py_None;
  if (!THPVariable_CheckExact(query) || !THPVariable_CheckExact(key) ||
      !THPVariable_CheckExact(value) || (masked && !THPVariable_CheckExact(attn_mask)) ||
      intercepted()) {
    Py_RETURN_NONE;
  }
  double dropout_p = 0.0;
  if (!number(args[5], dropout_p)) return nullptr;
  const int is_causal = PyObject_IsTrue(args[6]);
  const int enable_gqa = PyObject_IsTrue(args[8]);
  if (is_causal < 0 || enable_gqa < 0) return nullptr;
  std::optional<double> scale;
  if (args[7] != Py_None) {
    double given = 0.0;
    if (!number(args[7], given)) return nullptr;
    scale = given;
  }
  const Tensor& q = THPVariable_Unpack(query);
  const Tensor& k = THPVariable_Unpack(key);
  const Tensor& v = THPVariable_Unpack(value);
  // Grouped key/value heads: the policy layer repeats them (as SDPA's enable_gqa does).
  if (enable_gqa && (q.dim() < 3 || k.dim() < 3 || k.size(-3) != q.size(-3))) Py_RETURN_NONE;
  const OptTensor mask = masked ? OptTensor(THPVariable_Unpack(attn_mask)) : std::nullopt;
  const bool needs_grad = at::GradMode::is_enabled() &&
                          (q.requires_grad() || k.requires_grad() || v.requires_grad());
  auto& known = choices_of(py::reinterpret_borrow<py::object>(args[0]));
  const auto found =
      known.find(signature(q, k, v, mask, dropout_p, is_causal != 0, scale, needs_grad));
  if (found == known.end()) Py_RETURN_NONE;
  return THPVariable_Wrap(eager_output(found->second, q, k, v, mask, dropout_p, is_causal != 0,
                                       scale, needs_grad));
  END_HANDLE_TH_ERRORS
}

PyMethodDef attention_fast_def = {
    "attention_fast", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(&attention_fast)),
    METH_FASTCALL,
    "Eager fused_attention on plain tensors decided before under this policy state: the "
    "output, else None."};

// The first call of its kind, decided (and recorded) by the policy layer under `state`: what
// serves it (`code`: an entry point, or kSdpa) remembered, then run.
Tensor attention_decided(const py::object& state, const Tensor& q, const Tensor& k,
                         const Tensor& v, const OptTensor& mask, double dropout_p,
                         bool is_causal, std::optional<double> scale, bool needs_grad,
                         int64_t code) {
  choices_of(state)[signature(q, k, v, mask, dropout_p, is_causal, scale, needs_grad)] = code;
  return eager_output(code, q, k, v, mask, dropout_p, is_causal, scale, needs_grad);
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
  module.add_object("attention_fast", py::reinterpret_steal<py::object>(PyCFunction_NewEx(
                                          &attention_fast_def, nullptr, module.attr("__name__").ptr())));
  module.def("attention_decided", &attention_decided,
             "Eager fused_attention on what the policy layer just decided (an entry point or "
             "ATTENTION_SDPA): remembered for this policy state, then run.");
  module.def("attention_forward", &entry_forward,
             "(output, lse, seed, offset) from a backend's entry point.");
  module.def("attention_backward", &entry_backward,
             "(dq, dk, dv) from a backend's backward entry point.");
}

}  // namespace xrt_torch
