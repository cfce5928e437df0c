// Shared declarations of the _core binding units.
#pragma once

#include <pybind11/pybind11.h>

#include <string>

#include "xpuruntime/ops.h"

namespace xrt_py {

namespace py = pybind11;

void bind_errors(py::module_& m);
void bind_devices(py::module_& m);
void bind_tensors(py::module_& m);
void bind_runtime(py::module_& m);
void bind_python_kernels(py::module_& m);
void bind_norms(py::module_& m);
void bind_kernel_table(py::module_& m);

// (op, kernel, library, mode, reason, shape, dtype, device): the field order of the Python
// Decision dataclass, so building one costs a positional call.
py::tuple decision_tuple(const xrt::Decision& d);
xrt::PolicyChoice policy_choice(const std::string& kernel, const std::string& mode,
                                const std::string& strategy);

}  // namespace xrt_py
