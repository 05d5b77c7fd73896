/*
 * softmax.h — FA2 online softmax on the S^T fragments, one query row per lane column.
 *
 * A query row li lives in lanes li, li+16, li+32, li+48; each lane holds 16 of the tile's 64 scores.
 * The row max is reduced across the 4 lanes (xor 16, xor 32) every tile; the row sum stays a per-lane
 * partial sum (rescaled by the same row-uniform alpha) and is reduced once, in the epilogue.
 *
 * Non-finite semantics follow the fp64 reference softmax(s) = exp(s - max s) / sum, literally:
 *   - a NaN score makes its p NaN -> the row sum is NaN -> the whole output row is NaN;
 *   - a +Inf score makes max = +Inf and its p = exp(Inf - Inf) = NaN -> NaN row;
 *   - all scores -Inf: every p = exp(-Inf - -Inf) = NaN in the reference. Here p = 0 and the sum
 *     stays 0, and the epilogue's 0/0 gives the NaN row. The usual "max == -inf -> use 0" guard is
 *     applied only to the exponent offset (m_use), never to the result, so it cannot turn such a
 *     row into zeros;
 *   - some scores -Inf, max finite: their p = 0 exactly, and 0 * (Inf or NaN in V) stays NaN as in
 *     the reference (MFMA multiplies are IEEE: 0 * Inf = NaN).
 * alpha = 0 (not exp2(...)) while nothing finite has been seen yet, so a later finite max never
 * multiplies the empty accumulators by exp2(+huge) = Inf.
 * Keys past seqlen_k get s = -Inf before the max, hence p = 0 (m_use is never -Inf).
 */
#ifndef RA_HIP_SOFTMAX_H
#define RA_HIP_SOFTMAX_H

#include "layout.h"
#include "mfma.h"

namespace ra_gfx942 {

struct RowState {
  float m; /* running max of raw scores (unscaled; scale > 0 so max commutes with it) */
  float l; /* this lane's partial row sum */
};

__device__ __forceinline__ float neg_inf() { return -__builtin_inff(); }

/* Updates one query tile's state with this K/V tile's scores, writes P (bf16, B-operand layout of the
 * PV MFMA) and returns alpha, the factor the O accumulators must be multiplied by. */
__device__ __forceinline__ float online_softmax(RowState& st, f32x4 (&s)[kKTiles], bf16x4 (&p)[kKTiles],
                                                float scale_log2e, bool partial, uint32_t keys_left,
                                                int lane, int g) {
  if (partial) {
#pragma unroll
    for (int kt = 0; kt < kKTiles; ++kt)
#pragma unroll
      for (int r = 0; r < 4; ++r)
        if ((uint32_t)tile_key(kt, 4 * g + r) >= keys_left) s[kt][r] = neg_inf();
  }
  float mx = neg_inf();
#pragma unroll
  for (int kt = 0; kt < kKTiles; ++kt)
#pragma unroll
    for (int r = 0; r < 4; ++r) mx = __builtin_fmaxf(mx, s[kt][r]);
  mx = __builtin_fmaxf(mx, lane_xor(mx, lane, 16));
  mx = __builtin_fmaxf(mx, lane_xor(mx, lane, 32));

  const float m_new = __builtin_fmaxf(st.m, mx);
  const float m_use = (m_new == neg_inf()) ? 0.0f : m_new;
  const float alpha = (st.m == neg_inf()) ? 0.0f : __builtin_amdgcn_exp2f((st.m - m_use) * scale_log2e);

  float sum = 0.0f;
#pragma unroll
  for (int kt = 0; kt < kKTiles; ++kt) {
    float e[4];
#pragma unroll
    for (int r = 0; r < 4; ++r) {
      e[r] = __builtin_amdgcn_exp2f((s[kt][r] - m_use) * scale_log2e);
      sum += e[r];
    }
    p[kt] = __builtin_bit_cast(bf16x4, u32x2{pack_p_bf16(e[0], e[1]), pack_p_bf16(e[2], e[3])});
  }
  st.l = st.l * alpha + sum;
  st.m = m_new;
  return alpha;
}

}  // namespace ra_gfx942

#endif /* RA_HIP_SOFTMAX_H */
