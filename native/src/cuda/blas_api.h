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
constexpr int kOpT = 1;
// cublasComputeType_t
constexpr int kCompute32F = 68;
constexpr int kCompute32FFastTF32 = 77;
// cublasGemmAlgo_t
constexpr int kGemmDefault = -1;
// cublasLtMatmulDescAttributes_t
constexpr int kDescTransA = 3;               // int32_t (cublasOperation_t)
constexpr int kDescTransB = 4;
constexpr int kDescEpilogue = 7;             // uint32_t (cublasLtEpilogue_t)
constexpr int kDescBiasPointer = 8;          // void*
constexpr int kDescEpilogueAuxPointer = 11;  // void*
constexpr int kDescEpilogueAuxLd = 12;       // int64_t
constexpr int kDescEpilogueAuxBatchStride = 13;  // int64_t
// cublasLtEpilogue_t
constexpr std::uint32_t kEpilogueDefault = 1;
constexpr std::uint32_t kEpilogueRelu = 2;
constexpr std::uint32_t kEpilogueBias = 4;
constexpr std::uint32_t kEpilogueReluBias = 6;
constexpr std::uint32_t kEpilogueGelu = 32;
constexpr std::uint32_t kEpilogueGeluAux = 32 | 128;
constexpr std::uint32_t kEpilogueGeluBias = 32 | 4;
constexpr std::uint32_t kEpilogueGeluAuxBias = 32 | 128 | 4;
constexpr std::uint32_t kEpilogueDGelu = 64 | 128;
constexpr std::uint32_t kEpilogueDGeluBGrad = 64 | 128 | 16;
constexpr std::uint32_t kEpilogueBGradA = 256;
constexpr std::uint32_t kEpilogueBGradB = 512;
// cublasLtMatrixLayoutAttribute_t
constexpr int kLayoutBatchCount = 5;          // int32_t
constexpr int kLayoutStridedBatchOffset = 6;  // int64_t
// cublasLtMatmulPreferenceAttributes_t
constexpr int kPrefMaxWorkspaceBytes = 1;  // uint64_t
constexpr int kPrefMinAlignmentA = 5;      // uint32_t
constexpr int kPrefMinAlignmentB = 6;
constexpr int kPrefMinAlignmentC = 7;
constexpr int kPrefMinAlignmentD = 8;
// cublasLtMatmulAlgoConfigAttributes_t
constexpr int kAlgoConfigId = 0;            // int32_t
constexpr int kAlgoConfigTileId = 1;        // uint32_t
constexpr int kAlgoConfigSplitK = 2;        // int32_t
constexpr int kAlgoConfigReduction = 3;     // uint32_t
constexpr int kAlgoConfigSwizzle = 4;       // uint32_t
constexpr int kAlgoConfigCustomOption = 5;  // uint32_t
constexpr int kAlgoConfigStagesId = 6;      // uint32_t
constexpr int kAlgoConfigInnerShape = 7;    // uint16_t
constexpr int kAlgoConfigClusterShape = 8;  // uint16_t

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
using cublasGemmStridedBatchedEx_t = Status (*)(Handle, int, int, int, int, int, const void*,
                                                const void*, cudaDataType, int, long long,
                                                const void*, cudaDataType, int, long long,
                                                const void*, void*, cudaDataType, int, long long,
                                                int, int, int);
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
using cublasLtMatrixLayoutSetAttribute_t = Status (*)(MatrixLayout, int, const void*, std::size_t);
using cublasLtMatmulPreferenceCreate_t = Status (*)(Preference*);
using cublasLtMatmulPreferenceDestroy_t = Status (*)(Preference);
using cublasLtMatmulPreferenceSetAttribute_t = Status (*)(Preference, int, const void*,
                                                          std::size_t);
using cublasLtMatmulAlgoGetHeuristic_t = Status (*)(LtHandle, MatmulDesc, MatrixLayout,
                                                    MatrixLayout, MatrixLayout, MatrixLayout,
                                                    Preference, int, HeuristicResult*, int*);
using cublasLtMatmulAlgoConfigGetAttribute_t = Status (*)(const MatmulAlgo*, int, void*,
                                                          std::size_t, std::size_t*);
using cublasLtMatmulAlgoConfigSetAttribute_t = Status (*)(MatmulAlgo*, int, const void*,
                                                          std::size_t);
using cublasLtMatmulAlgoInit_t = Status (*)(LtHandle, int, cudaDataType, cudaDataType,
                                            cudaDataType, cudaDataType, cudaDataType, int,
                                            MatmulAlgo*);
using cublasLtMatmulAlgoCheck_t = Status (*)(LtHandle, MatmulDesc, MatrixLayout, MatrixLayout,
                                             MatrixLayout, MatrixLayout, const MatmulAlgo*,
                                             HeuristicResult*);
using cublasLtMatmul_t = Status (*)(LtHandle, MatmulDesc, const void*, const void*, MatrixLayout,
                                    const void*, MatrixLayout, const void*, const void*,
                                    MatrixLayout, void*, MatrixLayout, const MatmulAlgo*, void*,
                                    std::size_t, cudaStream_t);

using cudnnGetVersion_t = std::size_t (*)();

}  // namespace xrt::blas
