/*
 * bf16.h — the project's bf16 numerics, one definition for every backend (CPU, CUDA, HIP).
 *
 * docs/numerics.md is the contract these functions implement: three rounding modes from fp32,
 * one canonical NaN (0x7FFF) for every NaN result, and the ordered-integer ULP distance.
 * Pure bit arithmetic: no intrinsics, so host and device round identically.
 */
#ifndef REGRESS_BF16_H
#define REGRESS_BF16_H

#include <stdint.h>
#include <string.h>

#if defined(__CUDACC__) || defined(__HIPCC__) || defined(__HIP__)
#define RA_HD __host__ __device__ __forceinline__
#else
#define RA_HD static inline
#endif

#define RA_BF16_CANONICAL_NAN 0x7FFFu

RA_HD uint32_t ra_f32_bits(float x) {
#if defined(__CUDA_ARCH__) || defined(__HIP_DEVICE_COMPILE__)
  return __float_as_uint(x);
#else
  uint32_t u;
  memcpy(&u, &x, sizeof u);
  return u;
#endif
}

RA_HD float ra_bits_f32(uint32_t u) {
#if defined(__CUDA_ARCH__) || defined(__HIP_DEVICE_COMPILE__)
  return __uint_as_float(u);
#else
  float x;
  memcpy(&x, &u, sizeof x);
  return x;
#endif
}

/* bf16 bits -> fp32 (exact). */
RA_HD float ra_bf16_to_f32(uint16_t h) { return ra_bits_f32((uint32_t)h << 16); }

RA_HD int ra_f32_is_nan_bits(uint32_t u) { return (u & 0x7FFFFFFFu) > 0x7F800000u; }

/* Round to nearest, ties to even. Overflow goes to Inf, as IEEE requires. */
RA_HD uint16_t ra_f32_to_bf16_rtne(float x) {
  uint32_t u = ra_f32_bits(x);
  if (ra_f32_is_nan_bits(u)) return (uint16_t)RA_BF16_CANONICAL_NAN;
  u += 0x7FFFu + ((u >> 16) & 1u);
  return (uint16_t)(u >> 16);
}

/* Round to nearest, ties away from zero (the sign is apart, so adding half a ULP to the
 * magnitude bits rounds away from zero). */
RA_HD uint16_t ra_f32_to_bf16_rtna(float x) {
  uint32_t u = ra_f32_bits(x);
  if (ra_f32_is_nan_bits(u)) return (uint16_t)RA_BF16_CANONICAL_NAN;
  u += 0x8000u;
  return (uint16_t)(u >> 16);
}

/* Round toward zero: drop the low 16 bits. Inf stays Inf, the largest finite stays finite. */
RA_HD uint16_t ra_f32_to_bf16_rtz(float x) {
  uint32_t u = ra_f32_bits(x);
  if (ra_f32_is_nan_bits(u)) return (uint16_t)RA_BF16_CANONICAL_NAN;
  return (uint16_t)(u >> 16);
}

/* mode: 0 rtne, 1 rtna, 2 rtz (AITER's how_v3_bf16_cvt). Kernels should dispatch on a
 * compile-time mode instead; this runtime form is for host code and tests. */
RA_HD uint16_t ra_f32_to_bf16(float x, int mode) {
  return mode == 2 ? ra_f32_to_bf16_rtz(x) : mode == 1 ? ra_f32_to_bf16_rtna(x) : ra_f32_to_bf16_rtne(x);
}

/* Ordered integer of a bf16 pattern: monotone in the value, +0 and -0 both map to 0. */
RA_HD int32_t ra_bf16_ordered(uint16_t h) {
  return (h & 0x8000u) ? -(int32_t)(h & 0x7FFFu) : (int32_t)h;
}

/* Plain ULP distance between two finite bf16 patterns. */
RA_HD uint32_t ra_bf16_ulp_distance(uint16_t a, uint16_t b) {
  int32_t d = ra_bf16_ordered(a) - ra_bf16_ordered(b);
  return (uint32_t)(d < 0 ? -d : d);
}

/* ra_bf16x2_nonfinite before its mask: the masked exponents plus one exponent ulp each, which carries
 * into bit 15 / 31 only where that half is Inf or NaN and never across halves, so several words' sums
 * may be OR-ed before one mask. */
RA_HD uint32_t ra_bf16x2_nonfinite_sum(uint32_t x) { return (x & 0x7f807f80u) + 0x00800080u; }

/* The flags (bits 15 and 31) of one ra_bf16x2_nonfinite_sum or of several OR-ed together. */
RA_HD uint32_t ra_bf16x2_sum_flags(uint32_t sums) { return sums & 0x80008000u; }

/* Two packed bf16s (the low and high halves of x): bits 15 and 31 set where that half is Inf or NaN
 * (exponent all ones). The causal staircase's non-finite V test (docs/numerics.md §1b). */
RA_HD uint32_t ra_bf16x2_nonfinite(uint32_t x) { return ra_bf16x2_sum_flags(ra_bf16x2_nonfinite_sum(x)); }

/* ra_bf16x2_nonfinite's flags (bits 15 and 31) widened to their whole halves: 0x8000 -> 0xffff,
 * 0x80000000 -> 0xffff0000. */
RA_HD uint32_t ra_bf16x2_halves(uint32_t flags) { return flags | (flags - (flags >> 15)); }

/* x with every non-finite bf16 half replaced by +0. */
RA_HD uint32_t ra_bf16x2_zero_nonfinite(uint32_t x) { return x & ~ra_bf16x2_halves(ra_bf16x2_nonfinite(x)); }

#endif /* REGRESS_BF16_H */
