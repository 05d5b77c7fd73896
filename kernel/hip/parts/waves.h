/*
 * waves.h — the key loop of a q-block whose rows fit one wave (at most kRowsPerWave = 32: a decode, a
 * GQA decode's group of query heads as rows, kernel/common/gqa_rows.h), with the block's keys spread
 * over its waves (issue 40, docs/hip-gfx942.md "The decode kernels").
 *
 * The dense key loop (schedule.h) gives each wave 32 rows and every key: on a 4-row block one wave
 * computes (128 MFMAs and a softmax of 32 scores a lane per 64-key tile) while the other seven only
 * copy. Here wave w computes query tile mt = w / 4 (rows 16 mt .. 16 mt + 15 of the block) against
 * score key tile kt = w % 4 of every 64-key tile (keys tile_key(kt, 0..15), layout.h): 8 MFMAs of
 * S^T = K Q^T and 8 of O^T += V^T P^T a tile, a softmax of 4 scores a lane, so the four waves of a
 * group, one per SIMD, share the tile's work. The tile's trip to LDS, the two groups' ping-pong and
 * every barrier are schedule.h's, unchanged (its table and LDS plan hold as written): only what a
 * wave computes between the barriers differs, and it reads the same buffers in the same phases
 * (its M phase's LDS reads are issued at the phase's start, after the barrier, no prefetch before
 * it). Each wave keeps its own running (max, sum, O) over its keys; at the end waves kt = 1..3 write
 * theirs to LDS and wave kt = 0 merges the four in kt order (fixed, independent of timing): Q = max
 * q_kt, O = sum o_kt 2^(q_kt - Q), l = sum l_kt 2^(q_kt - Q), as step 10's merge combines parts
 * (a wave that saw no key, or only -Inf scores, has q = -Inf and weight 0). Then the dense epilogue
 * (O / l, rounded once) or a split part's fp32 record (store_partial's layout, q = -Inf where every
 * score was -Inf), which step 10's merge reads as it reads the dense split's.
 */
#ifndef RA_HIP_WAVES_H
#define RA_HIP_WAVES_H

#include "copy.h"
#include "dispatch.h"
#include "epilogue.h"
#include "layout.h"
#include "mfma.h"
#include "schedule.h"
#include "softmax.h"

