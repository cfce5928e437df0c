// LayerNorm / RMSNorm on CUDA, written to run at the memory-bandwidth limit.
//
// Vectorised path (h a multiple of the 16-byte vector, 16-byte aligned pointers): a row is
// owned by a group of 1..32 warps; each thread loads its kVec 16-byte vectors of the row up
// front (all loads in flight at once), keeps them in registers, and the row is read from
// memory exactly once. Statistics are two-pass from registers (mean, then the sum of squared
// deviations) in float32: as cheap as one pass here and stable. Small rows put several
// groups in one block; groups reduce through warp shuffles and, across warps, shared memory
// and a named barrier of their own.
//
// The backward is persistent: a grid sized to the GPU's resident blocks walks the rows (all
// groups of a block step together, so their cross-warp sums use the block barrier), each
// thread accumulating dweight/dbias for its columns in float32 registers over all the rows
// it sees; one partial row per block goes to a workspace that a second small kernel reduces
// in a fixed order (deterministic results). Traffic is dy + x read once, dx written once.
//
// Generic path (any h and alignment): block-per-row kernels looping over global memory,
// plus a column kernel for dweight/dbias.
//
// Sizes: rows are 64-bit everywhere; h fits int32 (checked by the callers' launch).
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <mutex>
#include <vector>

#include "cuda/cuda_check.h"
#include "cuda/norms.h"
#include "xpuruntime/memory.h"

