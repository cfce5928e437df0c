// The few cuBLAS / cuBLASLt declarations xpuruntime calls, written here because the libraries
// are opened at run time with dlopen (machines without cuBLAS must still import the core, and
// the build machine has no cuBLAS headers). Values and layouts are checked against the real
// headers by blas_api_check.cpp wherever <cublasLt.h> is available.
#pragma once

#include <cuda_runtime_api.h>
#include <library_types.h>

#include <cstddef>
#include <cstdint>

namespace xrt::blas {

using Status = int;  // cublasStatus_t
constexpr Status kSuccess = 0;

using Handle = struct HandleOpaque*;             // cublasHandle_t
using LtHandle = struct LtHandleOpaque*;         // cublasLtHandle_t
using MatmulDesc = struct MatmulDescOpaque*;     // cublasLtMatmulDesc_t
using MatrixLayout = struct MatrixLayoutOpaque*; // cublasLtMatrixLayout_t
using Preference = struct PreferenceOpaque*;     // cublasLtMatmulPreference_t

// cublasOperation_t
constexpr int kOpN = 0;
// cublasComputeType_t
constexpr int kCompute32F = 68;
// cublasGemmAlgo_t
constexpr int kGemmDefault = -1;
// cublasLtMatmulDescAttributes_t
constexpr int kDescTransA = 3;
constexpr int kDescTransB = 4;
// cublasLtMatmulPreferenceAttributes_t (value type uint64_t)
constexpr int kPrefMaxWorkspaceBytes = 1;
// cublasLtMatmulAlgoConfigAttributes_t
constexpr int kAlgoConfigId = 0;       // int32_t
constexpr int kAlgoConfigTileId = 1;   // uint32_t
constexpr int kAlgoConfigSplitK = 2;   // int32_t
constexpr int kAlgoConfigStagesId = 6; // uint32_t

struct MatmulAlgo {  // cublasLtMatmulAlgo_t
  std::uint64_t data[8];
};

struct HeuristicResult {  // cublasLtMatmulHeuristicResult_t
  MatmulAlgo algo;
  std::size_t workspaceSize;
  Status state;
  float wavesCount;
  int reserved[4];
};

// Function pointer types, named after the exported symbols.
using cublasCreate_v2_t = Status (*)(Handle*);
using cublasDestroy_v2_t = Status (*)(Handle);
using cublasSetStream_v2_t = Status (*)(Handle, cudaStream_t);
using cublasGetProperty_t = Status (*)(libraryPropertyType, int*);
using cublasGemmEx_t = Status (*)(Handle, int, int, int, int, int, const void*, const void*,
                                  cudaDataType, int, const void*, cudaDataType, int, const void*,
                                  void*, cudaDataType, int, int, int);

using cublasLtCreate_t = Status (*)(LtHandle*);
using cublasLtDestroy_t = Status (*)(LtHandle);
using cublasLtGetVersion_t = std::size_t (*)();
using cublasLtMatmulDescCreate_t = Status (*)(MatmulDesc*, int, cudaDataType);
using cublasLtMatmulDescDestroy_t = Status (*)(MatmulDesc);
using cublasLtMatmulDescSetAttribute_t = Status (*)(MatmulDesc, int, const void*, std::size_t);
using cublasLtMatrixLayoutCreate_t = Status (*)(MatrixLayout*, cudaDataType, std::uint64_t,
                                                std::uint64_t, std::int64_t);
using cublasLtMatrixLayoutDestroy_t = Status (*)(MatrixLayout);
using cublasLtMatmulPreferenceCreate_t = Status (*)(Preference*);
using cublasLtMatmulPreferenceDestroy_t = Status (*)(Preference);
using cublasLtMatmulPreferenceSetAttribute_t = Status (*)(Preference, int, const void*,
                                                          std::size_t);
using cublasLtMatmulAlgoGetHeuristic_t = Status (*)(LtHandle, MatmulDesc, MatrixLayout,
                                                    MatrixLayout, MatrixLayout, MatrixLayout,
                                                    Preference, int, HeuristicResult*, int*);
using cublasLtMatmulAlgoConfigGetAttribute_t = Status (*)(const MatmulAlgo*, int, void*,
                                                          std::size_t, std::size_t*);
using cublasLtMatmul_t = Status (*)(LtHandle, MatmulDesc, const void*, const void*, MatrixLayout,
                                    const void*, MatrixLayout, const void*, const void*,
                                    MatrixLayout, void*, MatrixLayout, const MatmulAlgo*, void*,
                                    std::size_t, cudaStream_t);

using cudnnGetVersion_t = std::size_t (*)();

}  // namespace xrt::blas
