#include "cuda/blas_loader.h"

#include <dlfcn.h>
#include <link.h>

#include <mutex>

#include "xpuruntime/errors.h"

namespace xrt {

namespace {
std::mutex& dirs_mutex() {
  static std::mutex m;
  return m;
}
std::vector<std::string>& search_dirs() {
  static std::vector<std::string> dirs;
  return dirs;
}

struct Opened {
  void* handle = nullptr;
  std::string path;
  std::string error;
};

// The library's own soname first (LD_LIBRARY_PATH, ldconfig, or already loaded by another
// framework), then each search directory, then the toolkit's lib64.
Opened open_library(const std::vector<std::string>& sonames) {
  std::vector<std::string> dirs;
  {
    std::lock_guard<std::mutex> lock(dirs_mutex());
    dirs = search_dirs();
  }
  dirs.push_back("/usr/local/cuda/lib64");
  Opened out;
  std::string tried;
  auto attempt = [&](const std::string& name) {
    void* h = dlopen(name.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (h == nullptr) {
      tried += "\n  " + name + ": " + dlerror();
      return false;
    }
    out.handle = h;
    link_map* map = nullptr;
    out.path = dlinfo(h, RTLD_DI_LINKMAP, &map) == 0 && map ? map->l_name : name;
    return true;
  };
  for (const auto& soname : sonames) {
    if (attempt(soname)) return out;
  }
  for (const auto& dir : dirs) {
    for (const auto& soname : sonames) {
      if (attempt(dir + "/" + soname)) return out;
    }
  }
  out.error = "tried:" + tried;
  return out;
}

template <typename F>
bool bind(void* handle, const char* symbol, F& fn, std::string& error) {
  fn = reinterpret_cast<F>(dlsym(handle, symbol));
  if (fn == nullptr) {
    error += std::string(error.empty() ? "" : "; ") + "missing symbol " + symbol;
    return false;
  }
  return true;
}

const char* kInstallHint =
    "Install it with `pip install nvidia-cublas` (CUDA 13) or `pip install nvidia-cublas-cu12` "
    "(CUDA 12), or put the CUDA toolkit's lib64 directory on LD_LIBRARY_PATH.";
}  // namespace

void BlasLibraries::set_search_dirs(const std::vector<std::string>& dirs) {
  std::lock_guard<std::mutex> lock(dirs_mutex());
  search_dirs() = dirs;
}

const BlasLibraries& BlasLibraries::probe() {
  static const BlasLibraries libs = [] {
    BlasLibraries b;
    // cuBLASLt first: libcublas needs it, and finds the one already loaded by soname.
    Opened lt = open_library({"libcublasLt.so.13", "libcublasLt.so.12", "libcublasLt.so"});
    if (lt.handle != nullptr) {
      b.cublaslt_path = lt.path;
      std::string err;
      bool ok = bind(lt.handle, "cublasLtCreate", b.ltCreate, err);
      ok &= bind(lt.handle, "cublasLtDestroy", b.ltDestroy, err);
      ok &= bind(lt.handle, "cublasLtGetVersion", b.ltGetVersion, err);
      ok &= bind(lt.handle, "cublasLtMatmulDescCreate", b.ltDescCreate, err);
      ok &= bind(lt.handle, "cublasLtMatmulDescDestroy", b.ltDescDestroy, err);
      ok &= bind(lt.handle, "cublasLtMatmulDescSetAttribute", b.ltDescSetAttribute, err);
      ok &= bind(lt.handle, "cublasLtMatrixLayoutCreate", b.ltLayoutCreate, err);
      ok &= bind(lt.handle, "cublasLtMatrixLayoutDestroy", b.ltLayoutDestroy, err);
      ok &= bind(lt.handle, "cublasLtMatrixLayoutSetAttribute", b.ltLayoutSetAttribute, err);
      ok &= bind(lt.handle, "cublasLtMatmulPreferenceCreate", b.ltPrefCreate, err);
      ok &= bind(lt.handle, "cublasLtMatmulPreferenceDestroy", b.ltPrefDestroy, err);
      ok &= bind(lt.handle, "cublasLtMatmulPreferenceSetAttribute", b.ltPrefSetAttribute, err);
      ok &= bind(lt.handle, "cublasLtMatmulAlgoGetHeuristic", b.ltGetHeuristic, err);
      ok &= bind(lt.handle, "cublasLtMatmulAlgoConfigGetAttribute", b.ltAlgoConfigGetAttribute,
                 err);
      ok &= bind(lt.handle, "cublasLtMatmulAlgoConfigSetAttribute", b.ltAlgoConfigSetAttribute,
                 err);
      ok &= bind(lt.handle, "cublasLtMatmulAlgoInit", b.ltAlgoInit, err);
      ok &= bind(lt.handle, "cublasLtMatmulAlgoCheck", b.ltAlgoCheck, err);
      ok &= bind(lt.handle, "cublasLtMatmul", b.ltMatmul, err);
      b.lt_loaded = ok;
      b.lt_error = ok ? "" : lt.path + ": " + err;
      if (b.ltGetVersion) b.cublaslt_version = b.ltGetVersion();
    } else {
      b.lt_error = lt.error;
    }
    Opened cb = open_library({"libcublas.so.13", "libcublas.so.12", "libcublas.so"});
    if (cb.handle != nullptr) {
      b.cublas_path = cb.path;
      std::string err;
      bool ok = bind(cb.handle, "cublasCreate_v2", b.cublasCreate, err);
      ok &= bind(cb.handle, "cublasDestroy_v2", b.cublasDestroy, err);
      ok &= bind(cb.handle, "cublasSetStream_v2", b.cublasSetStream, err);
      ok &= bind(cb.handle, "cublasGetProperty", b.cublasGetProperty, err);
      ok &= bind(cb.handle, "cublasGemmEx", b.cublasGemmEx, err);
      ok &= bind(cb.handle, "cublasGemmStridedBatchedEx", b.cublasGemmStridedBatchedEx, err);
      b.cublas_loaded = ok;
      b.cublas_error = ok ? "" : cb.path + ": " + err;
      if (b.cublasGetProperty) {
        int major = 0, minor = 0, patch = 0;
        b.cublasGetProperty(MAJOR_VERSION, &major);
        b.cublasGetProperty(MINOR_VERSION, &minor);
        b.cublasGetProperty(PATCH_LEVEL, &patch);
        b.cublas_version = major * 10000 + minor * 100 + patch;
      }
    } else {
      b.cublas_error = cb.error;
    }
    // cuDNN only for the fingerprint: its version if a copy is loadable.
    Opened dnn = open_library({"libcudnn.so.9", "libcudnn.so.8", "libcudnn.so"});
    if (dnn.handle != nullptr) {
      blas::cudnnGetVersion_t get = nullptr;
      std::string err;
      if (bind(dnn.handle, "cudnnGetVersion", get, err)) b.cudnn_version = get();
    }
    return b;
  }();
  return libs;
}

const BlasLibraries& BlasLibraries::require_lt() const {
  if (!lt_loaded) {
    throw CudaError("cuBLASLt (libcublasLt.so.13 / .so.12) could not be loaded, so the "
                    "'cublasLt' matmul kernel cannot run. " + std::string(kInstallHint) +
                    " Details: " + lt_error);
  }
  return *this;
}

const BlasLibraries& BlasLibraries::require_cublas() const {
  if (!cublas_loaded) {
    throw CudaError("cuBLAS (libcublas.so.13 / .so.12) could not be loaded, so the 'cublas' "
                    "matmul kernel cannot run. " + std::string(kInstallHint) +
                    " Details: " + cublas_error);
  }
  return *this;
}

}  // namespace xrt