namespace xrt::cuda {

namespace {

// ---------------------------------------------------------------------------------------
// 16-byte vectors of T converted to and from float32.

template <typename T>
struct Vec;

template <>
struct Vec<float> {
  static constexpr int kElems = 4;
  __device__ __forceinline__ static void unpack(const uint4& v, float* f) {
    f[0] = __uint_as_float(v.x);
    f[1] = __uint_as_float(v.y);
    f[2] = __uint_as_float(v.z);
    f[3] = __uint_as_float(v.w);
  }
  __device__ __forceinline__ static uint4 pack(const float* f) {
    return make_uint4(__float_as_uint(f[0]), __float_as_uint(f[1]), __float_as_uint(f[2]),
                      __float_as_uint(f[3]));
  }
};

__device__ __forceinline__ float2 half2_bits_to_float2(unsigned bits) {
  __half2 h;
  static_assert(sizeof(h) == sizeof(bits), "half2 is 32 bits");
  memcpy(&h, &bits, sizeof bits);
  return __half22float2(h);
}
__device__ __forceinline__ unsigned float2_to_half2_bits(float a, float b) {
  const __half2 h = __floats2half2_rn(a, b);
  unsigned bits;
  memcpy(&bits, &h, sizeof bits);
  return bits;
}
__device__ __forceinline__ float2 bf162_bits_to_float2(unsigned bits) {
  __nv_bfloat162 h;
  static_assert(sizeof(h) == sizeof(bits), "bfloat162 is 32 bits");
  memcpy(&h, &bits, sizeof bits);
  return __bfloat1622float2(h);
}
__device__ __forceinline__ unsigned float2_to_bf162_bits(float a, float b) {
  const __nv_bfloat162 h = __floats2bfloat162_rn(a, b);
  unsigned bits;
  memcpy(&bits, &h, sizeof bits);
  return bits;
}

template <float2 (*kToFloat)(unsigned), unsigned (*kFromFloat)(float, float)>
struct Vec16Bit {
  static constexpr int kElems = 8;
  __device__ __forceinline__ static void unpack(const uint4& v, float* f) {
    const unsigned words[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      const float2 t = kToFloat(words[k]);
      f[2 * k] = t.x;
      f[2 * k + 1] = t.y;
    }
  }
  __device__ __forceinline__ static uint4 pack(const float* f) {
    return make_uint4(kFromFloat(f[0], f[1]), kFromFloat(f[2], f[3]), kFromFloat(f[4], f[5]),
                      kFromFloat(f[6], f[7]));
  }
};
template <>
struct Vec<__half> : Vec16Bit<half2_bits_to_float2, float2_to_half2_bits> {};
template <>
struct Vec<__nv_bfloat16> : Vec16Bit<bf162_bits_to_float2, float2_to_bf162_bits> {};

// Streamed once (x, dy, residual): evict-first. Reused by every row (weight, bias): cached.
__device__ __forceinline__ uint4 load_once(const void* p) {
  return __ldcs(static_cast<const uint4*>(p));
}
__device__ __forceinline__ uint4 load_reused(const void* p) {
  return __ldg(static_cast<const uint4*>(p));
}
__device__ __forceinline__ void store_vec(void* p, const uint4& v) { *static_cast<uint4*>(p) = v; }

// ---------------------------------------------------------------------------------------
// Row groups: `warps` consecutive warps of a block share one row.

struct Group {
  int index;   // group within the block
  int warp;    // warp within the group
  int lane;
  int warps;   // warps per group
  int thread;  // thread within the group
  int threads;
  // The group synchronises with __syncthreads: it is the whole block, or every group of the
  // block reaches each barrier together (lockstep loops).
  bool block_barrier;
};

__device__ __forceinline__ Group make_group(int warps_per_group, bool lockstep = false) {
  Group g;
  const int warp = static_cast<int>(threadIdx.x) >> 5;
  g.lane = static_cast<int>(threadIdx.x) & 31;
  g.warps = warps_per_group;
  g.index = warp / warps_per_group;
  g.warp = warp - g.index * warps_per_group;
  g.threads = warps_per_group * 32;
  g.thread = g.warp * 32 + g.lane;
  g.block_barrier = lockstep || g.threads == static_cast<int>(blockDim.x);
  return g;
}

__device__ __forceinline__ void group_barrier(const Group& g) {
  if (g.block_barrier) {
    __syncthreads();
  } else {
    // Named barrier 1 + group (barrier 0 is __syncthreads); at most 8 groups per block.
    asm volatile("bar.sync %0, %1;" ::"r"(g.index + 1), "r"(g.threads) : "memory");
  }
}

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
  for (int offset = 16; offset > 0; offset >>= 1) v += __shfl_xor_sync(0xffffffffu, v, offset);
  return v;
}

// Sum over the group; `slot` holds one float per warp of the group. A slot may be written
// again only after one more group barrier has passed (callers alternate slots).
__device__ __forceinline__ float group_sum(float v, float* slot, const Group& g) {
  v = warp_sum(v);
  if (g.warps == 1) return v;
  if (g.lane == 0) slot[g.warp] = v;
  group_barrier(g);
  float total = 0.0f;
  for (int k = 0; k < g.warps; ++k) total += slot[k];
  return total;
}

__device__ __forceinline__ float2 group_sum2(float a, float b, float2* slot, const Group& g) {
  a = warp_sum(a);
  b = warp_sum(b);
  if (g.warps == 1) return make_float2(a, b);
  if (g.lane == 0) slot[g.warp] = make_float2(a, b);
  group_barrier(g);
  float2 total = make_float2(0.0f, 0.0f);
  for (int k = 0; k < g.warps; ++k) {
    total.x += slot[k].x;
    total.y += slot[k].y;
  }
  return total;
}

// ---------------------------------------------------------------------------------------
// Parameters (passed by value).

struct ForwardParams {
  const void* x;
  const void* residual;
  const void* weight;
  const void* bias;
  void* y;
  void* sum;
  float* mean;
  float* rstd;
  long long rows;
  int h;
  int vectors;  // h / elements per vector
  float inv_h;
  float eps;
  int rms;
  int warps_per_row;
  int rows_per_block;
};

struct BackwardParams {
  const void* dy;
  const void* x;
  const void* weight;
  const float* mean;
  const float* rstd;
  const void* dsum;
  void* dx;
  float* dweight_partial;  // [partials][h] or null
  float* dbias_partial;    // [partials][h] or null
  long long rows;
  int h;
  int vectors;
  float inv_h;
  int rms;
  int warps_per_row;
  int rows_per_block;
  long long rows_per_chunk;  // generic column kernel
};

// ---------------------------------------------------------------------------------------
// Vectorised forward.

template <typename T, int kVec>
__global__ void __launch_bounds__(kVec >= 8 ? 512 : 256) norm_forward_vec(const ForwardParams p) {
  using V = Vec<T>;
  constexpr int E = V::kElems;
  extern __shared__ float scratch[];  // [rows_per_block][2][warps_per_row]
  const Group g = make_group(p.warps_per_row);
  float* slots = scratch + g.index * 2 * g.warps;
  const long long stride = static_cast<long long>(gridDim.x) * p.rows_per_block;
  int iteration = 0;
  for (long long row = static_cast<long long>(blockIdx.x) * p.rows_per_block + g.index;
       row < p.rows; row += stride, ++iteration) {
    const long long offset = row * p.h;
    const T* xr = static_cast<const T*>(p.x) + offset;
    uint4 v[kVec];
#pragma unroll
    for (int i = 0; i < kVec; ++i) {
      const int c = i * g.threads + g.thread;
      v[i] = c < p.vectors ? load_once(xr + c * E) : make_uint4(0, 0, 0, 0);
    }
    if (p.residual != nullptr) {
      const T* rr = static_cast<const T*>(p.residual) + offset;
      T* sr = static_cast<T*>(p.sum) + offset;
#pragma unroll
      for (int i = 0; i < kVec; ++i) {
        const int c = i * g.threads + g.thread;
        if (c < p.vectors) {
          float a[E], b[E];
          V::unpack(v[i], a);
          V::unpack(load_once(rr + c * E), b);
#pragma unroll
          for (int e = 0; e < E; ++e) a[e] += b[e];
          v[i] = V::pack(a);  // normalise the stored (rounded) sum, as the backward sees it
          store_vec(sr + c * E, v[i]);
        }
      }
    }
    float mean = 0.0f;
    if (!p.rms) {
      float s = 0.0f;
#pragma unroll
      for (int i = 0; i < kVec; ++i) {
        float f[E];
        V::unpack(v[i], f);  // padding vectors are zero
#pragma unroll
        for (int e = 0; e < E; ++e) s += f[e];
      }
      mean = group_sum(s, slots, g) * p.inv_h;
    }
    float q = 0.0f;
#pragma unroll
    for (int i = 0; i < kVec; ++i) {
      const int c = i * g.threads + g.thread;
      if (c < p.vectors) {
        float f[E];
        V::unpack(v[i], f);
#pragma unroll
        for (int e = 0; e < E; ++e) {
          const float d = f[e] - mean;
          q += d * d;
        }
      }
    }
    // LayerNorm alternates slots by reduction (two barriers per row); RMSNorm has one
    // reduction per row and alternates by row.
    float* var_slot = slots + g.warps * (p.rms ? (iteration & 1) : 1);
    const float rstd = rsqrtf(group_sum(q, var_slot, g) * p.inv_h + p.eps);
    if (g.thread == 0) {
      if (p.mean != nullptr) p.mean[row] = mean;
      if (p.rstd != nullptr) p.rstd[row] = rstd;
    }
    T* yr = static_cast<T*>(p.y) + offset;
#pragma unroll
    for (int i = 0; i < kVec; ++i) {
      const int c = i * g.threads + g.thread;
      if (c < p.vectors) {
        float f[E];
        V::unpack(v[i], f);
#pragma unroll
        for (int e = 0; e < E; ++e) f[e] = (f[e] - mean) * rstd;
        if (p.weight != nullptr) {
          float w[E];
          V::unpack(load_reused(static_cast<const T*>(p.weight) + c * E), w);
#pragma unroll
          for (int e = 0; e < E; ++e) f[e] *= w[e];
        }
        if (p.bias != nullptr) {
          float b[E];
          V::unpack(load_reused(static_cast<const T*>(p.bias) + c * E), b);
#pragma unroll
          for (int e = 0; e < E; ++e) f[e] += b[e];
        }
        store_vec(yr + c * E, V::pack(f));
      }
    }
  }
}

// ---------------------------------------------------------------------------------------
// Vectorised backward (persistent).

// One partial row per block of a thread's column accumulators. Groups of a block cover the
// same columns, so blocks of several (small) rows sum them through shared memory first.
// `acc` is indexed with compile-time indices only, so it stays in registers.
template <int kVec, int E>
__device__ __forceinline__ void write_partial(const float (&acc)[kVec * E], float* out,
                                              const BackwardParams& p, const Group& g,
                                              float* scratch) {
  if (out == nullptr) return;
  const long long part = static_cast<long long>(blockIdx.x) * p.h;
  if (p.rows_per_block == 1) {
#pragma unroll
    for (int i = 0; i < kVec; ++i) {
      const int c = i * g.threads + g.thread;
      if (c < p.vectors) {
#pragma unroll
        for (int e = 0; e < E; ++e) out[part + c * E + e] = acc[i * E + e];
      }
    }
    return;
  }
  __syncthreads();  // every group is done with the reduction slots (and the previous gather)
#pragma unroll
  for (int i = 0; i < kVec; ++i) {
    const int c = i * g.threads + g.thread;
    if (c < p.vectors) {
#pragma unroll
      for (int e = 0; e < E; ++e) scratch[g.index * p.h + c * E + e] = acc[i * E + e];
    }
  }
  __syncthreads();
  for (int col = static_cast<int>(threadIdx.x); col < p.h; col += static_cast<int>(blockDim.x)) {
    float total = 0.0f;
    for (int k = 0; k < p.rows_per_block; ++k) total += scratch[k * p.h + col];
    out[part + col] = total;
  }
}

template <typename T, int kVec, bool kRms>
__global__ void __launch_bounds__(512) norm_backward_vec(const BackwardParams p) {
  using V = Vec<T>;
  constexpr int E = V::kElems;
  // [rows_per_block][2 alternating][warps_per_row] float2; reused for the partials after.
  extern __shared__ float scratch[];
  // Lockstep: every group runs the block's iteration count (a group past the last row idles)
  // and meets the others at __syncthreads. With a named barrier per group, groups ran
  // different iteration counts into write_partial's block barriers, and compute-sanitizer's
  // racecheck reported the partial-sum gather there as racy; block barriers only are
  // unambiguous and cost little in a kernel that reduces once per row.
  const Group g = make_group(p.warps_per_row, /*lockstep=*/true);
  float2* slots = reinterpret_cast<float2*>(scratch) + g.index * 2 * g.warps;
  float acc_w[kVec * E];
  float acc_b[kRms ? 1 : kVec * E];
#pragma unroll
  for (int k = 0; k < kVec * E; ++k) acc_w[k] = 0.0f;
#pragma unroll
  for (int k = 0; k < (kRms ? 1 : kVec * E); ++k) acc_b[k] = 0.0f;

  const long long stride = static_cast<long long>(gridDim.x) * p.rows_per_block;
  int iteration = 0;
  for (long long first = static_cast<long long>(blockIdx.x) * p.rows_per_block; first < p.rows;
       first += stride, ++iteration) {
    const long long row = first + g.index;
    const bool active = row < p.rows;
    const long long offset = active ? row * p.h : 0;
    const T* dyr = static_cast<const T*>(p.dy) + offset;
    const T* xr = static_cast<const T*>(p.x) + offset;
    uint4 dv[kVec], xv[kVec];
#pragma unroll
    for (int i = 0; i < kVec; ++i) {
      const int c = i * g.threads + g.thread;
      const bool valid = active && c < p.vectors;
      dv[i] = valid ? load_once(dyr + c * E) : make_uint4(0, 0, 0, 0);
      xv[i] = valid ? load_once(xr + c * E) : make_uint4(0, 0, 0, 0);
    }
    const float mu = kRms || !active ? 0.0f : __ldg(p.mean + row);
    const float rs = active ? __ldg(p.rstd + row) : 0.0f;
    float s_xg = 0.0f, s_g = 0.0f;  // sums of xhat * (w * dy) and of w * dy
#pragma unroll
    for (int i = 0; i < kVec; ++i) {
      const int c = i * g.threads + g.thread;
      if (active && c < p.vectors) {
        float d[E], f[E];
        V::unpack(dv[i], d);
        V::unpack(xv[i], f);
        if (p.weight != nullptr) {
          float w[E];
          V::unpack(load_reused(static_cast<const T*>(p.weight) + c * E), w);
#pragma unroll
          for (int e = 0; e < E; ++e) d[e] *= w[e];
        }
#pragma unroll
        for (int e = 0; e < E; ++e) {
          s_xg += (f[e] - mu) * rs * d[e];
          if constexpr (!kRms) s_g += d[e];
        }
      }
    }
    const float2 sums = group_sum2(s_xg, s_g, slots + (iteration & 1) * g.warps, g);
    const float c_xg = sums.x * p.inv_h;
    const float c_g = kRms ? 0.0f : sums.y * p.inv_h;
    T* dxr = static_cast<T*>(p.dx) + offset;
#pragma unroll
    for (int i = 0; i < kVec; ++i) {
      const int c = i * g.threads + g.thread;
      if (active && c < p.vectors) {
        float d[E], f[E], w[E];
        V::unpack(dv[i], d);
        V::unpack(xv[i], f);
        if (p.weight != nullptr) {
          V::unpack(load_reused(static_cast<const T*>(p.weight) + c * E), w);
        } else {
#pragma unroll
          for (int e = 0; e < E; ++e) w[e] = 1.0f;
        }
        float o[E];
#pragma unroll
        for (int e = 0; e < E; ++e) {
          const float xhat = (f[e] - mu) * rs;
          acc_w[i * E + e] += d[e] * xhat;
          if constexpr (!kRms) acc_b[i * E + e] += d[e];
          o[e] = rs * (d[e] * w[e] - xhat * c_xg - c_g);
        }
        if (p.dsum != nullptr) {
          float s[E];
          V::unpack(load_once(static_cast<const T*>(p.dsum) + offset + c * E), s);
#pragma unroll
          for (int e = 0; e < E; ++e) o[e] += s[e];
        }
        store_vec(dxr + c * E, V::pack(o));
      }
    }
  }

  write_partial<kVec, E>(acc_w, p.dweight_partial, p, g, scratch);
  if constexpr (!kRms) write_partial<kVec, E>(acc_b, p.dbias_partial, p, g, scratch);
}

// ---------------------------------------------------------------------------------------
// Generic kernels: one 256-thread block per row, any width and alignment.

constexpr int kGenericThreads = 256;

template <typename T>
__global__ void __launch_bounds__(kGenericThreads) norm_forward_generic(const ForwardParams p) {
  __shared__ float slots[2][kGenericThreads / 32];
  const Group g = make_group(kGenericThreads / 32);
  int iteration = 0;
  for (long long row = blockIdx.x; row < p.rows; row += gridDim.x, ++iteration) {
    const long long offset = row * p.h;
    const T* xr = static_cast<const T*>(p.x) + offset;
    const T* rr = p.residual != nullptr ? static_cast<const T*>(p.residual) + offset : nullptr;
    T* sr = p.residual != nullptr ? static_cast<T*>(p.sum) + offset : nullptr;
    // Each thread reads back only the sums it wrote itself: no barrier needed.
    auto value = [&](int i) {
      return static_cast<float>(rr != nullptr ? sr[i] : xr[i]);
    };
    float s = 0.0f;
    for (int i = g.thread; i < p.h; i += kGenericThreads) {
      float v = static_cast<float>(xr[i]);
      if (rr != nullptr) {
        const T rounded = static_cast<T>(v + static_cast<float>(rr[i]));
        sr[i] = rounded;
        v = static_cast<float>(rounded);
      }
      s += v;
    }
    const float mean = p.rms ? 0.0f : group_sum(s, slots[0], g) * p.inv_h;
    float q = 0.0f;
    for (int i = g.thread; i < p.h; i += kGenericThreads) {
      const float d = value(i) - mean;
      q += d * d;
    }
    const float rstd =
        rsqrtf(group_sum(q, slots[p.rms ? (iteration & 1) : 1], g) * p.inv_h + p.eps);
    if (g.thread == 0) {
      if (p.mean != nullptr) p.mean[row] = mean;
      if (p.rstd != nullptr) p.rstd[row] = rstd;
    }
    T* yr = static_cast<T*>(p.y) + offset;
    const T* w = static_cast<const T*>(p.weight);
    const T* b = static_cast<const T*>(p.bias);
    for (int i = g.thread; i < p.h; i += kGenericThreads) {
      float o = (value(i) - mean) * rstd;
      if (w != nullptr) o *= static_cast<float>(w[i]);
      if (b != nullptr) o += static_cast<float>(b[i]);
      yr[i] = static_cast<T>(o);
    }
  }
}

template <typename T>
__global__ void __launch_bounds__(kGenericThreads) norm_backward_dx_generic(const BackwardParams p) {
  __shared__ float2 slots[2][kGenericThreads / 32];
  const Group g = make_group(kGenericThreads / 32);
  const T* w = static_cast<const T*>(p.weight);
  int iteration = 0;
  for (long long row = blockIdx.x; row < p.rows; row += gridDim.x, ++iteration) {
    const long long offset = row * p.h;
    const T* dyr = static_cast<const T*>(p.dy) + offset;
    const T* xr = static_cast<const T*>(p.x) + offset;
    const float mu = p.rms ? 0.0f : p.mean[row];
    const float rs = p.rstd[row];
    float s_xg = 0.0f, s_g = 0.0f;
    for (int i = g.thread; i < p.h; i += kGenericThreads) {
      float d = static_cast<float>(dyr[i]);
      if (w != nullptr) d *= static_cast<float>(w[i]);
      s_xg += (static_cast<float>(xr[i]) - mu) * rs * d;
      s_g += d;
    }
    const float2 sums = group_sum2(s_xg, s_g, slots[iteration & 1], g);
    const float c_xg = sums.x * p.inv_h;
    const float c_g = p.rms ? 0.0f : sums.y * p.inv_h;
    T* dxr = static_cast<T*>(p.dx) + offset;
    const T* dsr = p.dsum != nullptr ? static_cast<const T*>(p.dsum) + offset : nullptr;
    for (int i = g.thread; i < p.h; i += kGenericThreads) {
      float d = static_cast<float>(dyr[i]);
      if (w != nullptr) d *= static_cast<float>(w[i]);
      const float xhat = (static_cast<float>(xr[i]) - mu) * rs;
      float o = rs * (d - xhat * c_xg - c_g);
      if (dsr != nullptr) o += static_cast<float>(dsr[i]);
      dxr[i] = static_cast<T>(o);
    }
  }
}

// dweight/dbias partial sums over chunks of rows: block (32 columns, 8 row lanes),
// grid (column tiles, chunks).
template <typename T>
__global__ void __launch_bounds__(256) norm_backward_columns_generic(const BackwardParams p) {
  __shared__ float tile[2][8][33];
  const int col = static_cast<int>(blockIdx.x) * 32 + static_cast<int>(threadIdx.x);
  const long long first = static_cast<long long>(blockIdx.y) * p.rows_per_chunk;
  const long long last = min(p.rows, first + p.rows_per_chunk);
  float aw = 0.0f, ab = 0.0f;
  if (col < p.h) {
    for (long long row = first + threadIdx.y; row < last; row += 8) {
      const long long at = row * p.h + col;
      const float d = static_cast<float>(static_cast<const T*>(p.dy)[at]);
      const float mu = p.rms ? 0.0f : p.mean[row];
      aw += d * (static_cast<float>(static_cast<const T*>(p.x)[at]) - mu) * p.rstd[row];
      ab += d;
    }
  }
  tile[0][threadIdx.y][threadIdx.x] = aw;
  tile[1][threadIdx.y][threadIdx.x] = ab;
  __syncthreads();
  if (threadIdx.y == 0 && col < p.h) {
    float tw = 0.0f, tb = 0.0f;
    for (int k = 0; k < 8; ++k) {
      tw += tile[0][k][threadIdx.x];
      tb += tile[1][k][threadIdx.x];
    }
    const long long at = static_cast<long long>(blockIdx.y) * p.h + col;
    if (p.dweight_partial != nullptr) p.dweight_partial[at] = tw;
    if (p.dbias_partial != nullptr) p.dbias_partial[at] = tb;
  }
}

// out[c] = sum over partial rows of partial[r][c], in a fixed order. blockIdx.y picks
// (dweight, dbias). Block (32 columns, 32 row lanes); each lane keeps four independent sums
// so that its loads are in flight together (this kernel is latency-bound otherwise).
constexpr int kFinalizeLanes = 32;

template <typename T>
__global__ void __launch_bounds__(32 * kFinalizeLanes)
    norm_partials_finalize(const float* partial_w, const float* partial_b, int partials, int h,
                           T* out_w, T* out_b) {
  __shared__ float tile[kFinalizeLanes][33];
  const float* partial = blockIdx.y == 0 ? partial_w : partial_b;
  T* out = blockIdx.y == 0 ? out_w : out_b;
  const int col = static_cast<int>(blockIdx.x) * 32 + static_cast<int>(threadIdx.x);
  float s[4] = {0.0f, 0.0f, 0.0f, 0.0f};
  if (partial != nullptr && col < h) {
    int r = static_cast<int>(threadIdx.y);
    for (; r + 3 * kFinalizeLanes < partials; r += 4 * kFinalizeLanes) {
#pragma unroll
      for (int k = 0; k < 4; ++k) {
        s[k] += partial[static_cast<long long>(r + k * kFinalizeLanes) * h + col];
      }
    }
    for (; r < partials; r += kFinalizeLanes) s[0] += partial[static_cast<long long>(r) * h + col];
  }
  tile[threadIdx.y][threadIdx.x] = (s[0] + s[1]) + (s[2] + s[3]);
  __syncthreads();
  if (threadIdx.y == 0 && partial != nullptr && col < h) {
    float total = 0.0f;
    for (int k = 0; k < kFinalizeLanes; ++k) total += tile[k][threadIdx.x];
    out[col] = static_cast<T>(total);
  }
}

// ---------------------------------------------------------------------------------------
// Host side.

int elements_per_vector(DType dtype) { return 16 / static_cast<int>(dtype_size(dtype)); }

bool aligned16(const void* p) { return (reinterpret_cast<std::uintptr_t>(p) & 15u) == 0; }

struct Shape {
  int vec;
  int warps;
  int rows_per_block;
  int threads() const { return warps * rows_per_block * 32; }
};

int round_up_pow2(int v) {
  int p = 1;
  while (p < v) p <<= 1;
  return p;
}

// Small rows share a block: 8 one-warp rows (256 threads), 2 two-warp rows (128). One-warp
// rows are short-lived (a 2 KB bf16 row at h = 1024), so fewer, larger blocks keep the SMs
// fed: measured on an H100, bf16 LayerNorm at h = 1024 went from 83-85% to 92.5% of copy
// bandwidth with 8 rows per block instead of 4 (RMSNorm 87% to 93%).
int forward_rows_per_block(int warps) { return warps == 1 ? 8 : warps == 2 ? 2 : 1; }

// Forward: up to 8 vectors (128 bytes) per thread; rows of up to 256 vectors take one warp
// (8 rows per block), longer rows as many warps as 8 vectors per thread need (<= 16, so
// float32 rows up to 16384 and 16-bit rows up to 32768 elements; longer ones go generic).
bool forward_shape(int vectors, Shape* s) {
  if (vectors <= 256) {
    s->vec = std::min(8, round_up_pow2((vectors + 31) / 32));
    s->warps = 1;
  } else {
    s->vec = 8;
    s->warps = (vectors + 255) / 256;
    if (s->warps > 16) return false;
  }
  s->rows_per_block = forward_rows_per_block(s->warps);
  return true;
}

// Backward: 16 elements per thread (two float32 accumulators each, for dweight and dbias)
// while a row fits 16 warps, else twice that; rows longer than 16 warps x 8 vectors take
// the generic path.
bool backward_shape(int vectors, int elems, Shape* s) {
  const int target = 16 / elems;  // vectors per thread for 16 elements
  const int max_vec = elems == 4 ? 8 : 4;
  s->vec = std::min(target, round_up_pow2((vectors + 31) / 32));
  s->warps = (vectors + 32 * s->vec - 1) / (32 * s->vec);
  while (s->warps > 16 && s->vec < max_vec) {
    s->vec *= 2;
    s->warps = (vectors + 32 * s->vec - 1) / (32 * s->vec);
  }
  if (s->warps > 16) return false;
  s->rows_per_block = 1;  // plan_backward packs short rows into larger blocks
  return true;
}

template <typename T>
const void* forward_kernel(int vec) {
  switch (vec) {
    case 1: return reinterpret_cast<const void*>(&norm_forward_vec<T, 1>);
    case 2: return reinterpret_cast<const void*>(&norm_forward_vec<T, 2>);
    case 4: return reinterpret_cast<const void*>(&norm_forward_vec<T, 4>);
    default: return reinterpret_cast<const void*>(&norm_forward_vec<T, 8>);
  }
}

template <typename T, bool kRms>
const void* backward_kernel(int vec) {
  switch (vec) {
    case 1: return reinterpret_cast<const void*>(&norm_backward_vec<T, 1, kRms>);
    case 2: return reinterpret_cast<const void*>(&norm_backward_vec<T, 2, kRms>);
    case 4: return reinterpret_cast<const void*>(&norm_backward_vec<T, 4, kRms>);
    default:
      // 8 vectors of float32: only float32 rows longer than 8192 get here.
      return reinterpret_cast<const void*>(&norm_backward_vec<float, 8, kRms>);
  }
}

struct Kernels {
  const void* forward_vec;
  const void* forward_generic;
  const void* backward_vec;
  const void* backward_dx_generic;
  const void* backward_columns_generic;
  const void* finalize;
};

template <typename T>
Kernels kernels_for(int forward_vec, int backward_vec, bool rms) {
  return {forward_kernel<T>(forward_vec),
          reinterpret_cast<const void*>(&norm_forward_generic<T>),
          rms ? backward_kernel<T, true>(backward_vec) : backward_kernel<T, false>(backward_vec),
          reinterpret_cast<const void*>(&norm_backward_dx_generic<T>),
          reinterpret_cast<const void*>(&norm_backward_columns_generic<T>),
          reinterpret_cast<const void*>(&norm_partials_finalize<T>)};
}

Kernels kernels_for(DType dtype, int forward_vec, int backward_vec, bool rms) {
  switch (dtype) {
    case DType::F32: return kernels_for<float>(forward_vec, backward_vec, rms);
    case DType::F16: return kernels_for<__half>(forward_vec, backward_vec, rms);
    case DType::BF16: return kernels_for<__nv_bfloat16>(forward_vec, backward_vec, rms);
    default:
      throw InvalidArgumentError(std::string("CUDA norm kernels take float32, float16 or "
                                             "bfloat16, got ") + dtype_name(dtype));
  }
}

struct DeviceInfo {
  int device;
  int sms;
};

DeviceInfo current_device() {
  int device = 0;
  XRT_CUDA_CHECK(cudaGetDevice(&device));
  static std::mutex mutex;
  static std::vector<int> sms;  // by device index, 0 = not asked yet
  std::lock_guard<std::mutex> lock(mutex);
  if (static_cast<int>(sms.size()) <= device) sms.resize(device + 1, 0);
  if (sms[device] == 0) {
    XRT_CUDA_CHECK(cudaDeviceGetAttribute(&sms[device], cudaDevAttrMultiProcessorCount, device));
  }
  return {device, sms[device]};
}

// Resident blocks per SM of a persistent kernel, asked of the runtime once per launch shape.
int blocks_per_sm(const void* kernel, int device, int threads, std::size_t smem) {
  struct Entry {
    const void* kernel;
    int device, threads;
    std::size_t smem;
    int blocks;
  };
  static std::mutex mutex;
  static std::vector<Entry> cache;
  std::lock_guard<std::mutex> lock(mutex);
  for (const auto& e : cache) {
    if (e.kernel == kernel && e.device == device && e.threads == threads && e.smem == smem) {
      return e.blocks;
    }
  }
  int blocks = 0;
  XRT_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&blocks, kernel, threads, smem));
  cache.push_back({kernel, device, threads, smem, std::max(blocks, 1)});
  return cache.back().blocks;
}

