/*
 * The declarations of <hip/hip_runtime.h> that kernel/hip/attention_gfx942.hip's host part uses, and
 * nothing else: ROCm is not installed here, so tests/kernel/test_hip_compile.py compiles that host
 * part against these with -fsyntax-only (names, types and calls checked, no object made). Never a
 * library to link against: a real build includes ROCm's own header.
 */
#pragma once
#include <stddef.h>
#include <stdint.h>

#define __global__ __attribute__((global))
#define __device__ __attribute__((device))
#define __host__ __attribute__((host))
#define __shared__ __attribute__((shared))
#define __forceinline__ inline __attribute__((always_inline))

typedef enum { hipSuccess = 0 } hipError_t;
typedef enum { hipDeviceAttributeMultiprocessorCount = 63 } hipDeviceAttribute_t;
typedef struct ihipStream_t* hipStream_t;
struct dim3 {
  unsigned x, y, z;
  __host__ __device__ dim3(unsigned a = 1, unsigned b = 1, unsigned c = 1) : x(a), y(b), z(c) {}
};

hipError_t hipGetDevice(int* device);
hipError_t hipDeviceGetAttribute(int* value, hipDeviceAttribute_t attr, int device);
hipError_t hipMallocAsync(void** ptr, size_t bytes, hipStream_t stream);
hipError_t hipFreeAsync(void* ptr, hipStream_t stream);
hipError_t hipGetLastError(void);
const char* hipGetErrorString(hipError_t error);
/* what clang's <<<>>> lowers to */
extern "C" hipError_t __hipPushCallConfiguration(dim3 grid, dim3 block, size_t shared, hipStream_t stream);
extern "C" hipError_t __hipPopCallConfiguration(dim3* grid, dim3* block, size_t* shared, hipStream_t* stream);
#define hipLaunchKernelGGL(K, G, B, S, ST, ...) K<<<G, B, S, ST>>>(__VA_ARGS__)
