/*
 * schedule.h — a block's key loop as a two-group ping-pong, so the matrix core does not wait (step 13,
 * docs/hip-gfx942.md).
 *
 * Group 0 = waves 0-3, group 1 = waves 4-7: one wave of each on every SIMD (wave i sits on SIMD i % 4).
 * A wave alternates an M phase — its MFMAs and their LDS reads only, at s_setprio 1: O += V^T(j-1)
 * P(j-1), then S(j) = K(j) Q^T — and an X phase: the online softmax of S(j) into P(j) with the O
 * rescale, its share of the copies, and the first LDS reads of its next M phase. Group 1 runs one phase
 * behind group 0, so on every SIMD one wave feeds the matrix core while the other runs its softmax on
 * the VALU slots the MFMAs leave; every phase ends at one s_barrier of the block, which holds the two
 * groups one phase apart:
 *
 *   phase     0      1      2      3     ...   2j       2j+1    ...   2n       2n+1
 *   group 0   M(0)   X(0)   M(1)   X(1)        M(j)     X(j)          M(n)     -
 *   group 1   X(-1)  M(0)   X(0)   M(1)        X(j-1)   M(j)          X(n-1)   M(n)
 *   (M(0) has no PV, M(n) no S; group 0 meets one barrier after M(n), group 1 none: the same count)
 *
 * PV before S: P(j-1) dies before S(j) is born, so the M phase holds 112 accumulator and operand
 * registers less than the 112 + 32 of S-then-PV; and the M phase can start on operands read before
 * its barrier (below).
 *
 * LDS, 64 KiB: K(j) in kbuf[j&1], V^T(j) in vbuf[j&1].
 *   V^T(j) is written in phase 2j by group 1 (in X(j-1); group 0 is in M(j)), so the first kLdsDepth
 *   fragment reads of PV(j) can be issued at the end of X(j) (phases 2j+1 and 2j+2), before the
 *   barrier: M(j+1) starts with its operands in VGPRs, whatever the LDS latency. V^T(j-2), in the
 *   same buffer, was last read in phase 2j-1.
 *   K(j) is written in phases 2j-2 (group 1's rows, in X(j-2)) and 2j-1 (group 0's, in X(j-1)),
 *   direct to LDS, and read in M(j), phases 2j and 2j+1; K(j-2), in the same buffer, was last read
 *   in phase 2j-3.
 * A writer waits for its writes (lgkmcnt, and vmcnt for the direct-to-LDS loads) before the barrier
 * that publishes them; the emulator's LDS race and waitcnt checks prove the plan on every launch.
 *
 * The phases are pinned in the instruction stream: each barrier is an asm statement with a memory
 * clobber between two sched_barrier(0) (no instruction is scheduled across), and the M phase's MFMAs
 * and LDS reads keep their order (asm volatile, and memory operations against it).
 */
#ifndef RA_HIP_SCHEDULE_H
#define RA_HIP_SCHEDULE_H

#include "copy.h"
#include "dispatch.h"
#include "layout.h"
#include "mainloop.h"
#include "mfma.h"
#include "softmax.h"

