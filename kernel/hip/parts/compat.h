/*
 * compat.h — the few HIP spellings the device code needs, for builds without <hip/hip_runtime.h>.
 *
 * Two ways this translation unit is compiled (docs/hip-gfx942.md has the exact command lines):
 *   - full library, real ROCm `hipcc`: <hip/hip_runtime.h> exists, RA_HIP_HAVE_RUNTIME = 1, the host
 *     part (ra_attention_fwd & co.) is compiled and launches through hipLaunchKernelGGL;
 *   - device-only proof build, `clang-19 -nogpulib -nogpuinc --cuda-device-only`: no ROCm headers,
 *     RA_HIP_HAVE_RUNTIME = 0, only the kernels are compiled, from the attributes defined here.
 * The device code itself uses clang builtins only (__builtin_amdgcn_*), so it is the same code in both.
 * Force the compat path with -DRA_HIP_FORCE_COMPAT=1 (flags.h).
 */
#ifndef RA_HIP_COMPAT_H
#define RA_HIP_COMPAT_H

#include "flags.h"

#if !RA_HIP_FORCE_COMPAT && defined(__has_include)
#if __has_include(<hip/hip_runtime.h>)
#define RA_HIP_HAVE_RUNTIME 1
#endif
#endif
#ifndef RA_HIP_HAVE_RUNTIME
#define RA_HIP_HAVE_RUNTIME 0
#endif

#if RA_HIP_HAVE_RUNTIME
#include <hip/hip_runtime.h>
#else
#ifndef __global__
#define __global__ __attribute__((global))
#endif
#ifndef __device__
#define __device__ __attribute__((device))
#endif
#ifndef __host__
#define __host__ __attribute__((host))
#endif
#ifndef __shared__
#define __shared__ __attribute__((shared))
#endif
#ifndef __forceinline__
#define __forceinline__ inline __attribute__((always_inline))
#endif
/* bf16.h uses these two on the device side; hip_runtime.h provides them in the full build. */
__device__ __forceinline__ unsigned int __float_as_uint(float x) { return __builtin_bit_cast(unsigned int, x); }
__device__ __forceinline__ float __uint_as_float(unsigned int x) { return __builtin_bit_cast(float, x); }
#endif

#endif /* RA_HIP_COMPAT_H */
