// The core's kernels as a versioned C function table, for native callers in other binaries
// (the PyTorch extension of xpuruntime-torch): they read it once from the PyCapsule
// `xpuruntime.runtime._core.KERNEL_TABLE` and call the kernels without Python, pybind11 or a
// second copy of the kernels. Plain C types only; no C++ exception crosses it.
//
// ABI contract: fields are only ever appended (then `size` grows); an incompatible change
// bumps XRT_KERNEL_TABLE_VERSION. xpuruntime-torch keeps a copy of this header
// (csrc/kernel_table.h) and refuses a table whose version differs from its own.
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
} xrt_kernel_table;

#ifdef __cplusplus
}
#endif

#endif  // XPURUNTIME_KERNEL_TABLE_H
