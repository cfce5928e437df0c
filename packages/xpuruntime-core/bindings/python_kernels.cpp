// Kernels written in Python (Triton) registered in the native kernel registry, so the
// Dispatcher resolves, caches and logs them exactly like the C++ kernels.
#include <pybind11/stl.h>

#include <memory>

#include "bindings.h"
#include "xpuruntime/errors.h"
#include "xpuruntime/kernel_registry.h"

namespace xrt_py {

namespace {
// A Python callable owned by the process-wide registry. The Dispatcher calls it with the GIL
// released, so every call and the final release take the GIL; a registry destroyed after the
// interpreter (static destruction at exit) leaks it instead of touching a dead interpreter.
using Callable = std::shared_ptr<py::object>;

Callable keep(py::object fn) {
  return Callable(new py::object(std::move(fn)), [](py::object* p) {
    if (!Py_IsInitialized()) return;
    py::gil_scoped_acquire gil;
    delete p;
  });
}

// Python exceptions become native errors carrying the message (the GIL-held Python error
// object must not travel through the Dispatcher's GIL-free code).
[[noreturn]] void rethrow(const char* what_failed, const std::string& kernel,
                          py::error_already_set& error) {
  const std::string message = std::string(what_failed) + " of kernel '" + kernel + "': " +
                              error.what();
  if (error.matches(PyExc_MemoryError)) throw xrt::Error(message);
  py::module_ errors = py::module_::import("xpuruntime.runtime.errors");
  if (error.matches(errors.attr("UnsupportedOperationError"))) {
    throw xrt::UnsupportedOperationError(message);
  }
  if (error.matches(errors.attr("InvalidArgumentError"))) throw xrt::InvalidArgumentError(message);
  throw xrt::Error(message);
}

void register_python_kernel(const std::string& op, const std::string& name,
                            const std::string& library, py::object unsupported_reason,
                            py::object run, py::object measure) {
  if (op.empty() || name.empty()) {
    throw xrt::InvalidArgumentError("register_python_kernel needs an op and a kernel name");
  }
  for (const auto& [label, fn] : {std::pair{"unsupported_reason", &unsupported_reason},
                                  std::pair{"run", &run}}) {
    if (!PyCallable_Check(fn->ptr())) {
      throw xrt::InvalidArgumentError(std::string("register_python_kernel: ") + label +
                                      " must be callable");
    }
  }
  xrt::KernelDef def;
  def.op = op;
  def.name = name;
  def.library = library;
  def.unsupported_reason = [fn = keep(unsupported_reason), name](const xrt::OpQuery& q) {
    py::gil_scoped_acquire gil;
    try {
      return (*fn)(q.op, q.shape, xrt::dtype_name(q.dtype), q.device.str()).cast<std::string>();
    } catch (py::error_already_set& error) {
      rethrow("support check", name, error);
    }
  };
  // run(inputs, scalars, output, stream) -> detail; the output is allocated by the op and
  // shared with Python (DLPack), so the kernel writes into it.
  def.run = [fn = keep(run), name](const xrt::KernelCall& call) {
    py::gil_scoped_acquire gil;
    try {
      py::list inputs;
      for (const xrt::Tensor* t : call.inputs) inputs.append(py::cast(*t));
      py::object output = call.output ? py::cast(*call.output) : py::none();
      return (*fn)(inputs, call.scalars, output, reinterpret_cast<std::uintptr_t>(call.stream))
          .cast<std::string>();
    } catch (py::error_already_set& error) {
      rethrow("run", name, error);
    }
  };
  if (!measure.is_none()) {
    def.measure = [fn = keep(measure), name](const xrt::OpQuery& q) {
      py::gil_scoped_acquire gil;
      try {
        return (*fn)(q.op, q.shape, xrt::dtype_name(q.dtype), q.device.str()).cast<double>();
      } catch (py::error_already_set& error) {
        rethrow("measure", name, error);
      }
    };
  }
  xrt::KernelRegistry::instance().add(std::move(def));
}
}  // namespace

void bind_python_kernels(py::module_& m) {
  m.def("register_python_kernel", &register_python_kernel, py::arg("op"), py::arg("name"),
        py::arg("library"), py::arg("unsupported_reason"), py::arg("run"),
        py::arg("measure") = py::none(),
        "Register a kernel implemented in Python. unsupported_reason(op, shape, dtype, device) "
        "returns '' when it can run the query, else why not; run(inputs, scalars, output, "
        "stream) runs it and returns a detail for the decision log; measure(op, shape, dtype, "
        "device) returns median milliseconds (optional, for BestPerformance).");
  // Runs a registered kernel directly on xpuruntime Tensors (what a native op does after the
  // Dispatcher resolved it); returns the kernel's detail.
  m.def("run_kernel",
        [](const std::string& op, const std::string& kernel, const std::vector<xrt::Tensor>& inputs,
           const std::vector<double>& scalars, xrt::Tensor output, std::uintptr_t stream) {
          const xrt::KernelDef& def = xrt::KernelRegistry::instance().find(op, kernel);
          xrt::KernelCall call;
          for (const auto& t : inputs) call.inputs.push_back(&t);
          call.scalars = scalars;
          call.output = &output;
          call.stream = reinterpret_cast<void*>(stream);
          py::gil_scoped_release release;  // native kernels run without it; Python ones retake it
          return def.run(call);
        },
        py::arg("op"), py::arg("kernel"), py::arg("inputs"), py::arg("scalars"), py::arg("output"),
        py::arg("stream") = 0);
}

}  // namespace xrt_py
