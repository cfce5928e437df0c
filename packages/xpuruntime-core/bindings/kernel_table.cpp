// KERNEL_TABLE: the core's kernels as a C function table in a PyCapsule (kernel_table.h says
// why and what the ABI promises). Each entry turns the core's exceptions into a status and a
// thread-local message, since no C++ exception may cross a C ABI between two binaries.
#include "kernel_table.h"

#include <memory>
#include <optional>
#include <string>
#include <utility>

#include "bindings.h"
#include "xpuruntime/errors.h"
#include "xpuruntime/norms.h"
#include "xpuruntime/ops.h"

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

// --- linear ------------------------------------------------------------------------------

// A caller's view as the core's tensor: no holder (the caller keeps the memory alive for the
// call); a dtype the table has no code for stays unsupported, as the DLPack import of an
// integer tensor is for a GEMM.
xrt::Tensor view_of(const xrt_view& v, const char* name) {
  if (v.dtype < 0) {
    throw xrt::UnsupportedOperationError(std::string("linear: ") + name +
                                         " has a dtype the core's GEMMs do not take");
  }
  xrt::Tensor t;
  t.data = const_cast<void*>(v.data);
  t.shape.assign(v.shape, v.shape + v.ndim);
  t.strides.assign(v.strides, v.strides + v.ndim);
  t.dtype = dtype_of(v.dtype);
  t.device = device_of(v.device);
  return t;
}

// Hands a result's storage to the caller: its holder moves into a heap cell that
// release_buffer deletes.
xrt_buffer hand_over(xrt::Tensor& t) {
  xrt_buffer b{};
  b.data = t.data;
  b.row_stride = t.shape.size() >= 2 ? t.stride(0) : 1;
  b.owner = new std::shared_ptr<void>(std::move(t.holder));
  return b;
}

thread_local std::string reported_kernel, reported_reason;

int linear(xrt_linear_args* in, void* stream) {
  return guarded([&] {
    const xrt::Tensor a = view_of(in->a, in->weight_grad ? "dz" : "x");
    const xrt::Tensor b = view_of(in->b, in->weight_grad ? "x" : "weight");
    xrt::PolicyChoice policy;
    policy.kernel = in->kernel;
    policy.mode = xrt::mode_from_name(in->mode);
    policy.allow_tf32 = in->tf32 != 0;
    // The caller's result storage, when it gives one.
    std::optional<xrt::Tensor> out_into, extra_into;
    xrt::LinearOutputs into;
    if (in->write_into) {
      into.output = &out_into.emplace(view_of(in->out_into, "the output"));
      if (in->extra_into.ndim > 0) {
        into.extra = &extra_into.emplace(view_of(in->extra_into, "the second output"));
      }
    }
    xrt::OpResult r;
    if (in->weight_grad) {
      r = xrt::linear_weight_grad(a, b, in->bias_grad != 0, policy, stream, into);
    } else {
      static constexpr xrt::Activation kActivations[] = {
          xrt::Activation::None, xrt::Activation::Relu, xrt::Activation::Gelu};
      if (in->activation < 0 || in->activation > 2) {
        throw xrt::InvalidArgumentError("linear: activation code " +
                                        std::to_string(in->activation) + " is not 0, 1 or 2");
      }
      std::optional<xrt::Tensor> bias;
      if (in->bias.data != nullptr || in->bias.ndim > 0) bias = view_of(in->bias, "bias");
      r = xrt::linear(a, b, bias ? &*bias : nullptr, kActivations[in->activation],
                      in->save_preactivation != 0, policy, stream, into);
    }
    if (into.output == nullptr) {
      in->out = hand_over(r.output);
      in->extra = r.extra.empty() ? xrt_buffer{} : hand_over(r.extra[0]);
    }
    if (in->report) {
      reported_kernel = r.decision->kernel;
      reported_reason = r.decision->reason;
      in->decision_kernel = reported_kernel.c_str();
      in->decision_reason = reported_reason.c_str();
      in->decision_fallen_back = r.decision->status() == xrt::DecisionStatus::FallenBack;
    }
  });
}

void release_buffer(void* owner) { delete static_cast<std::shared_ptr<void>*>(owner); }

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
    linear,
    release_buffer,
    sizeof(xrt_linear_args),
};
}  // namespace

void bind_kernel_table(py::module_& m) {
  // The table is static: the capsule owns nothing and needs no destructor.
  m.attr("KERNEL_TABLE") =
      py::capsule(const_cast<xrt_kernel_table*>(&table), XRT_KERNEL_TABLE_CAPSULE);
}

}  // namespace xrt_py
