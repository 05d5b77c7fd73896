/*
 * epilogue.cuh — O = acc / l, rounded to bf16 by the compile-time mode, fire-drill faults applied
 * (inject.h), then stored. Three ways (RA_CUDA_EPILOGUE), rows past seqlen_q never written:
 *   2 (default): stmatrix into the warp's 4 KB of shared memory in TMA's 128-byte-swizzled layout,
 *      then two TMA stores (16 rows x 64 columns each) that run while the next tile computes;
 *   1: the same staging written with 4-byte stores, read back 16 bytes per lane, 16-byte global
 *      stores (v2);
 *   0: 4-byte global stores straight from the accumulator layout (v1).
 */
#pragma once
#include "../common/bf16.h"
#include "../common/inject.h"
#include "params.cuh"
#include "ptx.cuh"

/* RA_CUDA_CVT_ROUND 1: rtne and rtz round two values with one cvt.{rn,rz}.bf16x2.f32 (the same bits as bf16.h for
 * every input, NaN giving the canonical 0x7FFF: checked against the golden model on the H200,
 * docs/perf-notes.md v3) instead of bf16.h's 3-5 integer ops per value; rtna, which has no such
 * instruction, moves exact ties above the tie with one prmt per value and takes cvt.rn (v4).
 * 0: bf16.h per value. The ULP drill (RA_INJECT_ULP) always takes bf16.h's path. */

