#include "gemm.h"

#include <algorithm>

#include "xpuruntime/errors.h"

namespace xrt {

std::int64_t GemmOperand::ld() const {
  if (layout == OperandLayout::RowMajor) return std::max<std::int64_t>({row_stride, cols, 1});
  return std::max<std::int64_t>({col_stride, rows, 1});
}

GemmOperand gemm_operand(const Tensor& t, std::int64_t rows, std::int64_t cols) {
  GemmOperand o;
  o.data = t.data;
  o.rows = rows;
  o.cols = cols;
  const std::size_t nd = t.shape.size();
  o.row_stride = t.stride(nd - 2);
  o.col_stride = t.stride(nd - 1);
  o.batch_stride = nd == 3 && t.shape[0] > 1 ? t.stride(0) : 0;
  // Size-1 dimensions take any stride: normalise them so that the classification below
  // sees the strides that matter.
  if (cols <= 1) o.col_stride = 1;
  if (rows <= 1) o.row_stride = std::max<std::int64_t>(cols, 1);
  const bool unit_cols = o.col_stride == 1;
  const bool unit_rows = o.row_stride == 1;
  if (unit_cols && o.row_stride >= std::max<std::int64_t>(cols, 1)) {
    o.layout = OperandLayout::RowMajor;
  } else if (unit_rows && o.col_stride >= std::max<std::int64_t>(rows, 1)) {
    o.layout = OperandLayout::Transposed;
  } else if (rows <= 1 && cols > 1 && o.col_stride >= 1) {
    // A single row with a non-unit column stride is a column-major 1 x cols matrix.
    o.row_stride = 1;
    o.layout = OperandLayout::Transposed;
  } else {
    o.layout = OperandLayout::Strided;
  }
  if (o.batch_stride < 0) o.layout = OperandLayout::Strided;
  return o;
}

bool epilogue_has_bias(Epilogue e) {
  return e == Epilogue::Bias || e == Epilogue::ReluBias || e == Epilogue::GeluBias ||
         e == Epilogue::GeluAuxBias;
}
bool epilogue_stores_aux(Epilogue e) { return e == Epilogue::GeluAux || e == Epilogue::GeluAuxBias; }
bool epilogue_reads_aux(Epilogue e) { return e == Epilogue::DGelu || e == Epilogue::DGeluBGrad; }
bool epilogue_has_bias_grad(Epilogue e) {
  return e == Epilogue::DGeluBGrad || e == Epilogue::BGradA || e == Epilogue::BGradB;
}

std::int64_t bias_grad_length(const GemmProblem& p) {
  return p.epilogue == Epilogue::BGradB ? p.m : p.n;
}

std::uint32_t gemm_variant(const GemmOperand& a, const GemmOperand& b, Epilogue e, bool tf32) {
  std::uint32_t v = layout::kGemm;
  if (a.layout == OperandLayout::Transposed) v |= layout::kTransA;
  if (a.layout == OperandLayout::Strided) v |= layout::kStridedA;
  if (b.layout == OperandLayout::Transposed) v |= layout::kTransB;
  if (b.layout == OperandLayout::Strided) v |= layout::kStridedB;
  if (tf32) v |= layout::kTf32;
  return with_epilogue(v, e);
}

std::string blas_layout_problem(std::uint32_t variant) {
  std::string which;
  if (variant & layout::kStridedA) which = "a";
  if (variant & layout::kStridedB) which += which.empty() ? "b" : " and b";
  if (which.empty()) return "";
  return "operand " + which +
         " has strides BLAS cannot take (one stride of each matrix must be 1 and the other at "
         "least its extent, batch strides non-negative); call .contiguous() on it first";
}

GemmProblem gemm_problem(const KernelCall& call, std::uint32_t variant) {
  const Tensor& a = *call.inputs.at(0);
  const Tensor& b = *call.inputs.at(1);
  GemmProblem p;
  const std::size_t an = a.shape.size(), bn = b.shape.size();
  p.m = a.shape[an - 2];
  p.k = a.shape[an - 1];
  p.n = b.shape[bn - 1];
  p.batch = std::max<std::int64_t>(an == 3 ? a.shape[0] : 1, bn == 3 ? b.shape[0] : 1);
  p.a = gemm_operand(a, p.m, p.k);
  p.b = gemm_operand(b, p.k, p.n);
  p.c = call.output->data;
  p.dtype = call.output->dtype;
  p.epilogue = epilogue_of(variant);
  p.tf32 = (variant & layout::kTf32) != 0;
  if (epilogue_has_bias(p.epilogue)) p.bias = call.inputs.at(2)->data;
  if (epilogue_reads_aux(p.epilogue)) {
    const Tensor& aux = *call.inputs.at(2);
    p.aux_in = aux.data;
    p.aux_ld = aux.stride(aux.shape.size() - 2);
  }
  if (epilogue_stores_aux(p.epilogue)) {
    Tensor& aux = *call.extra_outputs.at(0);
    p.aux_out = aux.data;
    p.aux_ld = aux.stride(aux.shape.size() - 2);
  }
  if (epilogue_has_bias_grad(p.epilogue)) p.bias_grad = call.extra_outputs.at(0)->data;
  return p;
}

}  // namespace xrt
