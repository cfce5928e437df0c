// What the native ops share: the core's C kernel table (read once at import), its failures as
// the xpuruntime error classes, and where a kernel launches (PyTorch's current stream).
#pragma once

#include <ATen/ATen.h>
#include <torch/csrc/utils/pybind.h>

#include <cstdint>
#include <stdexcept>
#include <utility>

#include "kernel_table.h"

namespace xrt_torch {

// A failed call of the core: its status picks the xpuruntime error class in Python.
struct CoreError : std::runtime_error {
  int status;
  CoreError(int s, const char* message) : std::runtime_error(message), status(s) {}
};

// The loaded table (a TORCH_CHECK error before xpuruntime.pytorch.ops loaded it).
const xrt_kernel_table& kernels();
// Throws CoreError for a status other than XRT_OK.
void check(int status);
// The table's code for `type`, or -1 for a dtype the core's kernels do not take.
int32_t dtype_code(at::ScalarType type);
// (device index or -1, PyTorch's current stream there): the core launches on that stream, so
// streams, events and CUDA graph capture see its kernels like PyTorch's own.
std::pair<int32_t, void*> launch_site(const at::Tensor& x);

// load_kernel_table and the translation of CoreError into xpuruntime's error classes.
void bind_core_table(pybind11::module_& module);

}  // namespace xrt_torch
