// Tensors through DLPack (zero copy both ways) and the ops that run on them.
#include <pybind11/stl.h>

#include <optional>

#include "bindings.h"
#include "dlpack/dlpack.h"
#include "xpuruntime/errors.h"
#include "xpuruntime/ops.h"

namespace xrt_py {

namespace {
constexpr const char* kCapsuleName = "dltensor";
constexpr const char* kUsedCapsuleName = "used_dltensor";
constexpr const char* kVersionedName = "dltensor_versioned";
constexpr const char* kUsedVersionedName = "used_dltensor_versioned";

// Producers' deleters may touch Python objects (numpy's does); run them with the GIL held,
// since the last reference can drop inside a GIL-released op.
void release_with_gil(DLManagedTensor* managed) {
  if (managed->deleter == nullptr) return;
  if (!Py_IsInitialized()) return;  // interpreter gone: leaking beats crashing
  py::gil_scoped_acquire gil;
  managed->deleter(managed);
}

void release_versioned_with_gil(DLManagedTensorVersioned* managed) {
  if (managed->deleter == nullptr) return;
  if (!Py_IsInitialized()) return;
  py::gil_scoped_acquire gil;
  managed->deleter(managed);
}

void versioned_capsule_destructor(PyObject* capsule) {
  if (PyCapsule_IsValid(capsule, kVersionedName)) {
    auto* managed =
        static_cast<DLManagedTensorVersioned*>(PyCapsule_GetPointer(capsule, kVersionedName));
    if (managed->deleter) managed->deleter(managed);
  }
}

void capsule_destructor(PyObject* capsule) {
  // Still named "dltensor": no consumer took it, so it is ours to free.
  if (PyCapsule_IsValid(capsule, kCapsuleName)) {
    auto* managed = static_cast<DLManagedTensor*>(PyCapsule_GetPointer(capsule, kCapsuleName));
    if (managed->deleter) managed->deleter(managed);
  }
}

xrt::Tensor from_capsule(py::handle capsule) {
  if (PyCapsule_IsValid(capsule.ptr(), kVersionedName)) {
    auto* managed = static_cast<DLManagedTensorVersioned*>(
        PyCapsule_GetPointer(capsule.ptr(), kVersionedName));
    PyCapsule_SetName(capsule.ptr(), kUsedVersionedName);
    return xrt::tensor_from_dlpack(managed, release_versioned_with_gil);
  }
  if (!PyCapsule_IsValid(capsule.ptr(), kCapsuleName)) {
    const char* name = PyCapsule_GetName(capsule.ptr());
    PyErr_Clear();
    throw xrt::UnsupportedOperationError(
        std::string("expected an unused DLPack capsule named 'dltensor' or "
                    "'dltensor_versioned', got one named '") +
        (name ? name : "") + "' (a capsule can be consumed only once)");
  }
  auto* managed = static_cast<DLManagedTensor*>(PyCapsule_GetPointer(capsule.ptr(), kCapsuleName));
  PyCapsule_SetName(capsule.ptr(), kUsedCapsuleName);
  return xrt::tensor_from_dlpack(managed, release_with_gil);
}

xrt::Tensor from_dlpack(py::object obj) {
  if (py::isinstance<xrt::Tensor>(obj)) return obj.cast<xrt::Tensor>();
  if (PyCapsule_CheckExact(obj.ptr())) return from_capsule(obj);
  if (!py::hasattr(obj, "__dlpack__")) {
    throw xrt::UnsupportedOperationError(
        "from_dlpack needs an object with __dlpack__ (numpy array, torch/cupy tensor, "
        "xpuruntime Tensor) or a DLPack capsule, got " +
        py::str(py::type::of(obj).attr("__qualname__")).cast<std::string>());
  }
  // Ask for a versioned capsule (DLPack 1.x: read-only arrays such as numpy views of
  // broadcasts can be exported); producers that predate max_version get the legacy call.
  py::object method = obj.attr("__dlpack__");
  py::object capsule;
  try {
    capsule = method(py::arg("max_version") = py::make_tuple(1, 1));
  } catch (py::error_already_set& e) {
    if (!e.matches(PyExc_TypeError)) throw;
    capsule = method();
  }
  return from_capsule(capsule);
}

py::tuple dlpack_device(const xrt::Tensor& t) {
  if (t.device.kind == xrt::DeviceKind::CUDA) return py::make_tuple(int(kDLCUDA), t.device.index);
  return py::make_tuple(int(kDLCPU), 0);
}

py::object to_capsule(const xrt::Tensor& t, py::object stream, py::object max_version,
                      py::object dl_device, py::object copy) {
  (void)stream;  // producers on the legacy default stream need no extra ordering
  if (!copy.is_none() && copy.cast<bool>()) {
    throw py::buffer_error("xpuruntime Tensor exports without copying only (copy=True asked)");
  }
  if (!dl_device.is_none() && !dlpack_device(t).equal(py::tuple(dl_device))) {
    throw py::buffer_error("xpuruntime Tensor on " + t.device.str() +
                           " cannot be exported to another device without a copy");
  }
  // A consumer that reads DLPack 1.x gets a versioned tensor (writable unless imported
  // read-only, which numpy honours); older consumers the legacy one.
  if (!max_version.is_none() && py::tuple(max_version)[0].cast<int>() >= 1) {
    DLManagedTensorVersioned* versioned = xrt::tensor_to_dlpack_versioned(t);
    PyObject* capsule = PyCapsule_New(versioned, kVersionedName, versioned_capsule_destructor);
    if (capsule == nullptr) {
      versioned->deleter(versioned);
      throw py::error_already_set();
    }
    return py::reinterpret_steal<py::object>(capsule);
  }
  DLManagedTensor* managed = xrt::tensor_to_dlpack(t);
  PyObject* capsule = PyCapsule_New(managed, kCapsuleName, capsule_destructor);
  if (capsule == nullptr) {
    managed->deleter(managed);
    throw py::error_already_set();
  }
  return py::reinterpret_steal<py::object>(capsule);
}

// (op, kernel, library, mode, reason, shape, dtype, device): the field order of the Python
// Decision dataclass, so building one costs a positional call.
py::tuple decision_tuple(const xrt::Decision& d) {
  return py::make_tuple(d.op, d.kernel, d.library, d.mode, d.reason, d.shape, d.dtype, d.device);
}

xrt::PolicyChoice policy_choice(const std::string& kernel, const std::string& mode,
                                const std::string& strategy) {
  return {kernel, xrt::mode_from_name(mode), xrt::strategy_from_name(strategy)};
}

// An op's tensor argument: an xpuruntime Tensor, a DLPack capsule, or a DLPack producer.
xrt::Tensor tensor_arg(py::handle obj) {
  if (py::isinstance<xrt::Tensor>(obj)) return obj.cast<xrt::Tensor>();
  return from_dlpack(py::reinterpret_borrow<py::object>(obj));
}

// An op's result: the Tensor, or a DLPack capsule of it (what torch/cupy wrap without a
// Python-level __dlpack__ call).
py::object tensor_result(xrt::Tensor t, bool as_capsule) {
  if (as_capsule) return to_capsule(t, py::none(), py::none(), py::none(), py::none());
  return py::cast(std::move(t));
}

py::object optional_result(std::vector<xrt::Tensor>& extra, bool as_capsule) {
  if (extra.empty()) return py::none();
  return tensor_result(std::move(extra[0]), as_capsule);
}

void* as_stream(std::uintptr_t handle) { return reinterpret_cast<void*>(handle); }
}  // namespace

void bind_tensors(py::module_& m) {
  py::class_<xrt::Tensor>(m, "Tensor", "A tensor view shared through DLPack without copies.")
      .def_property_readonly("shape", [](const xrt::Tensor& t) { return py::tuple(py::cast(t.shape)); })
      .def_property_readonly("strides", [](const xrt::Tensor& t) {
        return py::tuple(py::cast(t.strides.empty() ? xrt::Tensor::contiguous_strides(t.shape)
                                                    : t.strides));
      })
      .def_property_readonly("is_contiguous", &xrt::Tensor::is_contiguous)
      .def_property_readonly("dtype", [](const xrt::Tensor& t) { return xrt::dtype_name(t.dtype); })
      .def_property_readonly("device", [](const xrt::Tensor& t) { return t.device.str(); })
      .def_property_readonly("data_ptr", [](const xrt::Tensor& t) {
        return reinterpret_cast<std::uintptr_t>(t.data);
      })
      .def_property_readonly("nbytes", &xrt::Tensor::nbytes)
      .def_property_readonly("numel", &xrt::Tensor::numel)
      .def_property_readonly("is_pinned", [](const xrt::Tensor& t) { return t.pinned; })
      .def("__dlpack__", &to_capsule, py::kw_only(), py::arg("stream") = py::none(),
           py::arg("max_version") = py::none(), py::arg("dl_device") = py::none(),
           py::arg("copy") = py::none())
      .def("__dlpack_device__", &dlpack_device)
      .def("__repr__", [](const xrt::Tensor& t) {
        return "Tensor(shape=" + t.shape_str() +
               (t.is_contiguous() ? std::string() : ", strides=" + t.strides_str()) +
               ", dtype=" + xrt::dtype_name(t.dtype) + ", device=" + t.device.str() + ")";
      });

  m.def("from_dlpack", &from_dlpack, py::arg("obj"),
        "Zero-copy view of a DLPack producer (numpy, torch, cupy) or capsule.");
  m.def("empty",
        [](const std::vector<std::int64_t>& shape, const std::string& dtype,
           const std::string& device, std::uintptr_t stream) {
          return xrt::Tensor::empty(shape, xrt::dtype_from_name(dtype), xrt::parse_device(device),
                                    as_stream(stream));
        },
        py::arg("shape"), py::arg("dtype") = "float32", py::arg("device") = "cpu",
        py::arg("stream") = 0);

  m.def("resolve",
        [](const std::string& op, const std::vector<std::int64_t>& shape, const std::string& dtype,
           const std::string& device, const std::string& kernel, const std::string& mode,
           const std::string& strategy) {
          const xrt::OpQuery query{op, shape, xrt::dtype_from_name(dtype), xrt::parse_device(device)};
          const auto choice = policy_choice(kernel, mode, strategy);
          std::shared_ptr<const xrt::Decision> decision;
          {
            py::gil_scoped_release release;  // BestPerformance may time kernels
            decision = xrt::Dispatcher::instance().resolve(query, choice.kernel, choice.mode,
                                                           choice.strategy);
          }
          // The Decision fields, then status and layout.
          return py::make_tuple(decision_tuple(*decision),
                                xrt::status_name(decision->status()), decision->layout);
        },
        py::arg("op"), py::arg("shape"), py::arg("dtype"), py::arg("device"), py::arg("kernel"),
        py::arg("mode"), py::arg("strategy"));

  py::class_<xrt::PolicyChoice>(m, "PolicyChoice",
                                "A kernel policy's choice for one op, parsed once.")
      .def(py::init([](const std::string& kernel, const std::string& mode,
                       const std::string& strategy, bool allow_tf32) {
             xrt::PolicyChoice c = policy_choice(kernel, mode, strategy);
             c.allow_tf32 = allow_tf32;
             return c;
           }),
           py::arg("kernel"), py::arg("mode"), py::arg("strategy"), py::arg("allow_tf32") = false)
      .def_readonly("kernel", &xrt::PolicyChoice::kernel)
      .def_property_readonly("mode", [](const xrt::PolicyChoice& c) { return xrt::mode_name(c.mode); })
      .def_property_readonly("strategy",
                             [](const xrt::PolicyChoice& c) { return xrt::strategy_name(c.strategy); })
      .def_readonly("allow_tf32", &xrt::PolicyChoice::allow_tf32);

  // The ops take their tensors as objects (Tensor, capsule or DLPack producer) and a
  // PolicyChoice, and record their decision natively (last_decision): no strings are parsed
  // and no Python objects beyond the result are built per call.
  m.def("matmul",
        [](py::handle a, py::handle b, const xrt::PolicyChoice& choice, std::uintptr_t stream,
           bool as_capsule) {
          const xrt::Tensor ta = tensor_arg(a), tb = tensor_arg(b);
          xrt::OpResult result;
          {
            py::gil_scoped_release release;
            result = xrt::matmul(ta, tb, choice, as_stream(stream));
          }
          return tensor_result(std::move(result.output), as_capsule);
        },
        py::arg("a"), py::arg("b"), py::arg("choice"), py::arg("stream") = 0,
        py::arg("as_capsule") = false);

  m.def("linear",
        [](py::handle x, py::handle w, py::handle bias, const std::string& activation,
           bool save_preactivation, const xrt::PolicyChoice& choice, std::uintptr_t stream,
           bool as_capsule) -> py::object {
          const xrt::Tensor tx = tensor_arg(x), tw = tensor_arg(w);
          std::optional<xrt::Tensor> tb;
          if (!bias.is_none()) tb = tensor_arg(bias);
          const xrt::Activation act = xrt::activation_from_name(activation);
          xrt::OpResult result;
          {
            py::gil_scoped_release release;
            result = xrt::linear(tx, tw, tb ? &*tb : nullptr, act, save_preactivation, choice,
                                 as_stream(stream));
          }
          py::object out = tensor_result(std::move(result.output), as_capsule);
          if (!save_preactivation) return out;
          return py::make_tuple(out, optional_result(result.extra, as_capsule));
        },
        py::arg("x"), py::arg("w"), py::arg("bias"), py::arg("activation"),
        py::arg("save_preactivation"), py::arg("choice"), py::arg("stream") = 0,
        py::arg("as_capsule") = false);

  m.def("linear_weight_grad",
        [](py::handle dz, py::handle x, bool bias_grad, const xrt::PolicyChoice& choice,
           std::uintptr_t stream, bool as_capsule) {
          const xrt::Tensor tdz = tensor_arg(dz), tx = tensor_arg(x);
          xrt::OpResult result;
          {
            py::gil_scoped_release release;
            result = xrt::linear_weight_grad(tdz, tx, bias_grad, choice, as_stream(stream));
          }
          return py::make_tuple(tensor_result(std::move(result.output), as_capsule),
                                optional_result(result.extra, as_capsule));
        },
        py::arg("dz"), py::arg("x"), py::arg("bias_grad"), py::arg("choice"),
        py::arg("stream") = 0, py::arg("as_capsule") = false);

  m.def("linear_gelu_grad",
        [](py::handle g, py::handle w, py::handle pre, bool bias_grad,
           const xrt::PolicyChoice& choice, std::uintptr_t stream, bool as_capsule) {
          const xrt::Tensor tg = tensor_arg(g), tw = tensor_arg(w), tp = tensor_arg(pre);
          xrt::OpResult result;
          {
            py::gil_scoped_release release;
            result = xrt::linear_gelu_grad(tg, tw, tp, bias_grad, choice, as_stream(stream));
          }
          return py::make_tuple(tensor_result(std::move(result.output), as_capsule),
                                optional_result(result.extra, as_capsule));
        },
        py::arg("g"), py::arg("w"), py::arg("preactivation"), py::arg("bias_grad"),
        py::arg("choice"), py::arg("stream") = 0, py::arg("as_capsule") = false);

  m.def("activation_grad",
        [](py::handle dy, py::handle saved, const std::string& activation, std::uintptr_t stream,
           bool as_capsule) {
          const xrt::Tensor tdy = tensor_arg(dy), ts = tensor_arg(saved);
          const xrt::Activation act = xrt::activation_from_name(activation);
          xrt::Tensor out;
          {
            py::gil_scoped_release release;
            out = xrt::activation_grad(tdy, ts, act, as_stream(stream));
          }
          return tensor_result(std::move(out), as_capsule);
        },
        py::arg("dy"), py::arg("saved"), py::arg("activation"), py::arg("stream") = 0,
        py::arg("as_capsule") = false);

  m.def("layernorm",
        [](const xrt::Tensor& x, const xrt::Tensor& weight, const xrt::Tensor& bias, double eps,
           const std::string& kernel, const std::string& mode, const std::string& strategy,
           std::uintptr_t stream) {
          const auto choice = policy_choice(kernel, mode, strategy);
          xrt::OpResult result;
          {
            py::gil_scoped_release release;
            result = xrt::layernorm(x, weight, bias, eps, choice, as_stream(stream));
          }
          return py::make_tuple(std::move(result.output), decision_tuple(*result.decision),
                                result.detail);
        },
        py::arg("x"), py::arg("weight"), py::arg("bias"), py::arg("eps"), py::arg("kernel"),
        py::arg("mode"), py::arg("strategy"), py::arg("stream"));
}

}  // namespace xrt_py
