/*
 * softmax.cuh — the online softmax, shared by both CUDA paths.
 *
 * A thread holds, for two rows (r and r + 8 of its warp's 16), NT tiles of 8 columns in the
 * mma/wgmma accumulator layout: s[4i + 0..1] = row r, columns 8i + qc + {0, 1}; s[4i + 2..3] = row
 * r + 8, same columns (qc = 2 * (lane % 4)). The four threads of a quad share a row.
 *
 * IEEE semantics, so that non-finite inputs give what the naive fp64 reference
 * softmax(QK^T * scale) @ V gives (docs/perf-notes.md, "NaN and Inf"):
 *   - a NaN score: fmaxf skips it, but its p = 2^(NaN) = NaN reaches the row sum l and P.V, so the
 *     whole row ends NaN;
 *   - a +Inf score: the max is +Inf and p = 2^(Inf - Inf) = NaN: row NaN, as in the reference;
 *   - -Inf scores give p = 0. While a row has seen only -Inf, 0 is subtracted instead of the max
 *     (else -Inf - -Inf = NaN would poison a row that later sees finite scores); if the row stays
 *     all -Inf to the end, l = 0 and the epilogue's 0 * (1/0) is the reference's 0/0 = NaN.
 *     No "l == 0 -> 0" guard anywhere.
 * The row sums are partial per thread (its own columns, fixed order); the epilogue reduces them
 * over the quad in a fixed order, so the result is bit-deterministic.
 */
#pragma once
#include "flags.h"
#include "ptx.cuh"

/* Measurement builds only (wrong outputs; never a default): bit 1 = no exponential (p = x), bit 4 =
 * no softmax at all (P = S, l = 1). Where a tile's time goes, by what is left out (METHOD.md). */

namespace ra_cuda {

template <int NT>
struct OnlineSoftmax {
  float m[2]; /* running max of the raw (unscaled) scores; -Inf before the first key */
  float l[2]; /* this thread's partial row sums */

  __device__ __forceinline__ void init() {
    m[0] = m[1] = -__int_as_float(0x7f800000);
    l[0] = l[1] = 0.f;
  }

  /* Scores -> probabilities in place (what begin(), exps() over every column tile and end() do).
   * kFirst: no earlier state (corr unused). kMask: columns >= valid_cols are keys past seqlen_k and
   * become -Inf.
   * corr[r] is the factor the caller must apply to its output accumulator rows before adding this
   * block's P.V. Written out, not composed of begin(): composed (or with a shared per-row helper),
   * ptxas schedules both kernels differently (1,160 and 6,288 SASS lines), and neither was timed;
   * as written, each is the SASS the device measured (v14's and v15's). */
  template <bool kFirst, bool kMask>
  __device__ __forceinline__ void step(float (&s)[NT * 4], float scale_log2, int valid_cols, int qc,
                                       float (&corr)[2]) {
    const float kNegInf = -__int_as_float(0x7f800000);
    if constexpr ((RA_CUDA_ABLATE & 4) != 0) {
      l[0] = l[1] = 1.f;
      corr[0] = corr[1] = 1.f;
      return;
    }
    if (kMask) mask(s, valid_cols, qc);
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      float mx = row_max<kFirst>(s, r);
      mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
      mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
      const float m_use = (mx == kNegInf) ? 0.f : mx;
      const float ms = m_use * scale_log2;
      if (!kFirst) corr[r] = ex2((m[r] - m_use) * scale_log2);
      m[r] = mx;
      float sum = 0.f;
#pragma unroll
      for (int i = 0; i < NT; ++i)
#pragma unroll
        for (int j = 0; j < 2; ++j) {
          const float p = exp2_of(fmaf(s[4 * i + 2 * r + j], scale_log2, -ms));
          s[4 * i + 2 * r + j] = p;
          sum += p;
        }
      l[r] = kFirst ? sum : fmaf(l[r], corr[r], sum);
    }
  }

  /* Columns >= valid_cols (keys past seqlen_k) become -Inf. */
  __device__ __forceinline__ void mask(float (&s)[NT * 4], int valid_cols, int qc) {
    const float kNegInf = -__int_as_float(0x7f800000);
#pragma unroll
    for (int i = 0; i < NT; ++i)
#pragma unroll
      for (int j = 0; j < 2; ++j)
        if (8 * i + qc + j >= valid_cols) {
          s[4 * i + j] = kNegInf;
          s[4 * i + 2 + j] = kNegInf;
        }
  }