namespace ra_gfx942 {

__device__ __forceinline__ void phase_barrier() {
  __builtin_amdgcn_sched_barrier(0);
  asm volatile("s_barrier" ::: "memory");
  __builtin_amdgcn_sched_barrier(0);
}
__device__ __forceinline__ void wait_vmcnt0() { asm volatile("s_waitcnt vmcnt(0)" ::: "memory"); }
__device__ __forceinline__ void wait_lgkmcnt0() { asm volatile("s_waitcnt lgkmcnt(0)" ::: "memory"); }
#define RA_HIP_STR_(x) #x
#define RA_HIP_STR(x) RA_HIP_STR_(x)
#define RA_HIP_LDS_DEPTH 8 /* kLdsDepth, for the asm text below (checked against it) */
static_assert(RA_HIP_LDS_DEPTH == kLdsDepth, "RA_HIP_LDS_DEPTH must spell kLdsDepth");
__device__ __forceinline__ void wait_lgkmcnt_depth() {
  asm volatile("s_waitcnt lgkmcnt(" RA_HIP_STR(RA_HIP_LDS_DEPTH) ")" ::: "memory");
}

/* The first kLdsDepth reads of an M phase, issued at the end of the X phase before it: V^T fragments
 * (16 ..) of a phase that starts with PV, K fragments (0 ..) of M(0). */
template <bool kPV>
__device__ __forceinline__ void prefetch(u32x4 (&f)[kFrags], const u32x4* lds_k, const u32x4* lds_vt,
                                         const FragAddr& fa) {
#pragma unroll
  for (int q = 0; q < kLdsDepth; ++q) {
    const int i = kPV ? 16 + 2 * q : q; /* m_phase's stream order: PV's c = 0 fragments first */
    f[i] = read_frag(i, lds_k, lds_vt, fa);
  }
}

/* An M phase: O += V^T P (kPV), then S = K Q^T (kS); its 16 or 32 LDS fragment reads one stream
 * kLdsDepth ahead of their MFMAs, the first kLdsDepth issued by prefetch<kPV>. Stream position q is
 * fragment 16 + q (V^T) while PV runs, then fragment q - 16 or q (K). */
template <bool kPV, bool kS>
__device__ __forceinline__ void m_phase(f32x4 (&s)[kMTiles][kKTiles], f32x4 (&o)[kMTiles][kDTiles],
                                        bf16x4 (&p)[kMTiles][kKTiles], const u32x4 (&qf)[kMTiles][4],
                                        u32x4 (&f)[kFrags], const u32x4* lds_k, const u32x4* lds_vt,
                                        const FragAddr& fa, uint64_t rise, const float (&alpha)[kMTiles]) {
  constexpr int D = kLdsDepth;
  constexpr int len = 16 * ((int)kPV + (int)kS);
  /* PV's fragments key half first (c = 0 for every dim tile, then c = 1): the kLdsDepth <= 8 read
   * before the phase's barrier then touch keys 0-31 only, which group 1 wrote a phase earlier (keys
   * 32-63 are group 0's, written in group 0's own last X phase). Each O chain still sums c = 0 then
   * c = 1, the same order as before: the same bits. */
  constexpr auto frag = [](int q) {
    return kPV ? (q < 16 ? 16 + 2 * (q & 7) + (q >> 3) : q - 16) : q;
  };
  static_assert(!kPV || D <= 8, "the prefetched PV reads must stay in keys 0-31");
  __builtin_amdgcn_s_setprio(1);
#pragma unroll
  for (int q = 0; q < len; ++q) {
    const int i = frag(q);
    if (i >= 16) {
      const int dt = (i - 16) >> 1, c = (i - 16) & 1;
#pragma unroll
      for (int mt = 0; mt < kMTiles; ++mt) mfma_16x16x16_bf16(o[mt][dt], lo_half(f[i]), p[mt][2 * c]);
#pragma unroll
      for (int mt = 0; mt < kMTiles; ++mt) mfma_16x16x16_bf16(o[mt][dt], hi_half(f[i]), p[mt][2 * c + 1]);
    } else {
      const int kt = i >> 2, pp = i & 3;
#pragma unroll
      for (int mt = 0; mt < kMTiles; ++mt) {
        if (pp == 0)
          mfma_16x16x16_bf16_first(s[mt][kt], lo_half(f[i]), lo_half(qf[mt][pp]));
        else
          mfma_16x16x16_bf16(s[mt][kt], lo_half(f[i]), lo_half(qf[mt][pp]));
      }
#pragma unroll
      for (int mt = 0; mt < kMTiles; ++mt) mfma_16x16x16_bf16(s[mt][kt], hi_half(f[i]), hi_half(qf[mt][pp]));
    }
    /* The read kLdsDepth ahead after this fragment's MFMAs: the phase opens on an MFMA. */
    if (q + D < len) f[frag(q + D)] = read_frag(frag(q + D), lds_k, lds_vt, fa);
  }
}

/* The end of an M phase: the barrier, then the priority back to 0 (lowered after the barrier, the
 * wave does not lose the cycles between its last MFMA and the barrier to the other wave's VALU). */
__device__ __forceinline__ void m_end() {
  __builtin_amdgcn_sched_barrier(0);
  asm volatile("s_barrier\n\ts_setprio 0" ::: "memory");
  __builtin_amdgcn_sched_barrier(0);
}

/* After an M phase, before VALU reads its results: 8 wait states (passes + 3 of a 16x16x16 MFMA is
 * 7), tied to the accumulators; placed after the barrier, so the other group's M phase does not wait
 * for it. */
__device__ __forceinline__ void fence_s(f32x4 (&s)[kMTiles][kKTiles]) {
  mfma_fence(s[0][0], s[0][1], s[0][2], s[0][3], s[1][0], s[1][1], s[1][2], s[1][3]);
}
__device__ __forceinline__ void tie_o(f32x4 (&o)[kMTiles][kDTiles]) {
  asm volatile(""
               : "+v"(o[0][0]), "+v"(o[0][1]), "+v"(o[0][2]), "+v"(o[0][3]), "+v"(o[0][4]), "+v"(o[0][5]),
                 "+v"(o[0][6]), "+v"(o[0][7]), "+v"(o[1][0]), "+v"(o[1][1]), "+v"(o[1][2]), "+v"(o[1][3]),
                 "+v"(o[1][4]), "+v"(o[1][5]), "+v"(o[1][6]), "+v"(o[1][7]));
}
__device__ __forceinline__ void fence_o(f32x4 (&o)[kMTiles][kDTiles]) {
  asm volatile(RA_MFMA_FENCE_ASM
               : "+v"(o[0][0]), "+v"(o[0][1]), "+v"(o[0][2]), "+v"(o[0][3]), "+v"(o[0][4]), "+v"(o[0][5]),
                 "+v"(o[0][6]), "+v"(o[0][7]), "+v"(o[1][0]), "+v"(o[1][1]), "+v"(o[1][2]), "+v"(o[1][3]),
                 "+v"(o[1][4]), "+v"(o[1][5]), "+v"(o[1][6]), "+v"(o[1][7]));
}

/* A buffer parity as a template constant (the key loop's lambdas take it as their `auto` argument). */
template <int P>
struct Parity {
  static constexpr int value = P;
};

/* What the key loop of a block works on (attention_gfx942.hip sets it up). */
struct KeyLoop {
  const KernelArgs& a;
  const uint16_t* kb;
  const uint16_t* vb;
  uint32_t tile0; /* first key tile of the block (a split part's) */
  uint32_t n;     /* key tiles, >= 1 */
  bool active;    /* some of the wave's 32 query rows lie below seqlen_q */
  int w, lane, li, g;
  __device__ __forceinline__ uint32_t key0(uint32_t t) const { return (tile0 + t) * (uint32_t)kBlockK; }
};

/* The wave's K rows of tile t, direct to LDS (copy.h), by the tile's address path. */
template <int L>
__device__ __forceinline__ void copy_k(const KvCopy<L>& cp, const KeyLoop& c, uint32_t t, uint32_t kbuf) {
  const uint32_t key0 = c.key0(t);
  if (copy_fast(c.a, key0))
    cp.template dma_k<true>(c.a, c.kb, key0, kbuf);
  else
    cp.template dma_k<false>(c.a, c.kb, key0, kbuf);
}
/* Group 1: its V rows of tile t into registers. */
template <int L>
__device__ __forceinline__ void load_v(unsigned int (&v)[kVKeysPerWave], const KvCopy<L>& cp, const KeyLoop& c,
                                       uint32_t t) {
  const uint32_t key0 = c.key0(t);
  if (copy_fast(c.a, key0))
    cp.template load_v<true>(v, c.a, c.vb, key0);
  else
    cp.template load_v<false>(v, c.a, c.vb, key0);
}

/* The key loop of a wave (the table above; grp = w / 4, wave-uniform), on the block's two K and two
 * V^T buffers. One loop for both groups: what differs (the copies, group 1's X(-1) and group 0's last
 * barrier) sits in scalar branches outside the M phases. kActive: the wave has query rows below
 * seqlen_q (a wave without any still copies and meets every barrier); a template constant, so no
 * path through the loop carries S or P past a phase that does not use them. */
template <int L, bool kActive>
__device__ __forceinline__ void key_loop(const KeyLoop& c, u32x4 (*lds_k)[kBlockK * kKGranules],
                                         u32x4 (*lds_vt)[kHeadDim * kVGranules], const u32x4 (&qf)[kMTiles][4],
                                         f32x4 (&o)[kMTiles][kDTiles], RowState (&st)[kMTiles]) {
  const KvCopy<L> cp(c.w, c.lane);
  const FragAddr fa(c.li, c.g);
  const uint32_t kbuf[2] = {lds_addr(lds_k[0]), lds_addr(lds_k[1])};
  const uint32_t grp = (uint32_t)c.w >> 2;
  u32x4 f[kFrags];
  f32x4 s[kMTiles][kKTiles];
  bf16x4 p[kMTiles][kKTiles];
  float alpha[kMTiles];
  uint64_t rise = 0u;
  const uint32_t n = c.n;

  /* The accumulators' and row statistics' initial values in their registers before the pipeline
   * starts (else the compiler sinks their 70 v_mov into group 1's first X phase, which then runs
   * past the other group's M phase). */
  if constexpr (kActive) {
    tie_o(o);
#pragma unroll
    for (int mt = 0; mt < kMTiles; ++mt) asm volatile("" : "+v"(st[mt].m), "+v"(st[mt].l), "+v"(st[mt].q));
  }
  /* Prologue: K(0), every wave its rows. */
  copy_k(cp, c, 0u, kbuf[0]);
  wait_vmcnt0();
  phase_barrier();
  if (grp == 1u) { /* X(-1): its keys of V(0), its K(1) rows */
    if (n > 1u) copy_k(cp, c, 1u, kbuf[1]);
    unsigned int v[kVKeysPerWave];
    load_v(v, cp, c, 0u);
    cp.store_vt(v, lds_vt[0]);
    wait_lgkmcnt0();
    wait_vmcnt0();
    phase_barrier();
  }
  if constexpr (kActive) {
    prefetch<false>(f, lds_k[0], lds_vt[0], fa);
    m_phase<false, true>(s, o, p, qf, f, lds_k[0], lds_vt[0], fa, 0u, alpha); /* M(0): S(0) */
  }
  m_end();
  if constexpr (kActive) fence_s(s);

  /* X(j), j % 2 == P: group 0 copies its rows of K(j+1), group 1 its rows of K(j+2) and its keys of
   * V(j+1); then the first reads of PV(j), which opens M(j+1). The buffer parities are template
   * constants (the loop runs two tiles a trip), so every LDS address is a lane offset and an
   * immediate: no VALU address arithmetic in the M phase. */
  auto softmax = [&](uint32_t j, auto&& mid) {
    if constexpr (kActive) {
      const uint32_t key0 = c.key0(j);
      rise = softmax_x(st, s, p, alpha, c.a.scale_log2e, key0 + (uint32_t)kBlockK > c.a.seqlen_k, c.a.seqlen_k - key0,
                       c.lane, c.g, mid);
    } else {
      mid();
    }
  };
  auto x_phase = [&](uint32_t j) {
    const uint32_t P = j & 1u;
    const uint32_t tk = j + 1u + grp;
    if (tk < n) copy_k(cp, c, tk, kbuf[tk & 1u]);
    /* The wave's V keys: group 0 its keys 32-63 of V(j), group 1 its keys 0-31 of V(j+1), each
     * into the buffer of that tile. Loaded first, stored in the middle of the softmax (after its
     * exponentials: their latency hidden, the phase's tail kept short). The softmax is written out on
     * both sides of the branch, so the staging registers are defined wherever they are read (one
     * shared softmax carried them, undefined, round the loop). */
    /* The first kLdsDepth reads of PV(j), which opens M(j+1), also in the softmax's middle: the
     * phase's tail is then the P packing only. */
    auto pre = [&] {
      if constexpr (kActive) prefetch<true>(f, lds_k[0], lds_vt[P], fa);
    };
    const uint32_t tv = j + grp;
    if (tv < n) {
      unsigned int v[kVKeysPerWave];
      load_v(v, cp, c, tv);
      softmax(j, [&] {
        cp.store_vt(v, lds_vt[P ^ grp]);
        pre();
      });
    } else {
      softmax(j, pre);
    }
    if constexpr (kActive) {
      /* The O rescale of a tile that raised some row's max: here at the end of X, so the M phase
       * opens on its MFMAs; the entry fence spaces the VALU writes of O and P from them. */
      if (__builtin_expect(rise != 0u, 0)) rescale_o(o, alpha);
      mfma_entry_fence2(o, p);
      wait_lgkmcnt_depth(); /* this X's LDS writes landed; the kLdsDepth reads may still fly */
    } else {
      wait_lgkmcnt0();
    }
    wait_vmcnt0();
    phase_barrier();
  };
  /* M(j+1) after X(j), j % 2 == P: PV(j) from V^T buffer P, S(j+1) from K buffer P ^ 1. */
  auto m_next = [&](uint32_t j) {
    const uint32_t P = j & 1u;
    if constexpr (kActive) m_phase<true, true>(s, o, p, qf, f, lds_k[P ^ 1u], lds_vt[P], fa, rise, alpha);
    m_end();
    if constexpr (kActive) fence_s(s);
  };
  auto m_last = [&](uint32_t j) { /* M(n): the last PV, from V^T buffer (n - 1) % 2 == P */
    const uint32_t P = j & 1u;
    if constexpr (kActive) m_phase<true, false>(s, o, p, qf, f, lds_k[0], lds_vt[P], fa, rise, alpha);
  };
  /* Two tiles a trip; one exit, at the latch (a break between the X and M phases made the
   * control-flow structurizer carry the O accumulators of both sides through the M phase: 64 more
   * VGPRs and spills). */
  uint32_t j = 0;
  for (; j + 1u < n; ++j) {
    x_phase(j);
    m_next(j);
  }
  x_phase(j);
  m_last(j);
  if (grp == 0u) m_end();
  if constexpr (kActive) fence_o(o);
}

}  // namespace ra_gfx942

#endif /* RA_HIP_SCHEDULE_H */
