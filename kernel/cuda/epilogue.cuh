/*
 * epilogue.cuh — O = acc / l, rounded to bf16 by the compile-time mode, fire-drill faults applied
 * (inject.h), stored straight from registers (4 bytes per thread per 8-column tile; rows past
 * seqlen_q are skipped, so nothing is written out of range).
 */
#pragma once
#include "../common/bf16.h"
#include "../common/inject.h"
#include "params.cuh"

#ifndef RA_CUDA_SMEM_EPILOGUE
#define RA_CUDA_SMEM_EPILOGUE 1
#endif
/* 1: rtne and rtz round two values with one cvt.{rn,rz}.bf16x2.f32 (the same bits as bf16.h for
 * every input, NaN giving the canonical 0x7FFF: checked against the golden model on the H200,
 * docs/perf-notes.md v3) instead of bf16.h's 3-5 integer ops per value. rtna has no such
 * instruction and keeps bf16.h. The ULP drill (RA_INJECT_ULP) always takes bf16.h's path. */
#ifndef RA_CUDA_CVT_ROUND
#define RA_CUDA_CVT_ROUND 1
#endif

namespace ra_cuda {

template <int kRound>
__device__ __forceinline__ uint16_t round_out(float x) {
  uint16_t h = kRound == 2 ? ra_f32_to_bf16_rtz(x) : kRound == 1 ? ra_f32_to_bf16_rtna(x) : ra_f32_to_bf16_rtne(x);
  return ra_inject_ulp(h);
}

/* Two values rounded to a bf16x2 word, lo in the low half. */
template <int kRound>
__device__ __forceinline__ uint32_t round_pack(float lo, float hi) {
  if constexpr (RA_CUDA_CVT_ROUND && RA_INJECT_ULP == 0 && kRound != 1) {
    uint32_t r;
    if constexpr (kRound == 0)
      asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));
    else
      asm("cvt.rz.bf16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));
    return r;
  } else {
    return (uint32_t)round_out<kRound>(lo) | ((uint32_t)round_out<kRound>(hi) << 16);
  }
}

/* 1 / (row sum), the partial sums reduced over the quad in a fixed order (deterministic). */
__device__ __forceinline__ void row_inverses(const float (&l_part)[2], float (&inv)[2]) {
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    float l = l_part[r];
    l += __shfl_xor_sync(0xffffffffu, l, 1);
    l += __shfl_xor_sync(0xffffffffu, l, 2);
    /* l = 0 only for an all -Inf row: 1/0 = Inf and 0 * Inf = NaN, the reference's 0/0. */
    inv[r] = 1.0f / l;
  }
}

/* acc: NT tiles in the accumulator layout (see softmax.cuh); l: this thread's partial row sums.
 * out0/out1: the rows r and r + 8 of O (nullptr when past seqlen_q). flip0: apply the NONDET drill
 * to column 0 of out0. */
template <int NT, int kRound>
__device__ __forceinline__ void store_rows(const float (&acc)[NT * 4], const float (&l_part)[2], uint16_t* out0,
                                           uint16_t* out1, int qc, bool flip0) {
  float inv[2];
  row_inverses(l_part, inv);
#pragma unroll
  for (int i = 0; i < NT; ++i) {
    if (out0) {
      uint32_t lo = round_out<kRound>(acc[4 * i + 0] * inv[0]);
      const uint32_t hi = round_out<kRound>(acc[4 * i + 1] * inv[0]);
      if (RA_INJECT_NONDET && flip0 && i == 0 && qc == 0) lo ^= 1u;
      *reinterpret_cast<uint32_t*>(out0 + 8 * i + qc) = lo | (hi << 16);
    }
    if (out1) {
      const uint32_t lo = round_out<kRound>(acc[4 * i + 2] * inv[1]);
      const uint32_t hi = round_out<kRound>(acc[4 * i + 3] * inv[1]);
      *reinterpret_cast<uint32_t*>(out1 + 8 * i + qc) = lo | (hi << 16);
    }
  }
}

/* A warp's 16 x 128 output rows through its private 4 KB of shared memory, so that global stores
 * are 16 bytes per lane and whole 256-byte rows per half-warp (the register layout gives 4-byte
 * pieces of 8 rows per store). 16-byte chunk c of row r sits at chunk c ^ (r & 7): the 4-byte
 * writes (8 rows x 4 lanes) and the 16-byte reads (8 chunks of a row) are both conflict-free.
 * Only this warp touches `so`, so __syncwarp is the only barrier. row_base: first of the 16 rows. */
template <int kRound>
__device__ __forceinline__ void store_tile_smem(const float (&acc)[64], const float (&l_part)[2], uint16_t* so,
                                                uint16_t* obase, int64_t os, int row_base, int seqlen_q, int lane,
                                                bool flip0) {
  float inv[2];
  row_inverses(l_part, inv);
  const int g = lane >> 2;
  const int qc = 2 * (lane & 3);
#pragma unroll
  for (int i = 0; i < 16; ++i) {
    uint32_t w0 = round_pack<kRound>(acc[4 * i + 0] * inv[0], acc[4 * i + 1] * inv[0]);
    if (RA_INJECT_NONDET && flip0 && i == 0 && qc == 0) w0 ^= 1u;
    const uint32_t w1 = round_pack<kRound>(acc[4 * i + 2] * inv[1], acc[4 * i + 3] * inv[1]);
    const int ch = (i ^ g) << 3; /* rows g and g + 8 share (r & 7) */
    *reinterpret_cast<uint32_t*>(so + g * 128 + ch + qc) = w0;
    *reinterpret_cast<uint32_t*>(so + (g + 8) * 128 + ch + qc) = w1;
  }
  __syncwarp();
#pragma unroll
  for (int j = 0; j < 8; ++j) {
    const int id = 32 * j + lane;
    const int r = id >> 4;
    const int c = id & 15;
    const uint4 val = *reinterpret_cast<const uint4*>(so + r * 128 + ((c ^ (r & 7)) << 3));
    if (row_base + r < seqlen_q) *reinterpret_cast<uint4*>(obase + (int64_t)(row_base + r) * os + c * 8) = val;
  }
  __syncwarp(); /* the next tile's epilogue rewrites `so` */
}

}  // namespace ra_cuda
