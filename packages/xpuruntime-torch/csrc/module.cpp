// xpuruntime.pytorch.ops._C: xpuruntime's PyTorch ops in C++ with PyTorch's dispatcher. The
// ops register themselves (TORCH_LIBRARY in norm_ops.cpp, linear_ops.cpp and
// attention_ops.cpp); this module adds what Python calls: the kernel table's loader and the
// eager entry points.
#include <torch/csrc/utils/pybind.h>
#include <torch/version.h>

#include "core_table.h"

namespace xrt_torch {
void bind_norm_ops(pybind11::module_& module);
void bind_linear_ops(pybind11::module_& module);
void bind_attention_ops(pybind11::module_& module);
}  // namespace xrt_torch

PYBIND11_MODULE(_C, module) {
  module.doc() = "xpuruntime's PyTorch ops in C++ (see csrc/)";
  module.attr("TORCH_VERSION") = TORCH_VERSION;
  xrt_torch::bind_core_table(module);
  xrt_torch::bind_norm_ops(module);
  xrt_torch::bind_linear_ops(module);
  xrt_torch::bind_attention_ops(module);
}
