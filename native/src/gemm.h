// The GEMM family shared by the matmul and linear ops and their kernels:
//
//   C[b] = epilogue(A[b] @ B[b])   A: [M, K], B: [K, N], C: [M, N] row-major contiguous
//
// with every operand a strided view. Each operand is classified once: row-major (unit column
// stride), transposed (unit row stride: a column-major matrix, which BLAS takes through its
// operation flag) or strided (neither: only the CPU kernel takes it). A 2-D operand of a
// batched product has batch stride 0.
//
// Epilogues (KernelCall conventions, row-major terms):
//   Bias, ReluBias, GeluBias, GeluAuxBias  inputs[2] = bias [N], added to every row;
//   GeluAux, GeluAuxBias                   extra_outputs[0] = pre-activation [M, N] (row stride
//                                          a multiple of 8, as cuBLASLt requires);
//   DGelu, DGeluBGrad                      inputs[2] = pre-activation [M, N]; C = (A @ B) *
//                                          gelu'(pre); DGeluBGrad: extra_outputs[0] = column
//                                          sums of C [N];
//   BGradB                                 extra_outputs[0] = row sums of A [M] (the bias
//                                          gradient of a weight-gradient GEMM dW = dz^T x);
//   BGradA                                 extra_outputs[0] = column sums of B [N].
// GELU is the tanh approximation (cuBLASLt's, and F.gelu(approximate="tanh")).
#pragma once

#include <cstdint>
#include <string>

#include "xpuruntime/kernel_registry.h"

namespace xrt {

enum class OperandLayout : std::uint8_t { RowMajor, Transposed, Strided };

struct GemmOperand {
  const void* data = nullptr;
  std::int64_t rows = 0, cols = 0;
  std::int64_t row_stride = 0, col_stride = 0, batch_stride = 0;  // elements
  OperandLayout layout = OperandLayout::RowMajor;
  // BLAS leading dimension: row_stride for RowMajor, col_stride for Transposed (>= 1).
  std::int64_t ld() const;
};

struct GemmProblem {
  std::int64_t batch = 1, m = 0, k = 0, n = 0;
  GemmOperand a, b;
  void* c = nullptr;  // contiguous [batch, m, n]
  DType dtype = DType::F32;
  Epilogue epilogue = Epilogue::None;
  const void* bias = nullptr;       // Bias*: [n]
  const void* aux_in = nullptr;     // DGelu*: pre-activation
  void* aux_out = nullptr;          // GeluAux*: pre-activation
  std::int64_t aux_ld = 0;          // row stride of the pre-activation
  void* bias_grad = nullptr;        // BGrad*, DGeluBGrad
  bool tf32 = false;
};

// View of a 2-D matrix (or 3-D batch of them) `t` as a GEMM operand of `rows` x `cols`.
GemmOperand gemm_operand(const Tensor& t, std::int64_t rows, std::int64_t cols);
// The problem of one kernel call of op "matmul" or "linear" (call.inputs / outputs as in the
// header comment; the epilogue and TF32 from `variant`).
GemmProblem gemm_problem(const KernelCall& call, std::uint32_t variant);
// The OpQuery::variant layout bits of a problem (operand layouts, epilogue, TF32).
std::uint32_t gemm_variant(const GemmOperand& a, const GemmOperand& b, Epilogue e, bool tf32);
bool epilogue_has_bias(Epilogue e);       // reads a bias vector
bool epilogue_stores_aux(Epilogue e);     // writes the pre-activation
bool epilogue_reads_aux(Epilogue e);      // DGELU*
bool epilogue_has_bias_grad(Epilogue e);  // writes a bias gradient
// Elements of the bias gradient: m for BGradB, n otherwise.
std::int64_t bias_grad_length(const GemmProblem& p);

// "operand a has strides [..] that BLAS cannot take (one of them must be 1 and the other at
// least the matrix extent); call .contiguous() on it first", or "" when both are BLAS views.
std::string blas_layout_problem(std::uint32_t variant);

}  // namespace xrt