void launch(const void* kernel, dim3 grid, dim3 block, std::size_t smem, cudaStream_t stream,
            void* params) {
  void* args[] = {params};
  XRT_CUDA_CHECK(cudaLaunchKernel(kernel, grid, block, args, smem, stream));
}

constexpr long long kMaxGrid = 0x7fffffffLL;

unsigned grid_for(long long groups) {
  return static_cast<unsigned>(std::min<long long>(std::max<long long>(groups, 1), kMaxGrid));
}

// A float32 workspace from the pool, returned to it (ordered on the stream) on scope exit.
class Workspace {
 public:
  Workspace(std::size_t floats, int device, void* stream)
      : ptr_(floats == 0 ? nullptr
                         : CachingAllocator::instance().allocate(floats * sizeof(float), device,
                                                                 stream)) {}
  ~Workspace() {
    if (ptr_ != nullptr) CachingAllocator::instance().free(ptr_);
  }
  Workspace(const Workspace&) = delete;
  Workspace& operator=(const Workspace&) = delete;
  float* data() const { return static_cast<float*>(ptr_); }

 private:
  void* ptr_;
};

// dweight/dbias = column sums of the partial rows (blockIdx.y: 0 dweight, 1 dbias).
void finalize(const void* kernel, const BackwardParams& p, int partials,
              const NormBackwardArgs& a, bool want_b, cudaStream_t stream) {
  const float* partial_w = p.dweight_partial;
  const float* partial_b = p.dbias_partial;
  int h = p.h;
  void* out_w = a.dweight;
  void* out_b = want_b ? a.dbias : nullptr;
  void* args[] = {&partial_w, &partial_b, &partials, &h, &out_w, &out_b};
  const dim3 grid(static_cast<unsigned>((h + 31) / 32), want_b ? 2 : 1);
  XRT_CUDA_CHECK(cudaLaunchKernel(kernel, grid, dim3(32, kFinalizeLanes), args, 0, stream));
}

}  // namespace