  /* This thread's max of row r over the block (and, unless kFirst, the running max); -Inf over
   * NaNs alone. */
  template <bool kFirst>
  __device__ __forceinline__ float row_max(const float (&s)[NT * 4], int r) const {
    const float kNegInf = -__int_as_float(0x7f800000);
    /* a chain (a tree of fmaxf measured slower: docs/perf-notes.md, deleted flags) */
    float mx = kFirst ? kNegInf : m[r];
#pragma unroll
    for (int i = 0; i < NT; ++i) mx = fmaxf(mx, fmaxf(s[4 * i + 2 * r], s[4 * i + 2 * r + 1]));
    return mx;
  }

  /* 2^x on the MUFU, or, in the ablation, nothing (an FMA-pipe polynomial for some column tiles
   * measured slower: docs/perf-notes.md, deleted flags) */
  __device__ __forceinline__ static float exp2_of(float x) { return (RA_CUDA_ABLATE & 1) ? x : ex2(x); }

  /* The block's new row maxima (m), the caller's corr, and ms = the max the exponentials subtract
   * (scaled); sum starts at 0. The caller then takes exps() over the column tiles in order, in as
   * many calls as it likes (each row's sum is one chain in column order either way, so the bits do
   * not depend on the calls), and end(). */
  template <bool kFirst, bool kMask>
  __device__ __forceinline__ void begin(float (&s)[NT * 4], float scale_log2, int valid_cols, int qc,
                                        float (&corr)[2], float (&ms)[2], float (&sum)[2]) {
    const float kNegInf = -__int_as_float(0x7f800000);
    if constexpr ((RA_CUDA_ABLATE & 4) != 0) {
      corr[0] = corr[1] = 1.f;
      ms[0] = ms[1] = 0.f;
      return;
    }
    if (kMask) mask(s, valid_cols, qc);
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      float mx = row_max<kFirst>(s, r);
      mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
      mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
      const float m_use = (mx == kNegInf) ? 0.f : mx;
      ms[r] = m_use * scale_log2;
      if (!kFirst) corr[r] = ex2((m[r] - m_use) * scale_log2);
      m[r] = mx;
      sum[r] = 0.f;
    }
  }

  /* ABI v2's masks (mask.cuh's RowMask): each of the thread's two rows keeps its columns < lim[r]
   * (r: row r, 1: row r + 8; a limit <= 0 masks the whole row's block), the rest become -Inf; then
   * begin<kFirst, false>. */
  template <bool kFirst>
  __device__ __forceinline__ void begin_rows(float (&s)[NT * 4], float scale_log2, int lim0, int lim1, int qc,
                                             float (&corr)[2], float (&ms)[2], float (&sum)[2]) {
    const float kNegInf = -__int_as_float(0x7f800000);
#pragma unroll
    for (int i = 0; i < NT; ++i)
#pragma unroll
      for (int j = 0; j < 2; ++j) {
        const int c = 8 * i + qc + j;
        if (c >= lim0) s[4 * i + j] = kNegInf;
        if (c >= lim1) s[4 * i + 2 + j] = kNegInf;
      }
    begin<kFirst, false>(s, scale_log2, NT * 8, qc, corr, ms, sum);
  }

  /* p = 2^(s * scale - ms) on column tiles [I0, I1), added to each row's sum in column order. */
  template <int I0, int I1>
  __device__ __forceinline__ void exps(float (&s)[NT * 4], float scale_log2, const float (&ms)[2],
                                       float (&sum)[2]) {
    if constexpr ((RA_CUDA_ABLATE & 4) != 0) return;
#pragma unroll
    for (int r = 0; r < 2; ++r)
#pragma unroll
      for (int i = I0; i < I1; ++i)
#pragma unroll
        for (int j = 0; j < 2; ++j) {
          const float p = exp2_of(fmaf(s[4 * i + 2 * r + j], scale_log2, -ms[r]));
          s[4 * i + 2 * r + j] = p;
          sum[r] += p;
        }
  }

  /* The row sums: this block's, or (unless first, the tile's block 0) the running ones rescaled
   * by corr plus this block's, as step() does. */
  __device__ __forceinline__ void end(bool first, const float (&corr)[2], const float (&sum)[2]) {
    if constexpr ((RA_CUDA_ABLATE & 4) != 0) {
      l[0] = l[1] = 1.f;
      return;
    }
#pragma unroll
    for (int r = 0; r < 2; ++r) l[r] = first ? sum[r] : fmaf(l[r], corr[r], sum[r]);
  }
};

/* Multiplies output accumulator rows by corr (same row layout as the scores, NT tiles of 8). */
template <int NT>
__device__ __forceinline__ void rescale_rows(float (&o)[NT * 4], const float (&corr)[2]) {
#pragma unroll
  for (int i = 0; i < NT; ++i) {
    o[4 * i + 0] *= corr[0];
    o[4 * i + 1] *= corr[0];
    o[4 * i + 2] *= corr[1];
    o[4 * i + 3] *= corr[1];
  }
}

}  // namespace ra_cuda
