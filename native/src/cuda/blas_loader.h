// Opens cuBLAS, cuBLASLt (and reads cuDNN's version) at run time with dlopen, so the core
// imports on machines without them and says which library is missing when a kernel needs it.
#pragma once

#include <string>
#include <vector>

#include "cuda/blas_api.h"

namespace xrt {

struct BlasLibraries {
  // Loads once (later calls return the same result); never throws.
  static const BlasLibraries& probe();
  // Directories tried after the default search (nvidia pip wheels); call before probe().
  static void set_search_dirs(const std::vector<std::string>& dirs);
  // CudaError naming the library, how it was searched for and how to install it.
  const BlasLibraries& require_lt() const;
  const BlasLibraries& require_cublas() const;

  bool lt_loaded = false;
  bool cublas_loaded = false;
  std::string lt_error, cublas_error;
  std::string cublaslt_path, cublas_path;
  std::size_t cublaslt_version = 0;
  int cublas_version = 0;
  std::size_t cudnn_version = 0;

  blas::cublasCreate_v2_t cublasCreate = nullptr;
  blas::cublasDestroy_v2_t cublasDestroy = nullptr;
  blas::cublasSetStream_v2_t cublasSetStream = nullptr;
  blas::cublasGetProperty_t cublasGetProperty = nullptr;
  blas::cublasGemmEx_t cublasGemmEx = nullptr;
  blas::cublasGemmStridedBatchedEx_t cublasGemmStridedBatchedEx = nullptr;

  blas::cublasLtCreate_t ltCreate = nullptr;
  blas::cublasLtDestroy_t ltDestroy = nullptr;
  blas::cublasLtGetVersion_t ltGetVersion = nullptr;
  blas::cublasLtMatmulDescCreate_t ltDescCreate = nullptr;
  blas::cublasLtMatmulDescDestroy_t ltDescDestroy = nullptr;
  blas::cublasLtMatmulDescSetAttribute_t ltDescSetAttribute = nullptr;
  blas::cublasLtMatrixLayoutCreate_t ltLayoutCreate = nullptr;
  blas::cublasLtMatrixLayoutDestroy_t ltLayoutDestroy = nullptr;
  blas::cublasLtMatrixLayoutSetAttribute_t ltLayoutSetAttribute = nullptr;
  blas::cublasLtMatmulPreferenceCreate_t ltPrefCreate = nullptr;
  blas::cublasLtMatmulPreferenceDestroy_t ltPrefDestroy = nullptr;
  blas::cublasLtMatmulPreferenceSetAttribute_t ltPrefSetAttribute = nullptr;
  blas::cublasLtMatmulAlgoGetHeuristic_t ltGetHeuristic = nullptr;
  blas::cublasLtMatmulAlgoConfigGetAttribute_t ltAlgoConfigGetAttribute = nullptr;
  blas::cublasLtMatmulAlgoConfigSetAttribute_t ltAlgoConfigSetAttribute = nullptr;
  blas::cublasLtMatmulAlgoInit_t ltAlgoInit = nullptr;
  blas::cublasLtMatmulAlgoCheck_t ltAlgoCheck = nullptr;
  blas::cublasLtMatmul_t ltMatmul = nullptr;
};

}  // namespace xrt