NormLaunch norm_forward(const NormForwardArgs& a, void* stream) {
  NormLaunch result;
  result.cuda = true;
  if (a.rows == 0 || a.h == 0) return result;
  const int h = static_cast<int>(a.h);
  const int elems = elements_per_vector(a.dtype);
  const bool rms = a.kind == NormKind::RMSNorm;
  ForwardParams p{a.x,
                  a.residual,
                  a.weight,
                  a.bias,
                  a.y,
                  a.sum,
                  static_cast<float*>(a.mean),
                  static_cast<float*>(a.rstd),
                  a.rows,
                  h,
                  h / elems,
                  1.0f / static_cast<float>(h),
                  static_cast<float>(a.eps),
                  rms ? 1 : 0,
                  0,
                  0};
  Shape shape{};
  const bool vectorised = h % elems == 0 && forward_shape(h / elems, &shape) &&
                          aligned16(a.x) && aligned16(a.y) && aligned16(a.weight) &&
                          aligned16(a.bias) && aligned16(a.residual) && aligned16(a.sum);
  const Kernels k = kernels_for(a.dtype, vectorised ? shape.vec : 8, 1, rms);
  auto s = static_cast<cudaStream_t>(stream);
  if (vectorised) {
    p.warps_per_row = shape.warps;
    p.rows_per_block = shape.rows_per_block;
    const long long groups = (a.rows + shape.rows_per_block - 1) / shape.rows_per_block;
    const std::size_t smem = sizeof(float) * 2 * shape.warps * shape.rows_per_block;
    const unsigned grid = grid_for(groups);
    launch(k.forward_vec, grid, shape.threads(), smem, s, &p);
    result.vectorised = true;
    result.vectors_per_thread = shape.vec;
    result.warps_per_row = shape.warps;
    result.rows_per_block = shape.rows_per_block;
    result.blocks = grid;
  } else {
    p.warps_per_row = kGenericThreads / 32;
    p.rows_per_block = 1;
    const unsigned grid = grid_for(a.rows);
    launch(k.forward_generic, grid, kGenericThreads, 0, s, &p);
    result.warps_per_row = kGenericThreads / 32;
    result.rows_per_block = 1;
    result.blocks = grid;
  }
  return result;
}

