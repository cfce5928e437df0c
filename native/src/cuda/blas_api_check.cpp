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
static_assert(kCompute32F == CUBLAS_COMPUTE_32F);
static_assert(kGemmDefault == CUBLAS_GEMM_DEFAULT);
static_assert(kDescTransA == CUBLASLT_MATMUL_DESC_TRANSA);
static_assert(kDescTransB == CUBLASLT_MATMUL_DESC_TRANSB);
static_assert(kPrefMaxWorkspaceBytes == CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES);
static_assert(kAlgoConfigId == CUBLASLT_ALGO_CONFIG_ID);
static_assert(kAlgoConfigTileId == CUBLASLT_ALGO_CONFIG_TILE_ID);
static_assert(kAlgoConfigSplitK == CUBLASLT_ALGO_CONFIG_SPLITK_NUM);
static_assert(kAlgoConfigStagesId == CUBLASLT_ALGO_CONFIG_STAGES_ID);
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
}  // namespace xrt::blas
#endif
