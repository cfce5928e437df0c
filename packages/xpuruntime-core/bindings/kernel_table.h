// The core's kernels as a versioned C function table, for native callers in other binaries
// (the PyTorch extension of xpuruntime-torch): they read it once from the PyCapsule
// `xpuruntime.runtime._core.KERNEL_TABLE` and call the kernels without Python, pybind11 or a
// second copy of the kernels. Plain C types only; no C++ exception crosses it.
//
// ABI contract: fields are only ever appended (then `size` grows); an incompatible change
// bumps XRT_KERNEL_TABLE_VERSION. xpuruntime-torch builds against this header
// (csrc/kernel_table.h links it) and refuses a table whose version differs from its own or
// whose size is smaller (a core older than the fields it calls).
#ifndef XPURUNTIME_KERNEL_TABLE_H
#define XPURUNTIME_KERNEL_TABLE_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define XRT_KERNEL_TABLE_CAPSULE "xpuruntime.kernel_table"
#define XRT_KERNEL_TABLE_VERSION 1

// Status of a call; the message of a failed call is last_error() on the same thread.
enum xrt_status {
  XRT_OK = 0,
  XRT_INVALID_ARGUMENT = 1,
  XRT_UNSUPPORTED = 2,
  XRT_CUDA_ERROR = 3,
  XRT_OUT_OF_MEMORY = 4,
  XRT_ERROR = 5,
};

// One LayerNorm/RMSNorm forward over `rows` rows of `h` contiguous elements; absent
// pointers are null (see native/include/xpuruntime/norms.h, NormForwardArgs).
typedef struct xrt_norm_forward_args {
  int32_t rms;    // 1: RMSNorm, 0: LayerNorm
  int32_t dtype;  // one of the table's dtype codes
  int64_t rows;
  int64_t h;
  const void* x;
  const void* residual;
  const void* weight;
  const void* bias;
  void* y;
  void* sum;
  void* mean;
  void* rstd;
  double eps;
} xrt_norm_forward_args;

// One backward (see NormBackwardArgs): dweight/dbias computed when non-null.
typedef struct xrt_norm_backward_args {
  int32_t rms;
  int32_t dtype;
  int64_t rows;
  int64_t h;
  const void* dy;
  const void* x;
  const void* weight;
  const void* mean;
  const void* rstd;
  const void* dsum;
  void* dx;
  void* dweight;
  void* dbias;
  void* workspace;
  size_t workspace_bytes;
} xrt_norm_backward_args;

// A strided tensor view of the caller's memory (shape and strides in elements, ndim entries
// each; dtype one of the table's dtype codes, or -1 for another dtype, which the core refuses
// as unsupported; device as the table's functions take it).
typedef struct xrt_view {
  const void* data;
  const int64_t* shape;
  const int64_t* strides;
  int32_t ndim;
  int32_t dtype;
  int32_t device;
} xrt_view;

// Memory the core allocated (its caching pool, on the call's stream) and hands over: the
// caller frees it with release_buffer(owner) once nothing reads it (stream-ordered, like the
// core's own tensors). `owner` is null when the buffer is absent.
typedef struct xrt_buffer {
  void* data;
  int64_t row_stride;  // elements between rows of a matrix result
  void* owner;
} xrt_buffer;

// One call of the core's op "linear", exactly as xpuruntime.ops.linear / linear_weight_grad
// run it (native/include/xpuruntime/ops.h): resolved by the core's dispatcher under the
// policy entry given here, on a GEMM with a fused epilogue.
//   forward (weight_grad 0): out = activation(a @ b^T + bias) for a = x [..., K],
//     b = weight [N, K], bias [N] or absent (data null); out is contiguous [..., N];
//     save_preactivation (GELU only): extra = z = a @ b^T + bias, [M, N] rows of row_stride
//     elements (a multiple of 8);
//   weight gradient (weight_grad 1): out = a^T @ b for a = dz [..., N], b = x [..., K]:
//     dw [N, K] contiguous; bias_grad: extra = db = dz summed over rows [N] (BGRADB).
// The results go where the caller says (write_into: out_into, extra_into, the layouts above;
// what a CUDA graph capture needs, where only the capturing allocator may allocate), or else
// into memory the core allocates and hands over in out and extra.
typedef struct xrt_linear_args {
  int32_t weight_grad;
  int32_t activation;  // forward: 0 none, 1 relu, 2 gelu (tanh approximation)
  int32_t save_preactivation;
  int32_t bias_grad;
  xrt_view a;
  xrt_view b;
  xrt_view bias;
  // The policy's linear entry: kernel ("" when auto), mode ("pin", "prefer" or "auto");
  // tf32: fp32 GEMMs may use TF32 tensor cores.
  const char* kernel;
  const char* mode;
  int32_t tf32;
  int32_t report;  // 1: fill the decision fields
  // Results.
  xrt_buffer out;
  xrt_buffer extra;
  // With report: the decision the call ran under (valid until this thread's next call).
  const char* decision_kernel;
  const char* decision_reason;
  int32_t decision_fallen_back;
  // Appended (the table's linear_args_size covers them): the caller's result storage. With
  // write_into 1 the results go to out_into and extra_into (required, ndim > 0, exactly when
  // the call has a second result) and out and extra stay empty.
  int32_t write_into;
  xrt_view out_into;
  xrt_view extra_into;
} xrt_linear_args;

typedef struct xrt_kernel_table {
  uint32_t version;  // XRT_KERNEL_TABLE_VERSION
  uint32_t size;     // sizeof(xrt_kernel_table) of the exporting core
  int32_t dtype_f32, dtype_f64, dtype_f16, dtype_bf16;
  int32_t cuda_built;
  // device: a CUDA device index, or -1 for the CPU; stream: a cudaStream_t (or null).
  int (*norm_forward)(const xrt_norm_forward_args* args, int32_t device, void* stream);
  int (*norm_backward)(const xrt_norm_backward_args* args, int32_t device, void* stream);
  int (*norm_backward_workspace_bytes)(const xrt_norm_backward_args* args, int32_t device,
                                       size_t* bytes);
  const char* (*last_error)(void);
  // Appended with the linear op (present when size covers them).
  int (*linear)(xrt_linear_args* args, void* stream);
  void (*release_buffer)(void* owner);
  // Appended with caller-provided linear results: sizeof(xrt_linear_args) as the core reads it.
  uint32_t linear_args_size;
} xrt_kernel_table;

#ifdef __cplusplus
}
#endif

#endif  // XPURUNTIME_KERNEL_TABLE_H