namespace {
// Shared memory of a backward block: the reduction slots, or the gather of its groups'
// accumulators at the end when it holds several rows (the larger; they are not live together).
std::size_t backward_smem(const Shape& shape, int h) {
  const std::size_t slots = sizeof(float2) * 2 * shape.warps * shape.rows_per_block;
  const std::size_t gather =
      shape.rows_per_block > 1 ? sizeof(float) * shape.rows_per_block * h : 0;
  return std::max(slots, gather);
}

// How a backward call runs: the vectorised persistent kernel (grid = resident blocks, one
// partial row each) or the generic kernels (dx per row, dweight/dbias over row chunks).
struct BackwardPlan {
  bool vectorised = false;
  Shape shape{};
  std::size_t smem = 0;
  long long grid = 0;      // blocks of the dx kernel
  long long partials = 0;  // partial rows per accumulator
  long long tiles = 0;     // generic column kernel: tiles of 32 columns
  int accumulators = 0;    // dweight and/or dbias
  Kernels kernels{};
};

BackwardPlan plan_backward(const NormBackwardArgs& a, const DeviceInfo& dev, bool aligned) {
  BackwardPlan plan;
  const int h = static_cast<int>(a.h);
  const int elems = elements_per_vector(a.dtype);
  const bool rms = a.kind == NormKind::RMSNorm;
  plan.accumulators = (a.dweight != nullptr ? 1 : 0) + (a.dbias != nullptr && !rms ? 1 : 0);
  plan.vectorised = aligned && h % elems == 0 && backward_shape(h / elems, elems, &plan.shape);
  plan.kernels = kernels_for(a.dtype, 8, plan.vectorised ? plan.shape.vec : 1, rms);
  if (plan.vectorised) {
    // A persistent block writes one partial dweight/dbias row, so short rows share blocks:
    // of the block sizes up to 512 threads, the one keeping the most threads resident per
    // SM, and of those the largest (fewest blocks, fewest partial rows).
    Shape& shape = plan.shape;
    int best_threads = 0;
    for (int groups = 1; groups * shape.warps <= 16 && groups <= 15; ++groups) {
      Shape candidate = shape;
      candidate.rows_per_block = groups;
      const std::size_t smem = backward_smem(candidate, h);
      const int resident =
          blocks_per_sm(plan.kernels.backward_vec, dev.device, candidate.threads(), smem);
      if (resident * candidate.threads() >= best_threads) {
        best_threads = resident * candidate.threads();
        plan.shape.rows_per_block = groups;
        plan.smem = smem;
        plan.grid = resident;  // per SM, for now
      }
    }
    const long long groups = (a.rows + shape.rows_per_block - 1) / shape.rows_per_block;
    plan.grid = std::max<long long>(1, std::min<long long>(groups, plan.grid * dev.sms));
    plan.partials = plan.grid;
  } else {
    plan.grid = grid_for(a.rows);
    plan.tiles = (h + 31) / 32;
    const long long per_wave = std::max<long long>(1, 4LL * dev.sms / plan.tiles);
    plan.partials = std::max<long long>(1, std::min<long long>((a.rows + 7) / 8, per_wave));
  }
  if (plan.accumulators == 0) plan.partials = 0;
  return plan;
}

std::size_t workspace_bytes(const BackwardPlan& plan, std::int64_t h) {
  return sizeof(float) * static_cast<std::size_t>(plan.partials) * plan.accumulators *
         static_cast<std::size_t>(h);
}
}  // namespace

