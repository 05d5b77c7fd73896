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
#include "ptx.cuh"

namespace ra_cuda {

template <int NT>
struct OnlineSoftmax {
  float m[2]; /* running max of the raw (unscaled) scores; -Inf before the first key */
  float l[2]; /* this thread's partial row sums */

  __device__ __forceinline__ void init() {
    m[0] = m[1] = -__int_as_float(0x7f800000);
    l[0] = l[1] = 0.f;
  }

  /* Scores -> probabilities in place. kFirst: no earlier state (corr unused). kMask: columns
   * >= valid_cols are keys past seqlen_k and become -Inf. corr[r] is the factor the caller must
   * apply to its output accumulator rows before adding this block's P.V. */
  template <bool kFirst, bool kMask>
  __device__ __forceinline__ void step(float (&s)[NT * 4], float scale_log2, int valid_cols, int qc,
                                       float (&corr)[2]) {
    const float kNegInf = -__int_as_float(0x7f800000);
    if (kMask) {
#pragma unroll
      for (int i = 0; i < NT; ++i)
#pragma unroll
        for (int j = 0; j < 2; ++j)
          if (8 * i + qc + j >= valid_cols) {
            s[4 * i + j] = kNegInf;
            s[4 * i + 2 + j] = kNegInf;
          }
    }
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      float mx = kFirst ? kNegInf : m[r];
#pragma unroll
      for (int i = 0; i < NT; ++i) mx = fmaxf(mx, fmaxf(s[4 * i + 2 * r], s[4 * i + 2 * r + 1]));
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
          const float p = ex2(fmaf(s[4 * i + 2 * r + j], scale_log2, -ms));
          s[4 * i + 2 * r + j] = p;
          sum += p;
        }
      l[r] = kFirst ? sum : fmaf(l[r], corr[r], sum);
    }
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
