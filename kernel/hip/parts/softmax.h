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

#include "dispatch.h"
#include "layout.h"
#include "mfma.h"

namespace ra_gfx942 {

struct RowState {
  float m; /* running max of raw scores (unscaled; scale > 0 so max commutes with it) */
  float l; /* this lane's partial row sum */
  float q; /* m_use * scale_log2e as rounded once, the exponent offset of this row's p (step 7) */
};

/* Step 7 (docs/hip-gfx942.md, "Design steps"); changed bits against step 6, within the contract:
 *   - exponent argument fma(s, c, -q) with q = round(m_use * c), one v_fma instead of v_sub + v_mul.
 *     The rounding of q is common to every p of the row in this tile, so it cancels in O / l; alpha
 *     is exp2(q_old - q_new) of the same rounded offsets (exactly 1 when the max did not move, so
 *     the lazy rescale of step 6 still sees 1);
 *   - P to bf16 by round-to-nearest, ties away (one add of 0x8000 before the packing v_perm,
 *     instead of v_bfe + v_add3 for ties-to-even); only the rare exact tie differs;
 *   - the row's partial sum in pairs (two running sums, x and y, added at the end), in step 13 as
 *     plain v_add_f32 in the same order (a v_pk_add_f32 is two IEEE adds).
 * Non-finite cases keep their meaning: -Inf scores give fma(-Inf, c, -q) = -Inf -> p = 0; a +Inf
 * score makes q = +Inf and fma(+Inf, c, -Inf) = NaN; NaN stays NaN; bf16 NaN/Inf survive the +0x8000. */

__device__ __forceinline__ float neg_inf() { return -__builtin_inff(); }

/* 16 floats through an empty asm: nothing is computed before it that is not needed, nothing after it
 * that it feeds is hoisted above it (the exponentials' run in softmax_x). */
__device__ __forceinline__ void tie16(float (&x)[kKTiles][4]) {
  asm volatile(""
               : "+v"(x[0][0]), "+v"(x[0][1]), "+v"(x[0][2]), "+v"(x[0][3]), "+v"(x[1][0]), "+v"(x[1][1]),
                 "+v"(x[1][2]), "+v"(x[1][3]), "+v"(x[2][0]), "+v"(x[2][1]), "+v"(x[2][2]), "+v"(x[2][3]),
                 "+v"(x[3][0]), "+v"(x[3][1]), "+v"(x[3][2]), "+v"(x[3][3]));
}

/* Step 13: the X phase's softmax of a wave's two query tiles (schedule.h). The same bits as
 * online_softmax + step 6's lazy rescale, in another instruction mix:
 *   - no packed-F32 VALU: under the reading of LLVM's co-issue rule that holds packed-F32 ops behind
 *     every MFMA of the SIMD (the model's band, docs/hip-gfx942.md), they could not issue at all
 *     while the other wave's MFMA batch runs; the fmas and sums are plain v_fma_f32 / v_add_f32, in
 *     the same order (a v_pk op is two IEEE ops, element by element);
 *   - alpha = exp2(q_old - q_new) is taken only when some lane's running max moved (one wave ballot,
 *     as step 6 decides the O rescale): on a tile that raises no max every alpha is exactly 1 (or 0
 *     for a row that has seen only -Inf, whose O is +0 or NaN and whose l is 0 or NaN, or NaN for a
 *     row holding +Inf, whose l is NaN), so l + sum and the unscaled O give the same outputs;
 *   - both query tiles' row maxima interleaved, so one ds_bpermute round trip waits for two. */
/* kRows (ABI v2's kernels): each query row has its own key limit too, row_lim + 16 mt for the lane's
 * row of query tile mt (keys of the tile at or past it are masked: a causal mask's diagonal). */
template <bool kRows = false, class Mid>
__device__ __forceinline__ uint64_t softmax_x(RowState (&st)[kMTiles], f32x4 (&s)[kMTiles][kKTiles],
                                              bf16x4 (&p)[kMTiles][kKTiles], float (&alpha)[kMTiles],
                                              float scale_log2e, bool partial, uint32_t keys_left, int lane, int g,
                                              Mid&& mid, int row_lim = 0) {
#pragma clang fp contract(off)
  if (partial) {
    /* key = tile_key(kt, 4g + r) = 8g + (a constant of kt, r) >= keys_left: compared against the
     * lane's keys_left - 8g, so no lane constant is hoisted out of this branch (16 VGPRs) */
    int kl = (int)keys_left - 8 * g;
    asm volatile("" : "+v"(kl));
#pragma unroll
    for (int mt = 0; mt < kMTiles; ++mt) {
      int klm = kl; /* kRows: min(keys_left, row_lim + 16 mt) - 8g */
      if constexpr (kRows) klm = kl + __builtin_elementwise_min(0, row_lim - (int)keys_left + 16 * mt);
#pragma unroll
      for (int kt = 0; kt < kKTiles; ++kt)
#pragma unroll
        for (int r = 0; r < 4; ++r)
          if (tile_key(kt, r) >= klm) s[mt][kt][r] = neg_inf();
    }
  }
  float mx[kMTiles];
#pragma unroll
  for (int mt = 0; mt < kMTiles; ++mt) {
    mx[mt] = neg_inf();
#pragma unroll
    for (int kt = 0; kt < kKTiles; ++kt)
#pragma unroll
      for (int r = 0; r < 4; ++r) mx[mt] = __builtin_fmaxf(mx[mt], s[mt][kt][r]);
  }
#pragma unroll
  for (int mt = 0; mt < kMTiles; ++mt) mx[mt] = __builtin_fmaxf(mx[mt], lane_xor(mx[mt], lane, 16));
#pragma unroll
  for (int mt = 0; mt < kMTiles; ++mt) mx[mt] = __builtin_fmaxf(mx[mt], lane_xor(mx[mt], lane, 32));

  float m_new[kMTiles], q[kMTiles], sum[kMTiles];
  bool rise = false;
#pragma unroll
  for (int mt = 0; mt < kMTiles; ++mt) {
    m_new[mt] = __builtin_fmaxf(st[mt].m, mx[mt]);
    const float m_use = (m_new[mt] == neg_inf()) ? 0.0f : m_new[mt];
    q[mt] = m_use * scale_log2e;
    /* A row whose running max was -Inf has O in {+0, NaN} and l in {0, NaN}: its alpha of 0 leaves both
     * as they are (x * 0 = x there, fma(l, 0, sum) = l + sum), so only finite old maxima count (the
     * first tile then never rescales). Bitwise, not ||: a short-circuit became divergent branches. */
    rise = rise | ((m_new[mt] != st[mt].m) & (st[mt].m != neg_inf()));
  }
  /* A scalar branch, early (the phase's tail is on the critical path): the ballot through an empty
   * asm, since clang turns `ballot(x) != 0` back into a divergent branch on x (exec-masked). Without a
   * rise alpha is 1 for every lane: fma(l, 1, sum) = l + sum, and the O rescale is skipped. */
  uint64_t any_rise = __builtin_amdgcn_ballot_w64(rise);
  asm volatile("" : "+s"(any_rise));
  if (__builtin_expect(any_rise != 0u, 0)) {
#pragma unroll
    for (int mt = 0; mt < kMTiles; ++mt)
      alpha[mt] = (st[mt].m == neg_inf()) ? 0.0f : __builtin_amdgcn_exp2f(st[mt].q - q[mt]);
  } else {
#pragma unroll
    for (int mt = 0; mt < kMTiles; ++mt) alpha[mt] = 1.0f;
  }
  /* The 32 exponentials of the tile in one run, between two empty asm that take their arguments and
   * their results: a quarter-rate v_exp_f32 holds the SIMD's VALU for 4 issue cycles, one more than
   * the other wave's 16-clock MFMA leaves, so each costs the matrix core at least one cycle; in a run
   * exactly one (interleaved with other VALU the compiler placed them where they cost two or three). */
  float e[kMTiles][kKTiles][4];
#pragma unroll
  for (int mt = 0; mt < kMTiles; ++mt)
#pragma unroll
    for (int kt = 0; kt < kKTiles; ++kt)
#pragma unroll
      for (int r = 0; r < 4; ++r) e[mt][kt][r] = __builtin_fmaf(s[mt][kt][r], scale_log2e, -q[mt]);
#pragma unroll
  for (int mt = 0; mt < kMTiles; ++mt) tie16(e[mt]);
#pragma unroll
  for (int mt = 0; mt < kMTiles; ++mt)
#pragma unroll
    for (int kt = 0; kt < kKTiles; ++kt)
#pragma unroll
      for (int r = 0; r < 4; ++r) e[mt][kt][r] = __builtin_amdgcn_exp2f(e[mt][kt][r]);
#pragma unroll
  for (int mt = 0; mt < kMTiles; ++mt) tie16(e[mt]);
  mid(); /* the caller's work for the middle of the phase (group 1's V^T stores) */
#pragma unroll
  for (int mt = 0; mt < kMTiles; ++mt) {
    /* the two lanes of step 7's paired sum, which start at 0: 0 + e = e for every e an exp2 gives
     * (never -0; a NaN stays the same NaN) */
    float x = e[mt][0][0], y = e[mt][0][1];
#pragma unroll
    for (int kt = 0; kt < kKTiles; ++kt) {
      if (kt > 0) {
        x = x + e[mt][kt][0];
        y = y + e[mt][kt][1];
      }
      x = x + e[mt][kt][2];
      y = y + e[mt][kt][3];
      p[mt][kt] = __builtin_bit_cast(bf16x4, u32x2{pack_p_bf16_rna(e[mt][kt][0], e[mt][kt][1]),
                                                   pack_p_bf16_rna(e[mt][kt][2], e[mt][kt][3])});
    }
    sum[mt] = x + y;
  }
#pragma unroll
  for (int mt = 0; mt < kMTiles; ++mt) st[mt].l = __builtin_fmaf(st[mt].l, alpha[mt], sum[mt]);
#pragma unroll
  for (int mt = 0; mt < kMTiles; ++mt) {
    st[mt].m = m_new[mt];
    st[mt].q = q[mt];
  }
  return any_rise;
}

/* The O rescale of a tile that raised some row's max (softmax_x returned non-zero): at the head of the
 * next M phase, before the PV MFMAs that accumulate into O (a rare branch of the M phase). */
__device__ __forceinline__ void rescale_o(f32x4 (&o)[kMTiles][kDTiles], const float (&alpha)[kMTiles]) {
#pragma unroll
  for (int mt = 0; mt < kMTiles; ++mt)
#pragma unroll
    for (int dt = 0; dt < kDTiles; ++dt)
#pragma unroll
      for (int r = 0; r < 4; ++r) o[mt][dt][r] = o[mt][dt][r] * alpha[mt];
}

}  // namespace ra_gfx942

#endif /* RA_HIP_SOFTMAX_H */
