// LayerNorm/RMSNorm: the dispatched ops (tensors in; results and the decision out) and the raw
// launch entry points for callers that resolved the kernel once and own the memory (the
// PyTorch custom ops: no DLPack exchange, no dispatcher lookup, no string work per call).
#include <pybind11/stl.h>

#include <optional>

#include "bindings.h"
#include "xpuruntime/errors.h"
#include "xpuruntime/norms.h"

namespace xrt_py {

namespace {
xrt::NormKind kind_from(const std::string& name) {
  if (name == "layernorm") return xrt::NormKind::LayerNorm;
  if (name == "rmsnorm") return xrt::NormKind::RMSNorm;
  throw xrt::InvalidArgumentError("unknown norm '" + name + "'; valid: layernorm, rmsnorm");
}

const xrt::Tensor* ptr(const std::optional<xrt::Tensor>& t) { return t ? &*t : nullptr; }

py::object or_none(xrt::Tensor&& t) {
  if (t.shape.empty()) return py::none();  // not produced (default-constructed)
  return py::cast(std::move(t));
}

void* as_pointer(std::uintptr_t address) { return reinterpret_cast<void*>(address); }

// The raw entry points take dtype as its enum value and the device as a CUDA index or -1 for
// the CPU; both are checked (cheap), the pointers are trusted.
xrt::DType dtype_from_code(int code) {
  if (code != static_cast<int>(xrt::DType::F32) && code != static_cast<int>(xrt::DType::F64) &&
      code != static_cast<int>(xrt::DType::F16) && code != static_cast<int>(xrt::DType::BF16)) {
    throw xrt::InvalidArgumentError("norm kernels take float32, float64, float16 or bfloat16 "
                                    "(dtype code " + std::to_string(code) + " given)");
  }
  return static_cast<xrt::DType>(code);
}

xrt::DeviceRef device_from_index(int index) {
  if (index < 0) return {xrt::DeviceKind::CPU, 0};
  return {xrt::DeviceKind::CUDA, index};
}
}  // namespace

void bind_norms(py::module_& m) {
  py::dict codes;
  for (xrt::DType d : {xrt::DType::F32, xrt::DType::F64, xrt::DType::F16, xrt::DType::BF16}) {
    codes[py::str(xrt::dtype_name(d))] = static_cast<int>(d);
  }
  m.attr("NORM_DTYPE_CODES") = codes;

  m.def("norm_forward",
        [](const std::string& norm, const xrt::Tensor& x, const std::optional<xrt::Tensor>& residual,
           const std::optional<xrt::Tensor>& weight, const std::optional<xrt::Tensor>& bias,
           double eps, bool keep_stats, const std::string& kernel, const std::string& mode,
           const std::string& strategy, std::uintptr_t stream) {
          const auto choice = policy_choice(kernel, mode, strategy);
          xrt::NormForwardResult r;
          {
            py::gil_scoped_release release;
            r = xrt::norm_forward(kind_from(norm), x, ptr(residual), ptr(weight), ptr(bias), eps,
                                  keep_stats, choice, as_pointer(stream));
          }
          return py::make_tuple(py::cast(std::move(r.y)), or_none(std::move(r.sum)),
                                or_none(std::move(r.mean)), or_none(std::move(r.rstd)),
                                decision_tuple(*r.decision), r.detail);
        },
        py::arg("norm"), py::arg("x"), py::arg("residual"), py::arg("weight"), py::arg("bias"),
        py::arg("eps"), py::arg("keep_stats"), py::arg("kernel"), py::arg("mode"),
        py::arg("strategy"), py::arg("stream"));

  m.def("norm_backward",
        [](const std::string& norm, const xrt::Tensor& dy, const xrt::Tensor& x,
           const std::optional<xrt::Tensor>& weight, const std::optional<xrt::Tensor>& mean,
           const xrt::Tensor& rstd, const std::optional<xrt::Tensor>& dsum, bool with_dbias,
           const std::string& kernel, const std::string& mode, const std::string& strategy,
           std::uintptr_t stream) {
          const auto choice = policy_choice(kernel, mode, strategy);
          xrt::NormBackwardResult r;
          {
            py::gil_scoped_release release;
            r = xrt::norm_backward(kind_from(norm), dy, x, ptr(weight), ptr(mean), rstd,
                                   ptr(dsum), with_dbias, choice, as_pointer(stream));
          }
          return py::make_tuple(py::cast(std::move(r.dx)), or_none(std::move(r.dweight)),
                                or_none(std::move(r.dbias)), decision_tuple(*r.decision),
                                r.detail);
        },
        py::arg("norm"), py::arg("dy"), py::arg("x"), py::arg("weight"), py::arg("mean"),
        py::arg("rstd"), py::arg("dsum"), py::arg("with_dbias"), py::arg("kernel"),
        py::arg("mode"), py::arg("strategy"), py::arg("stream"));

  m.def("norm_forward_raw",
        [](bool rms, int dtype, int device, std::int64_t rows, std::int64_t h, std::uintptr_t x,
           std::uintptr_t residual, std::uintptr_t weight, std::uintptr_t bias, std::uintptr_t y,
           std::uintptr_t sum, std::uintptr_t mean, std::uintptr_t rstd, double eps,
           std::uintptr_t stream) {
          xrt::NormForwardArgs a;
          a.kind = rms ? xrt::NormKind::RMSNorm : xrt::NormKind::LayerNorm;
          a.dtype = dtype_from_code(dtype);
          a.rows = rows;
          a.h = h;
          a.x = as_pointer(x);
          a.residual = as_pointer(residual);
          a.weight = as_pointer(weight);
          a.bias = as_pointer(bias);
          a.y = as_pointer(y);
          a.sum = as_pointer(sum);
          a.mean = as_pointer(mean);
          a.rstd = as_pointer(rstd);
          a.eps = eps;
          py::gil_scoped_release release;
          xrt::run_norm_forward(a, device_from_index(device), as_pointer(stream));
        },
        "Forward kernel on raw pointers (0 = absent); device -1 is the CPU.");

  m.def("norm_backward_raw",
        [](bool rms, int dtype, int device, std::int64_t rows, std::int64_t h, std::uintptr_t dy,
           std::uintptr_t x, std::uintptr_t weight, std::uintptr_t mean, std::uintptr_t rstd,
           std::uintptr_t dsum, std::uintptr_t dx, std::uintptr_t dweight, std::uintptr_t dbias,
           std::uintptr_t workspace, std::size_t workspace_bytes, std::uintptr_t stream) {
          xrt::NormBackwardArgs a;
          a.kind = rms ? xrt::NormKind::RMSNorm : xrt::NormKind::LayerNorm;
          a.dtype = dtype_from_code(dtype);
          a.rows = rows;
          a.h = h;
          a.dy = as_pointer(dy);
          a.x = as_pointer(x);
          a.weight = as_pointer(weight);
          a.mean = as_pointer(mean);
          a.rstd = as_pointer(rstd);
          a.dsum = as_pointer(dsum);
          a.dx = as_pointer(dx);
          a.dweight = as_pointer(dweight);
          a.dbias = as_pointer(dbias);
          a.workspace = as_pointer(workspace);
          a.workspace_bytes = workspace_bytes;
          py::gil_scoped_release release;
          xrt::run_norm_backward(a, device_from_index(device), as_pointer(stream));
        },
        "Backward kernel on raw pointers (0 = absent; workspace 0 = from the core's pool); "
        "device -1 is the CPU.");

  m.def("norm_backward_workspace_bytes",
        [](bool rms, int dtype, int device, std::int64_t rows, std::int64_t h, bool dweight,
           bool dbias) {
          xrt::NormBackwardArgs a;
          a.kind = rms ? xrt::NormKind::RMSNorm : xrt::NormKind::LayerNorm;
          a.dtype = dtype_from_code(dtype);
          a.rows = rows;
          a.h = h;
          // Only whether they are asked for matters to the size.
          static char marker;
          a.dweight = dweight ? &marker : nullptr;
          a.dbias = dbias ? &marker : nullptr;
          return xrt::norm_backward_workspace_bytes(a, device_from_index(device));
        },
        "Workspace bytes norm_backward_raw needs for these sizes (0 on the CPU).");
}

}  // namespace xrt_py