namespace ra_gfx942 {

/* A wave's LDS fragment addresses for its score key tile kt, as FragAddr (mainloop.h) but four of
 * each: K fragment p (dims 32p + 8g .. +7 of key tile_key(kt, li)) and the V^T half a PV k-step kt
 * reads, 8 bytes (keys tile_key(kt, 4g .. 4g + 3) of dim 16 dt + li; dt >> 2 is the read's
 * immediate). Absolute LDS byte addresses, moved buffer to buffer in each X phase. */
struct WaveFrags {
  uint32_t k[4];
  uint32_t v[4];
  __device__ __forceinline__ WaveFrags(int kt, int li, int g, uint32_t kbase, uint32_t vbase) {
#pragma unroll
    for (int p = 0; p < 4; ++p) k[p] = kbase + 16u * (uint32_t)k_lds_index(tile_key(kt, li), 4 * p + g);
#pragma unroll
    for (int d = 0; d < 4; ++d)
      v[d] = vbase + 16u * (uint32_t)vt_lds_index(16 * d + li, 4 * (kt >> 1) + g) + 8u * (uint32_t)(kt & 1);
    asm volatile("" : "+v"(k[0]), "+v"(k[1]), "+v"(k[2]), "+v"(k[3]), "+v"(v[0]), "+v"(v[1]), "+v"(v[2]), "+v"(v[3]));
  }
};
typedef const u32x2 __attribute__((address_space(3)))* LdsPtr2;

/* A wave's M phase: O^T += V^T P^T of its keys (kPV, 8 MFMAs), then S^T = K Q^T of them (kS, 8). Its
 * 8 + 4 fragment reads first (the phase's barrier published them), the copies' 16 hooks spread over
 * the MFMAs (one or two after each). */
template <bool kPV, bool kS, bool kPrio, class Hook>
__device__ __forceinline__ void m_phase_w(f32x4& s, f32x4 (&o)[kDTiles], const bf16x4& p, const u32x4 (&qf)[4],
                                          const WaveFrags& fa, Hook&& hook) {
  constexpr int len = 8 * ((int)kPV + (int)kS);
  if constexpr (kPrio) __builtin_amdgcn_s_setprio(1);
  u32x2 vf[kDTiles];
  u32x4 kf[4];
  if constexpr (kPV) {
#pragma unroll
    for (int dt = 0; dt < kDTiles; ++dt) vf[dt] = *(LdsPtr2)(uintptr_t)(fa.v[dt & 3] + 8192u * (uint32_t)(dt >> 2));
  }
  if constexpr (kS) {
#pragma unroll
    for (int q = 0; q < 4; ++q) kf[q] = *(LdsPtr)(uintptr_t)fa.k[q];
  }
  static_for<len>([&](auto ic) {
    constexpr int i = decltype(ic)::value;
    if constexpr (kPV && i < kDTiles) {
      mfma_16x16x16_bf16(o[i], __builtin_bit_cast(bf16x4, vf[i]), p);
    } else {
      constexpr int j = kPV ? i - kDTiles : i, q = j >> 1;
      if constexpr (j == 0)
        mfma_16x16x16_bf16_first(s, lo_half(kf[0]), lo_half(qf[0]));
      else if constexpr ((j & 1) == 0)
        mfma_16x16x16_bf16(s, lo_half(kf[q]), lo_half(qf[q]));
      else
        mfma_16x16x16_bf16(s, hi_half(kf[q]), hi_half(qf[q]));
    }
    static_for<16 / len>([&](auto hc) { hook(Int<i * (16 / len) + decltype(hc)::value>{}); });
  });
}

#if RA_INJECT_SLOWDOWN_PCT > 0
/* Fire drill (schedule.h's inject_slowdown for a wave's share): about RA_INJECT_SLOWDOWN_PCT % more
 * MFMA work per tile (16 MFMAs is the wave's real work) on throw-away accumulators. */
__device__ __forceinline__ void inject_slowdown_w(const u32x4 (&qf)[4]) {
  constexpr int kExtra = (16 * RA_INJECT_SLOWDOWN_PCT + 50) / 100;
  f32x4 burn[4] = {};
#pragma unroll
  for (int i = 0; i < kExtra; ++i) {
    if (i < 4)
      mfma_16x16x16_bf16_first(burn[i], lo_half(qf[i]), hi_half(qf[i]));
    else
      mfma_16x16x16_bf16(burn[i & 3], lo_half(qf[i & 3]), hi_half(qf[i & 3]));
  }
  mfma_fence(burn[0], burn[1], burn[2], burn[3]);
}
#endif

/* The online softmax of a wave's 16 keys of the tile (softmax_x's rules and non-finite semantics on
 * one score fragment: keys at or past keys_left -Inf before the max, alpha 0 while the row has seen
 * nothing finite, the O rescale only where some row's max rose). kbase: tile_key(kt, 4g) - 8g. */
template <class Mid>
__device__ __forceinline__ uint64_t softmax_w(RowState& st, f32x4& s, bf16x4& p, float& alpha, float scale_log2e,
                                              bool partial, uint32_t keys_left, int kbase, int lane, int g, Mid&& mid) {
#pragma clang fp contract(off)
  if (partial) {
    int kl = (int)keys_left - 8 * g - kbase;
    asm volatile("" : "+v"(kl));
#pragma unroll
    for (int r = 0; r < 4; ++r)
      if (r >= kl) s[r] = neg_inf();
  }
  float mx = neg_inf();
#pragma unroll
  for (int r = 0; r < 4; ++r) mx = __builtin_fmaxf(mx, s[r]);
  mx = __builtin_fmaxf(mx, lane_xor(mx, lane, 16));
  mx = __builtin_fmaxf(mx, lane_xor(mx, lane, 32));
  const float m_new = __builtin_fmaxf(st.m, mx);
  const float q = (m_new == neg_inf() ? 0.0f : m_new) * scale_log2e;
  const bool rise = (m_new != st.m) & (st.m != neg_inf());
  uint64_t any_rise = __builtin_amdgcn_ballot_w64(rise);
  asm volatile("" : "+s"(any_rise));
  if (__builtin_expect(any_rise != 0u, 0))
    alpha = (st.m == neg_inf()) ? 0.0f : __builtin_amdgcn_exp2f(st.q - q);
  else
    alpha = 1.0f;
  float e[4];
#pragma unroll
  for (int r = 0; r < 4; ++r) e[r] = __builtin_amdgcn_exp2f(__builtin_fmaf(s[r], scale_log2e, -q));
  mid(); /* the V^T stores of the wave's staged rows */
  const float sum = (e[0] + e[2]) + (e[1] + e[3]);
  p = __builtin_bit_cast(bf16x4, u32x2{pack_p_bf16_rna(e[0], e[1]), pack_p_bf16_rna(e[2], e[3])});
  st.l = __builtin_fmaf(st.l, alpha, sum);
  st.m = m_new;
  st.q = q;
  return any_rise;
}

__device__ __forceinline__ void m_end_s1(f32x4& s) {
#if !RA_HIP_MFMA_BUILTIN
  __builtin_amdgcn_sched_barrier(0);
  asm volatile("s_waitcnt vmcnt(0)\n\ts_barrier\n\ts_setprio 0\n\ts_nop 3" : "+v"(s)::"memory");
  __builtin_amdgcn_sched_barrier(0);
#else
  (void)s;
  m_end();
#endif
}
/* O and P through an empty asm before the barrier (mfma_entry_tie2's rule: the asm of the waits and
 * the barrier are the 2 wait states); the fence after the last PV (fence_o's). */
__device__ __forceinline__ void entry_tie_w(f32x4 (&o)[kDTiles], bf16x4& p) {
#if !RA_HIP_MFMA_BUILTIN
  asm volatile(""
               : "+v"(o[0]), "+v"(o[1]), "+v"(o[2]), "+v"(o[3]), "+v"(o[4]), "+v"(o[5]), "+v"(o[6]), "+v"(o[7]),
                 "+v"(p));
#else
  (void)o;
  (void)p;
#endif
}
__device__ __forceinline__ void fence_o_w(f32x4 (&o)[kDTiles]) {
  asm volatile(RA_MFMA_FENCE_ASM
               : "+v"(o[0]), "+v"(o[1]), "+v"(o[2]), "+v"(o[3]), "+v"(o[4]), "+v"(o[5]), "+v"(o[6]), "+v"(o[7]));
}

/* schedule.h's key_loop with the wave's share of each tile (above): the same prologue, phases,
 * copies and barriers, in the same order. */
template <int L, bool kActive, bool kFits>
__device__ __forceinline__ void key_loop_w(const KeyLoop& c, u32x4 (*lds_k)[kBlockK * kKGranules],
                                           u32x4 (*lds_vt)[kHeadDim * kVGranules], const u32x4 (&qf)[4],
                                           f32x4 (&o)[kDTiles], RowState& st, int kt) {
  using Copy = KvCopy<L>;
  const Copy cp(c.w, c.lane);
  const uint16_t* kb = uniform_ptr(c.kb);
  const uint16_t* vb = uniform_ptr(c.vb);
  WaveFrags fa(kt, c.li, c.g, lds_addr(lds_k[0]), lds_addr(lds_vt[1]));
  const int kbase = 32 * (kt >> 1) + 4 * (kt & 1); /* tile_key(kt, 4g + r) = kbase + 8g + r */
  const uint32_t kbuf[2] = {lds_addr(lds_k[0]), lds_addr(lds_k[1])};
  const uint32_t grp = (uint32_t)c.w >> 2;
  f32x4 s;
  bf16x4 p = {}; /* M(0) reads none (kPV off); set for the host pass's -Wuninitialized */
  float alpha;
  uint64_t rise = 0u;
  const uint32_t n = c.n;
  if constexpr (kActive) {
    asm volatile("" : "+v"(o[0]), "+v"(o[1]), "+v"(o[2]), "+v"(o[3]), "+v"(o[4]), "+v"(o[5]), "+v"(o[6]), "+v"(o[7]));
    asm volatile("" : "+v"(st.m), "+v"(st.l), "+v"(st.q));
  }
  unsigned int vst[kVKeysPerWave];
  auto copies = [&](typename Copy::KTile& ktl, const typename Copy::VTile& vt) {
    return copy_hook<kFits>(cp, c, kb, vb, ktl, vt, vst);
  };
  auto copies_only = [&](typename Copy::KTile& ktl, const typename Copy::VTile& vt) {
    static_for<kDmaRows + kVKeysPerWave>(copies(ktl, vt));
  };
  static_assert(kDmaRows + kVKeysPerWave == 16, "m_phase_w spreads 16 copy hooks");

  {
    auto ktl = cp.template k_tile<kFits>(c.a, cp.k_row_ptr(c.a, kb, c.key0(0u)), c.key0(0u), kbuf[0]);
    static_for<kDmaRows>([&](auto ic) { cp.template k_row<kFits, decltype(ic)::value>(c.a, kb, ktl); });
  }
  wait_vmcnt0();
  phase_barrier();
  if (grp == 1u) {
    const auto vt = cp.template v_tile<kFits>(c.a, cp.v_row_ptr(c.a, vb, c.key0(0u)), c.key0(0u));
    static_for<kVKeysPerWave>([&](auto ec) { cp.template v_row<kFits, decltype(ec)::value>(c.a, vb, vt, vst[ec.value]); });
    cp.store_vt(vst, lds_vt[0]);
    wait_lgkmcnt0();
    wait_vmcnt0();
    phase_barrier();
  }
  {
    auto ktl = cp.template k_tile<kFits>(c.a, cp.k_row_ptr(c.a, kb, c.key0(1u)), c.key0(1u), kbuf[1]);
    const auto vt = cp.template v_tile<kFits>(c.a, cp.v_row_ptr(c.a, vb, c.key0(grp)), c.key0(grp));
    if constexpr (kActive) {
      m_phase_w<false, true, true>(s, o, p, qf, fa, copies(ktl, vt));
#if RA_INJECT_SLOWDOWN_PCT > 0
      inject_slowdown_w(qf);
#endif
    } else
      copies_only(ktl, vt);
  }
  if constexpr (kActive)
    m_end_s1(s);
  else
    m_end();

  auto x_phase = [&](uint32_t j, auto&& before_barrier) {
    const uint32_t P = j & 1u;
    if constexpr (kActive) { /* K to buffer P ^ 1, V^T to buffer P */
      const uint32_t dk = P ? 0u - (uint32_t)kLdsKBytes : (uint32_t)kLdsKBytes;
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        fa.k[i] += dk;
        fa.v[i] -= dk;
      }
    }
    auto store = [&] { cp.store_vt(vst, lds_vt[P ^ grp]); };
    if constexpr (kActive) {
      const uint32_t key0 = c.key0(j);
      rise = softmax_w(st, s, p, alpha, c.a.scale_log2e, key0 + (uint32_t)kBlockK > c.a.seqlen_k, c.a.seqlen_k - key0,
                       kbase, c.lane, c.g, store);
      if (__builtin_expect(rise != 0u, 0)) {
#pragma unroll
        for (int dt = 0; dt < kDTiles; ++dt)
#pragma unroll
          for (int r = 0; r < 4; ++r) o[dt][r] = o[dt][r] * alpha;
      }
      entry_tie_w(o, p);
    } else {
      store();
    }
    wait_lgkmcnt0();
    wait_vmcnt0();
    before_barrier();
    x_barrier();
  };
  auto m_next = [&](typename Copy::KTile& ktl, const typename Copy::VTile& vt) {
    if constexpr (kActive) {
      m_phase_w<true, true, false>(s, o, p, qf, fa, copies(ktl, vt));
#if RA_INJECT_SLOWDOWN_PCT > 0
      inject_slowdown_w(qf);
#endif
      m_end_s1(s);
    } else {
      copies_only(ktl, vt);
      m_end();
    }
  };
  key_trips<L, kFits>(c, cp, kb, vb, lds_k, n, grp, x_phase, m_next);
  if constexpr (kActive) m_phase_w<true, false, false>(s, o, p, qf, fa, [](auto) {});
  if (grp == 0u) m_end();
  if constexpr (kActive) fence_o_w(o);
}

