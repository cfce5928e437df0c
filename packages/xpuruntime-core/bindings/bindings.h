// Shared declarations of the _core binding units.
#pragma once

#include <pybind11/pybind11.h>

namespace xrt_py {

namespace py = pybind11;

void bind_errors(py::module_& m);
void bind_devices(py::module_& m);
void bind_tensors(py::module_& m);
void bind_runtime(py::module_& m);
void bind_python_kernels(py::module_& m);

}  // namespace xrt_py
