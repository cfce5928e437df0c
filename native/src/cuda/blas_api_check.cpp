// Compile-time check of blas_api.h against NVIDIA's headers, where they are installed (the
// CUDA toolkit or the nvidia-cublas wheel). Without them this unit compiles to nothing.
#if XPURUNTIME_CHECK_CUBLAS_API && __has_include(<cublasLt.h>) && __has_include(<cublas_v2.h>)
#include <cublasLt.h>
#include <cublas_v2.h>

#include <cstddef>

#include "cuda/blas_api.h"

namespace xrt::blas {

static_assert(kSuccess == CUBLAS_STATUS_SUCCESS);
static_assert(kOpN == CUBLAS_OP_N);
static_assert(kOpT == CUBLAS_OP_T);
static_assert(kCompute32F == CUBLAS_COMPUTE_32F);
static_assert(kCompute32FFastTF32 == CUBLAS_COMPUTE_32F_FAST_TF32);
static_assert(kGemmDefault == CUBLAS_GEMM_DEFAULT);
static_assert(kDescTransA == CUBLASLT_MATMUL_DESC_TRANSA);
static_assert(kDescTransB == CUBLASLT_MATMUL_DESC_TRANSB);
static_assert(kDescEpilogue == CUBLASLT_MATMUL_DESC_EPILOGUE);
static_assert(kDescBiasPointer == CUBLASLT_MATMUL_DESC_BIAS_POINTER);
static_assert(kDescEpilogueAuxPointer == CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER);
static_assert(kDescEpilogueAuxLd == CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD);
static_assert(kDescEpilogueAuxBatchStride == CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_BATCH_STRIDE);
static_assert(kEpilogueDefault == CUBLASLT_EPILOGUE_DEFAULT);
static_assert(kEpilogueRelu == CUBLASLT_EPILOGUE_RELU);
static_assert(kEpilogueBias == CUBLASLT_EPILOGUE_BIAS);
static_assert(kEpilogueReluBias == CUBLASLT_EPILOGUE_RELU_BIAS);
static_assert(kEpilogueGelu == CUBLASLT_EPILOGUE_GELU);
static_assert(kEpilogueGeluAux == CUBLASLT_EPILOGUE_GELU_AUX);
static_assert(kEpilogueGeluBias == CUBLASLT_EPILOGUE_GELU_BIAS);
static_assert(kEpilogueGeluAuxBias == CUBLASLT_EPILOGUE_GELU_AUX_BIAS);
static_assert(kEpilogueDGelu == CUBLASLT_EPILOGUE_DGELU);
static_assert(kEpilogueDGeluBGrad == CUBLASLT_EPILOGUE_DGELU_BGRAD);
static_assert(kEpilogueBGradA == CUBLASLT_EPILOGUE_BGRADA);
static_assert(kEpilogueBGradB == CUBLASLT_EPILOGUE_BGRADB);
static_assert(kLayoutBatchCount == CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT);
static_assert(kLayoutStridedBatchOffset == CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET);
static_assert(kPrefMaxWorkspaceBytes == CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES);
static_assert(kPrefMinAlignmentA == CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES);
static_assert(kPrefMinAlignmentB == CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES);
static_assert(kPrefMinAlignmentC == CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES);
static_assert(kPrefMinAlignmentD == CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES);
static_assert(kAlgoConfigId == CUBLASLT_ALGO_CONFIG_ID);
static_assert(kAlgoConfigTileId == CUBLASLT_ALGO_CONFIG_TILE_ID);
static_assert(kAlgoConfigSplitK == CUBLASLT_ALGO_CONFIG_SPLITK_NUM);
static_assert(kAlgoConfigReduction == CUBLASLT_ALGO_CONFIG_REDUCTION_SCHEME);
static_assert(kAlgoConfigSwizzle == CUBLASLT_ALGO_CONFIG_CTA_SWIZZLING);
static_assert(kAlgoConfigCustomOption == CUBLASLT_ALGO_CONFIG_CUSTOM_OPTION);
static_assert(kAlgoConfigStagesId == CUBLASLT_ALGO_CONFIG_STAGES_ID);
static_assert(kAlgoConfigInnerShape == CUBLASLT_ALGO_CONFIG_INNER_SHAPE_ID);
static_assert(kAlgoConfigClusterShape == CUBLASLT_ALGO_CONFIG_CLUSTER_SHAPE_ID);
static_assert(sizeof(MatmulAlgo) == sizeof(cublasLtMatmulAlgo_t));
static_assert(sizeof(HeuristicResult) == sizeof(cublasLtMatmulHeuristicResult_t));
static_assert(offsetof(HeuristicResult, workspaceSize) ==
              offsetof(cublasLtMatmulHeuristicResult_t, workspaceSize));
static_assert(offsetof(HeuristicResult, state) == offsetof(cublasLtMatmulHeuristicResult_t, state));
static_assert(sizeof(Status) == sizeof(cublasStatus_t));
static_assert(sizeof(int) == sizeof(cublasComputeType_t));
static_assert(sizeof(int) == sizeof(cublasOperation_t));
static_assert(sizeof(int) == sizeof(cublasLtMatmulDescAttributes_t));

// Same parameter count: our pointer types replace the opaque handle types 1:1, and int
// replaces the enums (sizes checked above).
template <typename R, typename... A>
constexpr std::size_t arity(R (*)(A...)) {
  return sizeof...(A);
}
// cublasGemmEx has C++ overloads in newer headers: select the one with the documented
// signature (the cast fails to compile if it does not exist).
using RealGemmEx = cublasStatus_t (*)(cublasHandle_t, cublasOperation_t, cublasOperation_t, int,
                                      int, int, const void*, const void*, cudaDataType, int,
                                      const void*, cudaDataType, int, const void*, void*,
                                      cudaDataType, int, cublasComputeType_t, cublasGemmAlgo_t);
static_assert(arity(cublasGemmEx_t{}) == arity(static_cast<RealGemmEx>(&::cublasGemmEx)));
static_assert(arity(cublasLtMatmul_t{}) == arity(&::cublasLtMatmul));
static_assert(arity(cublasLtMatmulAlgoGetHeuristic_t{}) ==
              arity(&::cublasLtMatmulAlgoGetHeuristic));
static_assert(arity(cublasLtMatrixLayoutCreate_t{}) == arity(&::cublasLtMatrixLayoutCreate));
static_assert(arity(cublasLtMatrixLayoutSetAttribute_t{}) ==
              arity(&::cublasLtMatrixLayoutSetAttribute));
static_assert(arity(cublasLtMatmulAlgoInit_t{}) == arity(&::cublasLtMatmulAlgoInit));
static_assert(arity(cublasLtMatmulAlgoCheck_t{}) == arity(&::cublasLtMatmulAlgoCheck));
static_assert(arity(cublasLtMatmulAlgoConfigSetAttribute_t{}) ==
              arity(&::cublasLtMatmulAlgoConfigSetAttribute));
using RealGemmStridedBatchedEx = cublasStatus_t (*)(
    cublasHandle_t, cublasOperation_t, cublasOperation_t, int, int, int, const void*,
    const void*, cudaDataType, int, long long, const void*, cudaDataType, int, long long,
    const void*, void*, cudaDataType, int, long long, int, cublasComputeType_t, cublasGemmAlgo_t);
static_assert(arity(cublasGemmStridedBatchedEx_t{}) ==
              arity(static_cast<RealGemmStridedBatchedEx>(&::cublasGemmStridedBatchedEx)));
}  // namespace xrt::blas
#endif
