// xpuruntime.runtime._core: the pybind11 module over the native core (native/).
#include <pybind11/stl.h>

#include "bindings.h"
#include "xpuruntime/device.h"
#include "xpuruntime/engine_registry.h"
#include "xpuruntime/errors.h"
#include "xpuruntime/fingerprint.h"

#if XPURUNTIME_WITH_CUDA
#include "cuda/blas_loader.h"
#endif

namespace xrt_py {

namespace {
// Python exception classes of xpuruntime.runtime.errors, kept alive for the process.
struct ErrorClasses {
  py::handle base, cuda, oom, unsupported, invalid;
};
ErrorClasses& error_classes() {
  static ErrorClasses classes;
  return classes;
}
}  // namespace

void bind_errors(py::module_& m) {
  py::module_ errors = py::module_::import("xpuruntime.runtime.errors");
  ErrorClasses& c = error_classes();
  c.base = py::object(errors.attr("XpuRuntimeError")).release();
  c.cuda = py::object(errors.attr("CudaError")).release();
  c.oom = py::object(errors.attr("OutOfMemoryError")).release();
  c.unsupported = py::object(errors.attr("UnsupportedOperationError")).release();
  c.invalid = py::object(errors.attr("InvalidArgumentError")).release();
  py::register_exception_translator([](std::exception_ptr p) {
    const ErrorClasses& c = error_classes();
    try {
      if (p) std::rethrow_exception(p);
    } catch (const xrt::OutOfMemoryError& e) {
      py::object exc = py::reinterpret_borrow<py::object>(c.oom)(e.what());
      exc.attr("requested_bytes") = e.requested_bytes;
      exc.attr("free_bytes") = e.free_bytes;
      PyErr_SetObject(c.oom.ptr(), exc.ptr());
    } catch (const xrt::CudaError& e) {
      PyErr_SetString(c.cuda.ptr(), e.what());
    } catch (const xrt::UnsupportedOperationError& e) {
      PyErr_SetString(c.unsupported.ptr(), e.what());
    } catch (const xrt::InvalidArgumentError& e) {
      PyErr_SetString(c.invalid.ptr(), e.what());
    } catch (const xrt::Error& e) {
      PyErr_SetString(c.base.ptr(), e.what());
    }
  });
  (void)m;
}

void bind_devices(py::module_& m) {
  py::class_<xrt::DeviceInfo>(m, "DeviceInfo")
      .def_readonly("id", &xrt::DeviceInfo::id)
      .def_readonly("name", &xrt::DeviceInfo::name)
      .def_property_readonly("kind",
                             [](const xrt::DeviceInfo& d) {
                               return d.kind == xrt::DeviceKind::CUDA ? "cuda" : "cpu";
                             })
      .def_readonly("total_memory", &xrt::DeviceInfo::total_memory)
      .def_readonly("free_memory", &xrt::DeviceInfo::free_memory)
      .def_readonly("cc_major", &xrt::DeviceInfo::cc_major)
      .def_readonly("cc_minor", &xrt::DeviceInfo::cc_minor)
      .def_readonly("sm_count", &xrt::DeviceInfo::sm_count)
      .def_readonly("supports_fp16", &xrt::DeviceInfo::supports_fp16)
      .def_readonly("supports_bf16", &xrt::DeviceInfo::supports_bf16)
      .def_readonly("supports_int8", &xrt::DeviceInfo::supports_int8);

  auto dm = [] () -> xrt::DeviceManager& { return xrt::DeviceManager::instance(); };
  m.def("cuda_device_count", [dm] { return dm().cuda_device_count(); });
  m.def("cuda_unavailable_reason", [dm] { return dm().cuda_unavailable_reason(); });
  m.def("cuda_device", [dm](int i) { return dm().cuda_device(i); }, py::arg("index"));
  m.def("cpu_device", [dm] { return dm().cpu_device(); });
  m.def("all_devices", [dm] { return dm().all_devices(); });
  m.def("current_device", [dm] { return dm().current_device(); });
  m.def("set_current_device", [dm](int i) { dm().set_current_device(i); }, py::arg("index"));
  m.def("synchronize", [dm](int i) { dm().synchronize(i); }, py::arg("index") = -1,
        py::call_guard<py::gil_scoped_release>());

  m.def("native_environment", [] {
    const xrt::NativeEnvironment env = xrt::native_environment();
    py::list gpus;
    for (const auto& g : env.gpus) {
      py::dict d;
      d["name"] = g.name;
      d["compute_capability"] = std::to_string(g.cc_major) + "." + std::to_string(g.cc_minor);
      d["sm_count"] = g.sm_count;
      d["total_memory"] = g.total_memory;
      gpus.append(d);
    }
    py::dict out;
    out["cuda_built"] = env.cuda_built;
    out["cuda_runtime_version"] = env.cuda_runtime_version;
    out["cuda_driver_version"] = env.cuda_driver_version;
    out["gpus"] = gpus;
    out["cublas_version"] = env.cublas_version;
    out["cublaslt_version"] = env.cublaslt_version;
    out["cudnn_version"] = env.cudnn_version;
    out["cublas_path"] = env.cublas_path;
    out["cublaslt_path"] = env.cublaslt_path;
    out["compiler"] = env.compiler;
    out["cuda_architectures"] = env.cuda_architectures;
    return out;
  });

  m.def("set_library_dirs",
        [](const std::vector<std::string>& dirs) {
#if XPURUNTIME_WITH_CUDA
          xrt::BlasLibraries::set_search_dirs(dirs);
#else
          (void)dirs;
#endif
        },
        py::arg("dirs"), "Directories searched for cuBLAS/cuBLASLt before the loader's default.");

  auto& engines = xrt::EngineRegistry::instance();
  auto entry_dict = [](const xrt::EngineEntry& e) {
    py::dict d;
    d["name"] = e.name;
    d["capabilities"] = e.capabilities;
    return d;
  };
  m.def("engine_register", [&engines](const std::string& name, const xrt::Capabilities& caps) {
    engines.add(name, caps);
  });
  m.def("engine_unregister", [&engines](const std::string& name) { return engines.remove(name); });
  m.def("engine_get", [&engines, entry_dict](const std::string& name) {
    return entry_dict(engines.get(name));
  });
  m.def("engine_list", [&engines, entry_dict] {
    py::list out;
    for (const auto& e : engines.list()) out.append(entry_dict(e));
    return out;
  });
  m.def("engine_find",
        [&engines](const xrt::Capabilities& required) { return engines.find(required); });
}

}  // namespace xrt_py

PYBIND11_MODULE(_core, m) {
  m.doc() = "xpuruntime native core (devices, memory, streams, dispatcher, profiler, DLPack)";
  // Bump on any incompatible change of this module's API; consumers check it via
  // xpuruntime.runtime.abi.require_abi.
  m.attr("ABI_VERSION") = 1;
  m.attr("CUDA_BUILT") = static_cast<bool>(XPURUNTIME_WITH_CUDA);
  xrt_py::bind_errors(m);
  xrt_py::bind_devices(m);
  xrt_py::bind_tensors(m);
  xrt_py::bind_runtime(m);
  xrt_py::bind_python_kernels(m);
  xrt_py::bind_norms(m);
  xrt_py::bind_kernel_table(m);
}
