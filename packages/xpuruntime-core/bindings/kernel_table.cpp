// KERNEL_TABLE: the core's kernels as a C function table in a PyCapsule (kernel_table.h says
// why and what the ABI promises). Each entry turns the core's exceptions into a status and a
// thread-local message, since no C++ exception may cross a C ABI between two binaries.
#include "kernel_table.h"

#include <string>

#include "bindings.h"
#include "xpuruntime/errors.h"
#include "xpuruntime/norms.h"

namespace xrt_py {

namespace {
thread_local std::string last_message;

template <typename Call>
int guarded(Call&& call) {
  try {
    call();
    return XRT_OK;
  } catch (const xrt::OutOfMemoryError& e) {
    last_message = e.what();
    return XRT_OUT_OF_MEMORY;
  } catch (const xrt::CudaError& e) {
    last_message = e.what();
    return XRT_CUDA_ERROR;
  } catch (const xrt::UnsupportedOperationError& e) {
    last_message = e.what();
    return XRT_UNSUPPORTED;
  } catch (const xrt::InvalidArgumentError& e) {
    last_message = e.what();
    return XRT_INVALID_ARGUMENT;
  } catch (const std::exception& e) {
    last_message = e.what();
    return XRT_ERROR;
  }
}

xrt::DeviceRef device_of(int32_t index) {
  if (index < 0) return {xrt::DeviceKind::CPU, 0};
  return {xrt::DeviceKind::CUDA, index};
}

xrt::DType dtype_of(int32_t code) {
  if (code != static_cast<int>(xrt::DType::F32) && code != static_cast<int>(xrt::DType::F64) &&
      code != static_cast<int>(xrt::DType::F16) && code != static_cast<int>(xrt::DType::BF16)) {
    throw xrt::InvalidArgumentError("norm kernels take float32, float64, float16 or bfloat16 "
                                    "(dtype code " + std::to_string(code) + " given)");
  }
  return static_cast<xrt::DType>(code);
}

xrt::NormBackwardArgs backward_args(const xrt_norm_backward_args& in) {
  xrt::NormBackwardArgs a;
  a.kind = in.rms ? xrt::NormKind::RMSNorm : xrt::NormKind::LayerNorm;
  a.dtype = dtype_of(in.dtype);
  a.rows = in.rows;
  a.h = in.h;
  a.dy = in.dy;
  a.x = in.x;
  a.weight = in.weight;
  a.mean = in.mean;
  a.rstd = in.rstd;
  a.dsum = in.dsum;
  a.dx = in.dx;
  a.dweight = in.dweight;
  a.dbias = in.dbias;
  a.workspace = in.workspace;
  a.workspace_bytes = in.workspace_bytes;
  return a;
}

int norm_forward(const xrt_norm_forward_args* in, int32_t device, void* stream) {
  return guarded([&] {
    xrt::NormForwardArgs a;
    a.kind = in->rms ? xrt::NormKind::RMSNorm : xrt::NormKind::LayerNorm;
    a.dtype = dtype_of(in->dtype);
    a.rows = in->rows;
    a.h = in->h;
    a.x = in->x;
    a.residual = in->residual;
    a.weight = in->weight;
    a.bias = in->bias;
    a.y = in->y;
    a.sum = in->sum;
    a.mean = in->mean;
    a.rstd = in->rstd;
    a.eps = in->eps;
    xrt::run_norm_forward(a, device_of(device), stream);
  });
}

int norm_backward(const xrt_norm_backward_args* in, int32_t device, void* stream) {
  return guarded([&] { xrt::run_norm_backward(backward_args(*in), device_of(device), stream); });
}

int norm_backward_workspace_bytes(const xrt_norm_backward_args* in, int32_t device,
                                  size_t* bytes) {
  return guarded(
      [&] { *bytes = xrt::norm_backward_workspace_bytes(backward_args(*in), device_of(device)); });
}

const char* last_error() { return last_message.c_str(); }

const xrt_kernel_table table = {
    XRT_KERNEL_TABLE_VERSION,
    sizeof(xrt_kernel_table),
    static_cast<int32_t>(xrt::DType::F32),
    static_cast<int32_t>(xrt::DType::F64),
    static_cast<int32_t>(xrt::DType::F16),
    static_cast<int32_t>(xrt::DType::BF16),
    static_cast<int32_t>(XPURUNTIME_WITH_CUDA),
    norm_forward,
    norm_backward,
    norm_backward_workspace_bytes,
    last_error,
};
}  // namespace

void bind_kernel_table(py::module_& m) {
  // The table is static: the capsule owns nothing and needs no destructor.
  m.attr("KERNEL_TABLE") =
      py::capsule(const_cast<xrt_kernel_table*>(&table), XRT_KERNEL_TABLE_CAPSULE);
}

}  // namespace xrt_py
