/*
 * hip_runtime.h stand-in for device-only gfx942 builds of a peer's HIP source (regress/emu/peers):
 * clang-19 -nogpuinc has no ROCm headers, so this names the HIP spellings such a source uses in
 * terms of clang builtins. Device code gets real semantics; host code only has to type-check,
 * since --cuda-device-only never generates it. Written for this project, not copied from ROCm.
 */
#pragma once
#include <cstddef>
#include <cstdint>

#define __global__ __attribute__((global))
#define __device__ __attribute__((device))
#define __host__ __attribute__((host))
#define __shared__ __attribute__((shared))
#define __constant__ __attribute__((constant))
#define __forceinline__ inline __attribute__((always_inline))
/* HIP's second bound is the minimum number of waves per execution unit. */
#define __launch_bounds__(threads, ...) \
  __attribute__((amdgpu_flat_work_group_size(1, threads) __VA_OPT__(, amdgpu_waves_per_eu(__VA_ARGS__))))

/* threadIdx / blockIdx / blockDim / gridDim; grid sizes come from the code-object-v5 hidden
 * kernel arguments (hidden_block_count_{x,y,z} at the start of the implicit argument block). */
#define RA_HIP_AXES(F)                                                                       \
  __declspec(property(get = F##_x)) unsigned x;                                              \
  __declspec(property(get = F##_y)) unsigned y;                                              \
  __declspec(property(get = F##_z)) unsigned z
struct ra_thread_idx {
  __device__ unsigned g_x() const { return __builtin_amdgcn_workitem_id_x(); }
  __device__ unsigned g_y() const { return __builtin_amdgcn_workitem_id_y(); }
  __device__ unsigned g_z() const { return __builtin_amdgcn_workitem_id_z(); }
  RA_HIP_AXES(g);
};
struct ra_block_idx {
  __device__ unsigned g_x() const { return __builtin_amdgcn_workgroup_id_x(); }
  __device__ unsigned g_y() const { return __builtin_amdgcn_workgroup_id_y(); }
  __device__ unsigned g_z() const { return __builtin_amdgcn_workgroup_id_z(); }
  RA_HIP_AXES(g);
};
struct ra_block_dim {
  __device__ unsigned g_x() const { return __builtin_amdgcn_workgroup_size_x(); }
  __device__ unsigned g_y() const { return __builtin_amdgcn_workgroup_size_y(); }
  __device__ unsigned g_z() const { return __builtin_amdgcn_workgroup_size_z(); }
  RA_HIP_AXES(g);
};
struct ra_grid_dim {
  __device__ unsigned g(int a) const {
    return ((const __attribute__((address_space(4))) unsigned*)__builtin_amdgcn_implicitarg_ptr())[a];
  }
  __device__ unsigned g_x() const { return g(0); }
  __device__ unsigned g_y() const { return g(1); }
  __device__ unsigned g_z() const { return g(2); }
  RA_HIP_AXES(g);
};
extern const __device__ __attribute__((weak)) ra_thread_idx threadIdx;
extern const __device__ __attribute__((weak)) ra_block_idx blockIdx;
extern const __device__ __attribute__((weak)) ra_block_dim blockDim;
extern const __device__ __attribute__((weak)) ra_grid_dim gridDim;

__device__ inline void __syncthreads() {
  __builtin_amdgcn_fence(__ATOMIC_RELEASE, "workgroup");
  __builtin_amdgcn_s_barrier();
  __builtin_amdgcn_fence(__ATOMIC_ACQUIRE, "workgroup");
}
__device__ inline int __all(int p) { return __builtin_amdgcn_ballot_w64(p != 0) == __builtin_amdgcn_read_exec(); }
__device__ inline int __any(int p) { return __builtin_amdgcn_ballot_w64(p != 0) != 0; }
__device__ inline int atomicAdd(int* p, int v) {
  return __hip_atomic_fetch_add(p, v, __ATOMIC_RELAXED, __HIP_MEMORY_SCOPE_AGENT);
}
__device__ inline float fmaxf(float a, float b) { return __builtin_fmaxf(a, b); }
__device__ inline float fminf(float a, float b) { return __builtin_fminf(a, b); }
__device__ inline float fmaf(float a, float b, float c) { return __builtin_fmaf(a, b, c); }

struct __attribute__((aligned(16))) int4 { int x, y, z, w; };
struct dim3 {
  unsigned x, y, z;
  __host__ __device__ dim3(unsigned a = 1, unsigned b = 1, unsigned c = 1) : x(a), y(b), z(c) {}
};

/* Host API: declarations only (never linked in a device-only build). */
typedef struct ihipStream_t* hipStream_t;
typedef enum { hipSuccess = 0 } hipError_t;
typedef enum { hipMemcpyHostToDevice = 1 } hipMemcpyKind;
extern "C" int __hipPushCallConfiguration(dim3, dim3, size_t = 0, hipStream_t = nullptr);
extern "C" int __hipPopCallConfiguration(dim3*, dim3*, size_t*, hipStream_t*);
hipError_t hipGetLastError();
hipError_t hipMemcpyToSymbolAsync(const void*, const void*, size_t, size_t, hipMemcpyKind, hipStream_t);
#define HIP_SYMBOL(s) ((const void*)&(s))
#define hipLaunchKernelGGL(k, grid, block, shmem, stream, ...) k<<<grid, block, shmem, stream>>>(__VA_ARGS__)