std::size_t norm_backward_workspace_bytes(const NormBackwardArgs& a) {
  if (a.h == 0) return 0;
  const DeviceInfo dev = current_device();
  // Independent of the pointers: the larger of the vectorised and the generic plan.
  return std::max(workspace_bytes(plan_backward(a, dev, true), a.h),
                  workspace_bytes(plan_backward(a, dev, false), a.h));
}

NormLaunch norm_backward(const NormBackwardArgs& a, void* stream) {
  NormLaunch result;
  result.cuda = true;
  if (a.h == 0) return result;
  const int h = static_cast<int>(a.h);
  const bool rms = a.kind == NormKind::RMSNorm;
  const bool want_b = a.dbias != nullptr && !rms;
  auto s = static_cast<cudaStream_t>(stream);
  const DeviceInfo dev = current_device();
  const bool aligned = aligned16(a.dy) && aligned16(a.x) && aligned16(a.weight) &&
                       aligned16(a.dsum) && aligned16(a.dx);
  const BackwardPlan plan = plan_backward(a, dev, aligned);
  const std::size_t needed = workspace_bytes(plan, a.h);
  if (a.workspace != nullptr && a.workspace_bytes < needed) {
    throw InvalidArgumentError("norm backward: the workspace has " +
                               std::to_string(a.workspace_bytes) + " bytes, this call needs " +
                               std::to_string(needed) + " (see norm_backward_workspace_bytes)");
  }
  Workspace pooled(a.workspace != nullptr ? 0 : needed / sizeof(float), dev.device, stream);
  float* workspace = a.workspace != nullptr ? static_cast<float*>(a.workspace) : pooled.data();
  BackwardParams p{a.dy,
                   a.x,
                   a.weight,
                   static_cast<const float*>(a.mean),
                   static_cast<const float*>(a.rstd),
                   a.dsum,
                   a.dx,
                   a.dweight != nullptr ? workspace : nullptr,
                   nullptr,
                   a.rows,
                   h,
                   h / elements_per_vector(a.dtype),
                   1.0f / static_cast<float>(h),
                   rms ? 1 : 0,
                   plan.vectorised ? plan.shape.warps : kGenericThreads / 32,
                   plan.vectorised ? plan.shape.rows_per_block : 1,
                   0};
  if (want_b) p.dbias_partial = workspace + (a.dweight != nullptr ? plan.partials * h : 0);
  result.vectorised = plan.vectorised;
  result.vectors_per_thread = plan.vectorised ? plan.shape.vec : 0;
  result.warps_per_row = p.warps_per_row;
  result.rows_per_block = p.rows_per_block;
  result.blocks = plan.grid;
  const Kernels& k = plan.kernels;
  if (plan.vectorised) {
    if (a.rows > 0) {
      launch(k.backward_vec, static_cast<unsigned>(plan.grid), plan.shape.threads(), plan.smem, s,
             &p);
    } else if (plan.accumulators > 0) {  // no rows: the sums are zero
      XRT_CUDA_CHECK(cudaMemsetAsync(workspace, 0, needed, s));
    }
  } else {
    // Generic: dx per row, then dweight/dbias over chunks of rows.
    if (a.rows > 0) {
      launch(k.backward_dx_generic, static_cast<unsigned>(plan.grid), kGenericThreads, 0, s, &p);
    }
    if (plan.accumulators > 0) {
      p.rows_per_chunk = std::max<long long>(1, (a.rows + plan.partials - 1) / plan.partials);
      launch(k.backward_columns_generic,
             dim3(static_cast<unsigned>(plan.tiles), static_cast<unsigned>(plan.partials)),
             dim3(32, 8), 0, s, &p);
    }
  }
  if (plan.accumulators > 0) finalize(k.finalize, p, static_cast<int>(plan.partials), a, want_b, s);
  return result;
}

}  // namespace xrt::cuda