/* The merged partial of the block's rows: wave kt = 0 of each query tile folds in the partials of
 * waves kt = 1, 2, 3 (in that order) that they leave in LDS (the key loop's buffers, free after a
 * barrier: query tile 0's in the K buffers, 1's in the V^T buffers), each lane's fragments at its own
 * lane slot, so no lane exchange. In wave kt = 0 it leaves O (the sum) in o and returns l (the row's
 * sum) and q (the common offset, -Inf where no wave saw a finite score). */
struct WavesMerged {
  float l;
  float q;
};
constexpr int kWavePartialBytes = 3 * (kDTiles * 64 * 16 + 64 * 8); /* waves kt = 1..3 of a query tile */
static_assert(kWavePartialBytes <= 2 * kLdsKBytes && kWavePartialBytes <= 2 * kLdsVBytes,
              "a query tile's partials fit the K (or V^T) buffers");
__device__ __forceinline__ WavesMerged merge_waves(f32x4 (&o)[kDTiles], const RowState& st, bool active, int kt,
                                                   int lane, u32x4* lds) {
#pragma clang fp contract(off)
  typedef float f32x2 __attribute__((ext_vector_type(2)));
  f32x4* ob = reinterpret_cast<f32x4*>(lds);             /* [kt - 1][dt][lane] */
  f32x2* sb = reinterpret_cast<f32x2*>(ob + 3 * kDTiles * 64); /* [kt - 1][lane]: q, l */
  const float l_row = row_sum(st.l, lane);
  const float q_own = st.m == neg_inf() ? neg_inf() : st.q;
  wait_lgkmcnt0(); /* every wave is past its key loop's last LDS read */
  phase_barrier();
  if (active && kt != 0) {
#pragma unroll
    for (int dt = 0; dt < kDTiles; ++dt) ob[((kt - 1) * kDTiles + dt) * 64 + lane] = o[dt];
    sb[(kt - 1) * 64 + lane] = f32x2{q_own, l_row};
  }
  wait_lgkmcnt0();
  phase_barrier();
  WavesMerged r{l_row, q_own};
  if (!active || kt != 0) return r;
  f32x2 ql[4];
  ql[0] = f32x2{q_own, l_row};
#pragma unroll
  for (int k = 1; k < 4; ++k) ql[k] = sb[(k - 1) * 64 + lane];
  float qm = neg_inf();
#pragma unroll
  for (int k = 0; k < 4; ++k) qm = __builtin_fmaxf(qm, ql[k].x);
  r.q = qm;
  if (qm == neg_inf()) qm = 0.0f; /* no finite score: l = 0 and 0 / 0 = NaN, as the dense kernel */
  float wgt[4];
#pragma unroll
  for (int k = 0; k < 4; ++k) wgt[k] = __builtin_amdgcn_exp2f(ql[k].x - qm);
  float l = l_row * wgt[0];
#pragma unroll
  for (int dt = 0; dt < kDTiles; ++dt)
#pragma unroll
    for (int e = 0; e < 4; ++e) o[dt][e] = o[dt][e] * wgt[0];
#pragma unroll
  for (int k = 1; k < 4; ++k) {
    l = __builtin_fmaf(ql[k].y, wgt[k], l);
#pragma unroll
    for (int dt = 0; dt < kDTiles; ++dt) {
      const f32x4 x = ob[((k - 1) * kDTiles + dt) * 64 + lane];
#pragma unroll
      for (int e = 0; e < 4; ++e) o[dt][e] = __builtin_fmaf(x[e], wgt[k], o[dt][e]);
    }
  }
  r.l = l;
  return r;
}

}  // namespace ra_gfx942

#endif /* RA_HIP_WAVES_H */
