// Tensors through DLPack (zero copy both ways) and the ops that run on them.
#include <pybind11/stl.h>

#include "bindings.h"
#include "dlpack/dlpack.h"
#include "xpuruntime/errors.h"
#include "xpuruntime/ops.h"

namespace xrt_py {

namespace {
constexpr const char* kCapsuleName = "dltensor";
constexpr const char* kUsedCapsuleName = "used_dltensor";

// Producers' deleters may touch Python objects (numpy's does); run them with the GIL held,
// since the last reference can drop inside a GIL-released op.
void release_with_gil(DLManagedTensor* managed) {
  if (managed->deleter == nullptr) return;
  if (!Py_IsInitialized()) return;  // interpreter gone: leaking beats crashing
  py::gil_scoped_acquire gil;
  managed->deleter(managed);
}

void capsule_destructor(PyObject* capsule) {
  // Still named "dltensor": no consumer took it, so it is ours to free.
  if (PyCapsule_IsValid(capsule, kCapsuleName)) {
    auto* managed = static_cast<DLManagedTensor*>(PyCapsule_GetPointer(capsule, kCapsuleName));
    if (managed->deleter) managed->deleter(managed);
  }
}

xrt::Tensor from_capsule(py::handle capsule) {
  if (!PyCapsule_IsValid(capsule.ptr(), kCapsuleName)) {
    const char* name = PyCapsule_GetName(capsule.ptr());
    PyErr_Clear();
    throw xrt::UnsupportedOperationError(
        std::string("expected an unused DLPack capsule named 'dltensor', got one named '") +
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
  // Legacy (unversioned) capsules: every producer in use still returns them by default.
  py::object capsule = obj.attr("__dlpack__")();
  return from_capsule(capsule);
}

py::tuple dlpack_device(const xrt::Tensor& t) {
  if (t.device.kind == xrt::DeviceKind::CUDA) return py::make_tuple(int(kDLCUDA), t.device.index);
  return py::make_tuple(int(kDLCPU), 0);
}

py::object to_capsule(const xrt::Tensor& t, py::object stream, py::object max_version,
                      py::object dl_device, py::object copy) {
  (void)stream;  // producers on the legacy default stream need no extra ordering
  (void)max_version;  // a legacy capsule is valid for every max_version
  if (!copy.is_none() && copy.cast<bool>()) {
    throw py::buffer_error("xpuruntime Tensor exports without copying only (copy=True asked)");
  }
  if (!dl_device.is_none() && !dlpack_device(t).equal(py::tuple(dl_device))) {
    throw py::buffer_error("xpuruntime Tensor on " + t.device.str() +
                           " cannot be exported to another device without a copy");
  }
  DLManagedTensor* managed = xrt::tensor_to_dlpack(t);
  PyObject* capsule = PyCapsule_New(managed, kCapsuleName, capsule_destructor);
  if (capsule == nullptr) {
    managed->deleter(managed);
    throw py::error_already_set();
  }
  return py::reinterpret_steal<py::object>(capsule);
}

void* as_stream(std::uintptr_t handle) { return reinterpret_cast<void*>(handle); }
}  // namespace

py::tuple decision_tuple(const xrt::Decision& d) {
  return py::make_tuple(d.op, d.kernel, d.library, d.mode, d.reason, d.shape, d.dtype, d.device);
}

xrt::PolicyChoice policy_choice(const std::string& kernel, const std::string& mode,
                                const std::string& strategy) {
  return {kernel, xrt::mode_from_name(mode), xrt::strategy_from_name(strategy)};
}

void bind_tensors(py::module_& m) {
  py::class_<xrt::Tensor>(m, "Tensor", "A contiguous tensor shared through DLPack without copies.")
      .def_property_readonly("shape", [](const xrt::Tensor& t) { return py::tuple(py::cast(t.shape)); })
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
        return "Tensor(shape=" + t.shape_str() + ", dtype=" + xrt::dtype_name(t.dtype) +
               ", device=" + t.device.str() + ")";
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
          return decision_tuple(*decision);
        },
        py::arg("op"), py::arg("shape"), py::arg("dtype"), py::arg("device"), py::arg("kernel"),
        py::arg("mode"), py::arg("strategy"));

  m.def("matmul",
        [](const xrt::Tensor& a, const xrt::Tensor& b, const std::string& kernel,
           const std::string& mode, const std::string& strategy, std::uintptr_t stream) {
          const auto choice = policy_choice(kernel, mode, strategy);
          xrt::OpResult result;
          {
            py::gil_scoped_release release;
            result = xrt::matmul(a, b, choice, as_stream(stream));
          }
          return py::make_tuple(std::move(result.output), decision_tuple(*result.decision),
                                result.detail);
        },
        py::arg("a"), py::arg("b"), py::arg("kernel"), py::arg("mode"), py::arg("strategy"),
        py::arg("stream"));

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