namespace ra_cuda {

template <int kMode>
__device__ __forceinline__ uint16_t round_out(float x) {
  constexpr int kRound = RA_INJECT_ROUNDING(kMode); /* kMode itself unless the mode-swap drill is built in */
  uint16_t h = kRound == 2 ? ra_f32_to_bf16_rtz(x) : kRound == 1 ? ra_f32_to_bf16_rtna(x) : ra_f32_to_bf16_rtne(x);
  return ra_inject_ulp(h);
}

/* Byte 0 of u replaced by the sign bit of byte 1 (bit 15) replicated: 0xFF or 0x00. */
__device__ __forceinline__ uint32_t prmt_tie_nudge(uint32_t u) {
  uint32_t r;
  asm("prmt.b32 %0, %1, %2, 0x3219;" : "=r"(r) : "r"(u), "r"(0u));
  return r;
}

/* Two values rounded to a bf16x2 word, lo in the low half. */
template <int kMode>
__device__ __forceinline__ uint32_t round_pack(float lo, float hi) {
  constexpr int kRound = RA_INJECT_ROUNDING(kMode); /* kMode itself unless the mode-swap drill is built in */
  if constexpr (RA_CUDA_CVT_ROUND && RA_INJECT_ULP == 0 && kRound != 1) {
    uint32_t r;
    if constexpr (kRound == 0)
      asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));
    else
      asm("cvt.rz.bf16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));
    return r;
  } else if constexpr (RA_CUDA_CVT_ROUND && RA_INJECT_ULP == 0) {
    /* rtna(x) = rtne(x'), x' = x with its low byte replaced by bit 15 replicated (one prmt, the
     * selector's sign mode): from a tie up x' lies above the tie, below it x' stays below, Inf keeps
     * its zero mantissa. Exact for every fp32 input but NaNs whose payload sits in the low 8 bits
     * alone (they would become Inf), and x is a product here, O * (1/l), whose NaN is always the
     * canonical 0x7FFFFFFF. Checked against bf16.h for all 2^32 patterns (tests/kernel/
     * test_numerics.py keeps the rounding edges) and, on the H200, bit for bit with NaN inputs. */
    const float a = __uint_as_float(prmt_tie_nudge(__float_as_uint(lo)));
    const float b = __uint_as_float(prmt_tie_nudge(__float_as_uint(hi)));
    uint32_t r;
    asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(b), "f"(a));
    return r;
  } else {
    return (uint32_t)round_out<kMode>(lo) | ((uint32_t)round_out<kMode>(hi) << 16);
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
 * to column 0 of out0. kPack: round each pair with round_pack (one cvt where the mode has one; the
 * same bits), as the staged epilogues do; false: bf16.h per value (the mma.sync and decode paths,
 * whose code stays as it was). */
template <int NT, int kRound, bool kPack = false>
__device__ __forceinline__ void store_rows(const float (&acc)[NT * 4], const float (&l_part)[2], uint16_t* out0,
                                           uint16_t* out1, int qc, bool flip0) {
  float inv[2];
  row_inverses(l_part, inv);
#pragma unroll
  for (int i = 0; i < NT; ++i) {
    if constexpr (kPack) {
      if (out0) {
        uint32_t w = round_pack<kRound>(acc[4 * i + 0] * inv[0], acc[4 * i + 1] * inv[0]);
        if (RA_INJECT_NONDET && flip0 && i == 0 && qc == 0) w ^= 1u;
        *reinterpret_cast<uint32_t*>(out0 + 8 * i + qc) = w;
      }
      if (out1)
        *reinterpret_cast<uint32_t*>(out1 + 8 * i + qc) =
            round_pack<kRound>(acc[4 * i + 2] * inv[1], acc[4 * i + 3] * inv[1]);
      continue;
    }
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

/* Epilogue 2's staging: the warp's 16 rows rounded (with the drills) and written by stmatrix into
 * `so`, two d-halves of 16 rows x 128 B, 16-byte chunk c of row r at c ^ (r & 7), once the warp's
 * previous TMA stores from it have read it; returns its shared address. */
template <int kRound>
__device__ __forceinline__ uint32_t stage_tile(const float (&acc)[64], const float (&l_part)[2], uint16_t* so,
                                               int lane, bool flip0) {
  float inv[2];
  row_inverses(l_part, inv);
  if (lane == 0) bulk_wait_read<0>();
  __syncwarp();
  const uint32_t base = smem_u32(so);
  const int mat = lane >> 3;                    /* the matrix whose row this lane addresses */
  const int row = (mat & 1) * 8 + (lane & 7);   /* rows 0-7 or 8-15 of the warp's 16 */
#pragma unroll
  for (int i = 0; i < 16; i += 2) {
    /* matrices: (rows 0-7, n8-tile i), (rows 8-15, i), (rows 0-7, i + 1), (rows 8-15, i + 1) */
    uint32_t w[4];
    w[0] = round_pack<kRound>(acc[4 * i + 0] * inv[0], acc[4 * i + 1] * inv[0]);
    w[1] = round_pack<kRound>(acc[4 * i + 2] * inv[1], acc[4 * i + 3] * inv[1]);
    w[2] = round_pack<kRound>(acc[4 * i + 4] * inv[0], acc[4 * i + 5] * inv[0]);
    w[3] = round_pack<kRound>(acc[4 * i + 6] * inv[1], acc[4 * i + 7] * inv[1]);
    if (RA_INJECT_NONDET && flip0 && i == 0 && lane == 0) w[0] ^= 1u;
    const int j = i + (mat >> 1); /* n8-tile = 16-byte chunk j & 7 of d-half j >> 3 */
    stmatrix_x4(base + (j >> 3) * 2048 + row * 128 + (((j & 7) ^ (row & 7)) << 4), w);
  }
  return base;
}

/* Epilogue 2. `so`: the warp's 4 KB staging, 1024-byte aligned, two d-halves of 16 rows x 128 B
 * (the TMA box of tma_o), 16-byte chunk c of row r at c ^ (r & 7): TMA's 128-byte swizzle, which
 * also makes each 8 x 8 stmatrix conflict-free. The warp's previous stores from `so` must have read
 * it first (bulk_wait_read); lane 0 issues and commits this tile's, and the CTA waits for all of
 * them before it exits (store_tile_tma_drain). row_base: first of the warp's 16 rows. */
template <int kRound>
__device__ __forceinline__ void store_tile_tma(const float (&acc)[64], const float (&l_part)[2], uint16_t* so,
                                               const CUtensorMap* tma_o, int row_base, int h, int b, int lane,
                                               bool flip0) {
  const uint32_t base = stage_tile<kRound>(acc, l_part, so, lane, flip0);
  fence_proxy_async_smem();
  __syncwarp();
  if (lane == 0) {
    tma_store_4d(tma_o, base, 0, row_base, h, b);
    tma_store_4d(tma_o, base + 2048, 64, row_base, h, b);
    bulk_commit();
  }
}

/* The v2 kernels' stores of a warp's 16 rows where a TMA box does not fit them (epilogue 2's
 * staging and stmatrix, as store_tile_tma): a varlen tile's rows across its sequence's end (the TMA
 * tensor is the packed total: a box would write the next sequence's rows) and packed GQA tiles
 * (rows of several heads). Lane l stores d-half l % 2 of row l / 2 with eight 16-byte stores to
 * `row_out` (its row's first element), nothing where it is nullptr. */
template <int kRound>
__device__ __forceinline__ void store_tile_rows(const float (&acc)[64], const float (&l_part)[2], uint16_t* so,
                                                uint16_t* row_out, int lane, bool flip0) {
  stage_tile<kRound>(acc, l_part, so, lane, flip0);
  __syncwarp();
  const int r = lane >> 1, half = lane & 1;
  if (row_out) {
#pragma unroll
    for (int c = 0; c < 8; ++c) {
      const uint4 v = *reinterpret_cast<const uint4*>(so + half * 1024 + r * 64 + ((c ^ (r & 7)) << 3));
      *reinterpret_cast<uint4*>(row_out + half * 64 + c * 8) = v;
    }
  }
  __syncwarp(); /* the next tile's stmatrix rewrites `so` */
}

/* Before the CTA exits: its shared memory must outlive the reads, and the writes must be done. */
__device__ __forceinline__ void store_tile_tma_drain(int lane) {
  if (lane == 0) bulk_wait<0>();
}

}  // namespace ra_cuda
