// The core's C kernel table as the native ops see it (core_table.h).
#include "core_table.h"

#include <c10/core/impl/VirtualGuardImpl.h>

#include <string>

namespace xrt_torch {

namespace py = pybind11;

namespace {
const xrt_kernel_table* table = nullptr;
}  // namespace

const xrt_kernel_table& kernels() {
  TORCH_CHECK(table != nullptr,
              "xpuruntime's native ops have no kernel table: import xpuruntime.pytorch.ops "
              "first (it loads the core's table)");
  return *table;
}

void check(int status) {
  if (status != XRT_OK) throw CoreError(status, table->last_error());
}

int32_t dtype_code(at::ScalarType type) {
  const xrt_kernel_table& t = kernels();
  switch (type) {
    case at::kFloat: return t.dtype_f32;
    case at::kDouble: return t.dtype_f64;
    case at::kHalf: return t.dtype_f16;
    case at::kBFloat16: return t.dtype_bf16;
    default: return -1;
  }
}

std::pair<int32_t, void*> launch_site(const at::Tensor& x) {
  if (!x.is_cuda()) return {-1, nullptr};
  c10::impl::VirtualGuardImpl guard(c10::DeviceType::CUDA);
  return {x.get_device(), guard.getStream(x.device()).native_handle()};
}

void bind_core_table(py::module_& module) {
  module.attr("KERNEL_TABLE_VERSION") = XRT_KERNEL_TABLE_VERSION;
  module.def(
      "load_kernel_table",
      [](py::capsule capsule) {
        auto* t = static_cast<const xrt_kernel_table*>(capsule.get_pointer());
        // linear_args_size: the core reads the fields appended to xrt_linear_args (the
        // caller's result storage, which this extension always gives).
        if (t->version != XRT_KERNEL_TABLE_VERSION || t->size < sizeof(xrt_kernel_table) ||
            t->linear_args_size < sizeof(xrt_linear_args)) {
          throw py::import_error(
              "xpuruntime-core's kernel table is version " + std::to_string(t->version) +
              " (" + std::to_string(t->size) + " bytes) but xpuruntime-torch's native ops need "
              "version " + std::to_string(XRT_KERNEL_TABLE_VERSION) + " of at least " +
              std::to_string(sizeof(xrt_kernel_table)) +
              " bytes: install matching xpuruntime-core and xpuruntime-torch releases");
        }
        table = t;
        // The capsule is static in the core's module, which stays imported.
      },
      "Read the core's C kernel table (xpuruntime.runtime._core.KERNEL_TABLE) once.");
  py::register_exception_translator([](std::exception_ptr p) {
    try {
      if (p) std::rethrow_exception(p);
    } catch (const CoreError& e) {
      py::module_ errors = py::module_::import("xpuruntime.runtime.errors");
      const char* name = e.status == XRT_INVALID_ARGUMENT  ? "InvalidArgumentError"
                         : e.status == XRT_UNSUPPORTED     ? "UnsupportedOperationError"
                         : e.status == XRT_OUT_OF_MEMORY   ? "OutOfMemoryError"
                         : e.status == XRT_CUDA_ERROR      ? "CudaError"
                                                           : "XpuRuntimeError";
      PyErr_SetString(errors.attr(name).ptr(), e.what());
    }
  });
}

}  // namespace xrt_torch
