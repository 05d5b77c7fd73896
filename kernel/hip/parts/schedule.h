/*
 * schedule.h — a block's key loop as a two-group ping-pong, so the matrix core does not wait (step 13,
 * docs/hip-gfx942.md).
 *
 * Group 0 = waves 0-3, group 1 = waves 4-7: one wave of each on every SIMD (wave i sits on SIMD i % 4).
 * A wave alternates an M phase — its MFMAs, their LDS reads and its copies (copy.h), at s_setprio 1:
 * O += V^T(j-1) P(j-1), then S(j) = K(j) Q^T — and an X phase: the online softmax of S(j) into P(j)
 * with the O rescale, the V^T store of the rows its M phase loaded, and the first LDS reads of its
 * next M phase. Group 1 runs one phase behind group 0, so on every SIMD one wave feeds the matrix
 * core while the other runs its softmax on the VALU slots the MFMAs leave; every phase ends at one
 * s_barrier of the block, which holds the two groups one phase apart:
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
 * Where the work sits. The M phase is the matrix core's: 128 MFMAs of 16 clocks, 3 free issue slots
 * after each, where its copies go (8 K rows, 8 V rows: ~40 instructions, in the middle of a
 * fragment's 4 MFMAs so no gap between two holds more than one MFMA's 16 clocks), and no VALU (a VALU
 * op of the M wave waits behind the other wave's v_exp, 16 clocks of the SIMD's VALU, and holds its
 * next MFMA back). Everything the M phase needs is made before its barrier: its LDS addresses (the
 * fragment addresses are absolute and moved a buffer in X), its copies' scalars, s_setprio 1; so it
 * opens on its first MFMA. The X phase then holds the softmax alone, with room for the O rescale.
 *
 * LDS, 64 KiB: K(t) in kbuf[t&1], V^T(t) in vbuf[t&1].
 *   K(t) is copied, direct to LDS, in each wave's M(t-1) (group 0 phase 2t-2, group 1 phase 2t-1)
 *   and read in M(t) (phases 2t and 2t+1); K(t-2), in the same buffer, was last read in phase 2t-3.
 *   V(t): group 1's keys 0-31 are loaded in its M(t-1) (phase 2t-1) and stored in its X(t-1)
 *   (phase 2t), group 0's keys 32-63 loaded in its M(t) (phase 2t) and stored in its X(t) (phase
 *   2t+1). The first kLdsDepth fragment reads of PV(t), keys 0-31 only, are issued at the end of
 *   X(t) (phases 2t+1 and 2t+2), before the barrier: M(t+1) starts with its operands in VGPRs,
 *   whatever the LDS latency. V^T(t-2), in the same buffer, was last read in phase 2t-1.
 * A writer waits for its writes (lgkmcnt, and vmcnt for the direct-to-LDS loads) before the barrier
 * that publishes them; the emulator's LDS race and waitcnt checks prove the plan on every launch.
 *
 * The phases are pinned in the instruction stream: each barrier is an asm statement with a memory
 * clobber between two sched_barrier(0) (no instruction is scheduled across), and the M phase's MFMAs,
 * LDS reads and copies keep their order (asm volatile, and memory operations against it).
 */
#ifndef RA_HIP_SCHEDULE_H
#define RA_HIP_SCHEDULE_H

#include "copy.h"
#include "dispatch.h"
#include "layout.h"
#include "mainloop.h"
#include "mfma.h"
#include "softmax.h"
#include "stair.h"

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
__device__ __forceinline__ void prefetch(u32x4 (&f)[kFrags], const FragAddr& fa) {
#pragma unroll
  for (int q = 0; q < kLdsDepth; ++q) {
    const int i = kPV ? 16 + 2 * q : q; /* m_phase's stream order: PV's c = 0 fragments first */
    f[i] = read_frag(i, fa);
  }
}

/* An M phase: O += V^T P (kPV), then S = K Q^T (kS); its 16 or 32 LDS fragment reads one stream
 * kLdsDepth ahead of their MFMAs, the first kLdsDepth issued by prefetch<kPV>. Stream position q is
 * fragment 16 + q (V^T) while PV runs, then fragment q - 16 or q (K). */
template <bool kPV, bool kS, bool kPrio, class Hook>
__device__ __forceinline__ void m_phase(f32x4 (&s)[kMTiles][kKTiles], f32x4 (&o)[kMTiles][kDTiles],
                                        bf16x4 (&p)[kMTiles][kKTiles], const u32x4 (&qf)[kMTiles][4],
                                        u32x4 (&f)[kFrags], const FragAddr& fa, Hook&& hook) {
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
  if constexpr (kPrio) __builtin_amdgcn_s_setprio(1); /* else raised before the barrier (x_barrier) */
  /* hook(q): the caller's work in the middle of fragment q's MFMAs (the copies, copy.h), so
   * neither gap between MFMAs holds more than the 16 clocks of one */
  static_for<len>([&](auto qc) {
    constexpr int q = decltype(qc)::value;
    constexpr int i = frag(q);
    if constexpr (i >= 16) {
      constexpr int dt = (i - 16) >> 1, c = (i - 16) & 1;
#pragma unroll
      for (int mt = 0; mt < kMTiles; ++mt) mfma_16x16x16_bf16(o[mt][dt], lo_half(f[i]), p[mt][2 * c]);
      hook(qc);
#pragma unroll
      for (int mt = 0; mt < kMTiles; ++mt) mfma_16x16x16_bf16(o[mt][dt], hi_half(f[i]), p[mt][2 * c + 1]);
    } else {
      constexpr int kt = i >> 2, pp = i & 3;
#pragma unroll
      for (int mt = 0; mt < kMTiles; ++mt) {
        if constexpr (pp == 0)
          mfma_16x16x16_bf16_first(s[mt][kt], lo_half(f[i]), lo_half(qf[mt][pp]));
        else
          mfma_16x16x16_bf16(s[mt][kt], lo_half(f[i]), lo_half(qf[mt][pp]));
      }
      hook(qc);
#pragma unroll
      for (int mt = 0; mt < kMTiles; ++mt) mfma_16x16x16_bf16(s[mt][kt], hi_half(f[i]), hi_half(qf[mt][pp]));
    }
    /* The read kLdsDepth ahead after this fragment's MFMAs: the phase opens on an MFMA. */
    if constexpr (q + D < len) f[frag(q + D)] = read_frag(frag(q + D), fa);
  });
}

#if RA_INJECT_SLOWDOWN_PCT > 0
/* Fire drill: about RA_INJECT_SLOWDOWN_PCT % more MFMA work per tile (128 MFMAs is the real work),
 * on throw-away accumulators; asm volatile keeps it, outputs are untouched. */
__device__ __forceinline__ void inject_slowdown(const u32x4 (&qf)[kMTiles][4]) {
  constexpr int kExtra = (2 * kMTiles * kKTiles * 8 * RA_INJECT_SLOWDOWN_PCT + 50) / 100;
  f32x4 burn[4] = {};
#pragma unroll
  for (int i = 0; i < kExtra; ++i) {
    if (i < 4) /* no v_mov-zeroed C in front of an unguarded MFMA (step 2) */
      mfma_16x16x16_bf16_first(burn[i], lo_half(qf[0][i]), hi_half(qf[1][i]));
    else
      mfma_16x16x16_bf16(burn[i & 3], lo_half(qf[0][i & 3]), hi_half(qf[1][i & 3]));
  }
  mfma_fence(burn[0], burn[1], burn[2], burn[3]);
}
#endif


/* The end of an X phase: the priority of the M phase that follows raised before its barrier, so that
 * phase opens on its first MFMA. */
__device__ __forceinline__ void x_barrier() {
  __builtin_amdgcn_sched_barrier(0);
  asm volatile("s_setprio 1\n\ts_barrier" ::: "memory");
  __builtin_amdgcn_sched_barrier(0);
}

/* The end of an M phase: the barrier, then the priority back to 0 (lowered after the barrier, the
 * wave does not lose the cycles between its last MFMA and the barrier to the other wave's VALU). */
__device__ __forceinline__ void m_end() {
  __builtin_amdgcn_sched_barrier(0);
  asm volatile("s_waitcnt vmcnt(0)\n\ts_barrier\n\ts_setprio 0" ::: "memory");
  __builtin_amdgcn_sched_barrier(0);
}

/* m_end of an M phase that computed S, with the wait states before VALU reads S: passes + 3 = 7 after
 * its last MFMA, which the asm's own four instructions before the s_nop 3 count toward (placed after
 * the barrier, so the other group's M phase does not wait for them). */
__device__ __forceinline__ void m_end_s(f32x4 (&s)[kMTiles][kKTiles]) {
#if !RA_HIP_MFMA_BUILTIN
  __builtin_amdgcn_sched_barrier(0);
  asm volatile("s_waitcnt vmcnt(0)\n\ts_barrier\n\ts_setprio 0\n\ts_nop 3"
               : "+v"(s[0][0]), "+v"(s[0][1]), "+v"(s[0][2]), "+v"(s[0][3]), "+v"(s[1][0]), "+v"(s[1][1]),
                 "+v"(s[1][2]), "+v"(s[1][3])::"memory");
  __builtin_amdgcn_sched_barrier(0);
#else
  m_end();
#endif
}

/* The accumulators' registers fixed where they are made (an empty asm: no instruction). */
__device__ __forceinline__ void tie_o(f32x4 (&o)[kMTiles][kDTiles]) {
  asm volatile(""
               : "+v"(o[0][0]), "+v"(o[0][1]), "+v"(o[0][2]), "+v"(o[0][3]), "+v"(o[0][4]), "+v"(o[0][5]),
                 "+v"(o[0][6]), "+v"(o[0][7]), "+v"(o[1][0]), "+v"(o[1][1]), "+v"(o[1][2]), "+v"(o[1][3]),
                 "+v"(o[1][4]), "+v"(o[1][5]), "+v"(o[1][6]), "+v"(o[1][7]));
}
/* After the last PV, before VALU reads O (the epilogue): 8 wait states. */
__device__ __forceinline__ void fence_o(f32x4 (&o)[kMTiles][kDTiles]) {
  asm volatile(RA_MFMA_FENCE_ASM
               : "+v"(o[0][0]), "+v"(o[0][1]), "+v"(o[0][2]), "+v"(o[0][3]), "+v"(o[0][4]), "+v"(o[0][5]),
                 "+v"(o[0][6]), "+v"(o[0][7]), "+v"(o[1][0]), "+v"(o[1][1]), "+v"(o[1][2]), "+v"(o[1][3]),
                 "+v"(o[1][4]), "+v"(o[1][5]), "+v"(o[1][6]), "+v"(o[1][7]));
}

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

/* Which keys a wave's query rows see besides those below seqlen_k. The dense kernels: all of them. */
struct NoRowLimit {
  static constexpr bool kOn = false;
  static constexpr bool kSafe = false;
  static constexpr bool kPrologueDone = false; /* the key loop copies K(0) and publishes it */
};
/* ABI v2's kernels: the wave's first row sees the keys below lim0 (relative to the key loop's seqlen_k
 * origin), the row 16 mt + li below lim0 + 16 mt + li (a causal mask; lim0 >= seqlen_k + 1 without one). */
struct RowLimit {
  static constexpr bool kOn = true;
  static constexpr bool kSafe = false;
  static constexpr bool kPrologueDone = true; /* the v2 body did (stair.h's look shares its barrier) */
  int lim0;
};
/* RowLimit for a block whose staircase V holds a non-finite element (stair.h): tiles with keys at or
 * past stair0 (the block's first row's limit) go to LDS with their non-finite V as +0 and get it back,
 * per visible key, after their PV. */
struct RowLimitSafe {
  static constexpr bool kOn = true;
  static constexpr bool kSafe = true;
  static constexpr bool kPrologueDone = true;
  int lim0;
  uint32_t stair0;
};

/* The copies of an M phase, as its hook (key_loop's and waves.h's key_loop_w's): K(t)'s rows (q <
 * kDmaRows) direct to LDS, then the wave's V rows of the tile its next X phase stores (kDmaRows <= q <
 * kDmaRows + kVKeysPerWave) into the staging registers vst. Everything by reference: the hook is used
 * while the key loop's own variables live. */
template <bool kFits, class Copy>
__device__ __forceinline__ auto copy_hook(const Copy& cp, const KeyLoop& c, const uint16_t* const& kb,
                                          const uint16_t* const& vb, typename Copy::KTile& kt,
                                          const typename Copy::VTile& vt, unsigned int (&vst)[kVKeysPerWave]) {
  return [&](auto qc) {
    constexpr int q = decltype(qc)::value;
    if constexpr (q < kDmaRows)
      cp.template k_row<kFits, q>(c.a, kb, kt);
    else if constexpr (q < kDmaRows + kVKeysPerWave)
      cp.template v_row<kFits, q - kDmaRows>(c.a, vb, vt, vst[q - kDmaRows]);
  };
}

/* The key loop's trips (key_loop's and waves.h's key_loop_w's): X(j) then M(j+1) for j < n - 1, each
 * trip making K(j+2)'s and V(j+1+grp)'s tiles, whose rows the M phase copies, then the last X(n-1);
 * returns n - 1. The copies' row pointers are stepped a tile a trip (a 64-bit add each, no multiply).
 * One exit, at the latch (a break between the X and M phases made the control-flow structurizer carry
 * the O accumulators of both sides through the M phase: 64 more VGPRs and spills). */
template <int L, bool kFits, class Copy, class XPhase, class MNext>
__device__ __forceinline__ uint32_t key_trips(const KeyLoop& c, const Copy& cp, const uint16_t* kb, const uint16_t* vb,
                                              u32x4 (*lds_k)[kBlockK * kKGranules], uint32_t n,
                                              uint32_t grp, XPhase& x_phase, MNext& m_next) {
  const uint16_t* kp = cp.k_row_ptr(c.a, kb, c.key0(2u));
  const uint16_t* vp = cp.v_row_ptr(c.a, vb, c.key0(1u + grp));
  const int64_t kstep = row_offset<L>((uint32_t)kBlockK, c.a.k_stride[2]);
  const int64_t vstep = row_offset<L>((uint32_t)kBlockK, c.a.v_stride[2]);
  uint32_t j = 0;
  for (; j + 1u < n; ++j) {
    const uint32_t P = j & 1u;
    auto kt = cp.template k_tile<kFits>(c.a, kp, c.key0(j + 2u), lds_addr(lds_k[P]));
    auto vt = cp.template v_tile<kFits>(c.a, vp, c.key0(j + 1u + grp));
    kp += kstep;
    vp += vstep;
    x_phase(j, [&] {
      cp.tie(kt);
      cp.tie(vt);
    });
    m_next(kt, vt);
  }
  x_phase(j, [] {});
  return j;
}

/* The key loop of a wave (the table above; grp = w / 4, wave-uniform), on the block's two K and two
 * V^T buffers. One loop for both groups: what differs (group 1's X(-1), group 0's last barrier, the V
 * copies) sits in scalar branches outside the M phases. kActive: the wave has query rows below
 * seqlen_q (a wave without any still copies and meets every barrier); a template constant, so no
 * path through the loop carries S or P past a phase that does not use them. kFits: kv_rows_fit (copy.h). */
template <int L, bool kActive, bool kFits, class M = NoRowLimit>
__device__ __forceinline__ void key_loop(const KeyLoop& c, u32x4 (*lds_k)[kBlockK * kKGranules],
                                         u32x4 (*lds_vt)[kHeadDim * kVGranules], const u32x4 (&qf)[kMTiles][4],
                                         f32x4 (&o)[kMTiles][kDTiles], RowState (&st)[kMTiles], const M& rows = M{}) {
  using Copy = KvCopy<L>;
  const Copy cp(c.w, c.lane);
  const uint16_t* kb = uniform_ptr(c.kb); /* in SGPRs (made from a VALU division: VGPRs) */
  const uint16_t* vb = uniform_ptr(c.vb);
  /* The lanes' fragment addresses as absolute LDS byte addresses, K in the buffer M(j+1) reads, V^T in
   * the one PV(j) reads: each X phase moves both to the other buffer (16 VALU adds there), and every
   * read of an M phase is a ds_read of a lane register and an immediate offset, no VALU (a VALU op of
   * the M wave waits behind the other wave's v_exp and holds its next MFMA back). */
  FragAddr fa(c.li, c.g);
#pragma unroll
  for (int i = 0; i < 8; ++i) {
    fa.k[i] += lds_addr(lds_k[0]);
    fa.v[i] += lds_addr(lds_vt[1]);
  }
  /* made here (the compiler sank them into group 1's first M phase, which then waited out the other
   * group's exponentials for the VALU) */
  asm volatile("" : "+v"(fa.k[0]), "+v"(fa.k[1]), "+v"(fa.k[2]), "+v"(fa.k[3]), "+v"(fa.k[4]), "+v"(fa.k[5]),
               "+v"(fa.k[6]), "+v"(fa.k[7]));
  asm volatile("" : "+v"(fa.v[0]), "+v"(fa.v[1]), "+v"(fa.v[2]), "+v"(fa.v[3]), "+v"(fa.v[4]), "+v"(fa.v[5]),
               "+v"(fa.v[6]), "+v"(fa.v[7]));
  static_assert(kLdsKBytes == kLdsVBytes, "the K and V^T buffers are moved by one delta");
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
  /* The copies of an M phase, as its hook: K(t)'s rows (q < 8) direct to LDS, then the wave's V rows of
   * the tile its next X phase stores (8 <= q < 16) into the staging registers vst. */
  unsigned int vst[kVKeysPerWave];
  auto copies = [&](typename Copy::KTile& kt, const typename Copy::VTile& vt) {
    return copy_hook<kFits>(cp, c, kb, vb, kt, vt, vst);
  };
  /* An M phase's copies without the M phase (a wave with no query rows). */
  auto copies_only = [&](typename Copy::KTile& kt, const typename Copy::VTile& vt) {
    static_for<kDmaRows + kVKeysPerWave>(copies(kt, vt));
  };

  /* Prologue: K(0), every wave its rows (the v2 kernels: before their look at the diagonal, which then
   * waits for it and publishes it with its own barrier, issue_k0). */
  if constexpr (!M::kPrologueDone) {
    auto kt = cp.template k_tile<kFits>(c.a, cp.k_row_ptr(c.a, kb, c.key0(0u)), c.key0(0u), kbuf[0]);
    static_for<kDmaRows>([&](auto ic) { cp.template k_row<kFits, decltype(ic)::value>(c.a, kb, kt); });
    wait_vmcnt0();
    phase_barrier();
  }
  if (grp == 1u) { /* X(-1): its keys of V(0) */
    const auto vt = cp.template v_tile<kFits>(c.a, cp.v_row_ptr(c.a, vb, c.key0(0u)), c.key0(0u));
    static_for<kVKeysPerWave>([&](auto ec) { cp.template v_row<kFits, decltype(ec)::value>(c.a, vb, vt, vst[ec.value]); });
    if constexpr (M::kSafe)
      if (c.key0(0u) + (uint32_t)kBlockK > rows.stair0) zero_nonfinite(vst);
    cp.store_vt(vst, lds_vt[0]);
    wait_lgkmcnt0();
    wait_vmcnt0();
    phase_barrier();
  }
  /* M(0): S(0); K(1)'s rows and the wave's keys of V(grp) (every M(j) copies the wave's rows of
   * K(j + 1) and loads its keys of V(j + grp), which X(j) stores) */
  {
    auto kt = cp.template k_tile<kFits>(c.a, cp.k_row_ptr(c.a, kb, c.key0(1u)), c.key0(1u), kbuf[1]);
    const auto vt = cp.template v_tile<kFits>(c.a, cp.v_row_ptr(c.a, vb, c.key0(grp)), c.key0(grp));
    if constexpr (kActive) {
      prefetch<false>(f, fa);
      m_phase<false, true, true>(s, o, p, qf, f, fa, copies(kt, vt));
#if RA_INJECT_SLOWDOWN_PCT > 0
      inject_slowdown(qf);
#endif
    } else {
      copies_only(kt, vt);
    }
  }
  if constexpr (kActive)
    m_end_s(s);
  else
    m_end();

  auto softmax = [&](uint32_t j, auto&& mid) {
    if constexpr (kActive && M::kOn) {
      /* a tile is partial where it passes seqlen_k or the wave's first row's limit (its last rows
       * see more: the diagonal is masked lane by lane) */
      const uint32_t key0 = c.key0(j);
      const int lim = rows.lim0 - (int)key0;
      rise = softmax_x<true>(st, s, p, alpha, c.a.scale_log2e, key0 + (uint32_t)kBlockK > c.a.seqlen_k || lim < kBlockK,
                             c.a.seqlen_k - key0, c.lane, c.g, mid, lim + c.li);
    } else if constexpr (kActive) {
      const uint32_t key0 = c.key0(j);
      rise = softmax_x(st, s, p, alpha, c.a.scale_log2e, key0 + (uint32_t)kBlockK > c.a.seqlen_k, c.a.seqlen_k - key0,
                       c.lane, c.g, mid);
    } else {
      mid();
    }
  };
  /* X(j), j % 2 == P: the softmax of S(j); the wave's keys of V(j + grp) (group 0 keys 32-63 of V(j),
   * group 1 keys 0-31 of V(j+1)), loaded in M(j), stored in the middle of the softmax (after its
   * exponentials: the phase's tail kept short); then the first kLdsDepth reads of PV(j), which opens
   * M(j+1), also in the softmax's middle. */
  auto x_phase = [&](uint32_t j, auto&& before_barrier) {
    const uint32_t P = j & 1u;
    if constexpr (kActive) { /* K to buffer P ^ 1, V^T to buffer P */
      /* two addresses a 64-bit add (v_lshl_add_u64): the delta in both halves, a negative one borrowing
       * from the high half what the low half's add carries into it */
      const int64_t dk = P ? -(int64_t)kLdsKBytes : (int64_t)kLdsKBytes; /* lds_k[1] - lds_k[0] */
      const uint64_t dk2 = (uint64_t)(dk * 0x100000001ll), dv2 = (uint64_t)(-dk * 0x100000001ll);
#pragma unroll
      for (int i = 0; i < 8; i += 2) {
        uint64_t k2 = ((uint64_t)fa.k[i + 1] << 32 | fa.k[i]) + dk2;
        uint64_t v2 = ((uint64_t)fa.v[i + 1] << 32 | fa.v[i]) + dv2;
        fa.k[i] = (uint32_t)k2;
        fa.k[i + 1] = (uint32_t)(k2 >> 32);
        fa.v[i] = (uint32_t)v2;
        fa.v[i + 1] = (uint32_t)(v2 >> 32);
      }
    }
    auto pre = [&] {
      if constexpr (kActive) prefetch<true>(f, fa);
    };
    if constexpr (kActive && M::kSafe) /* the non-finite V of the staircase tile j - 1, after its PV */
      if (j > 0u && c.key0(j - 1u) + (uint32_t)kBlockK > rows.stair0)
        fold_nonfinite_v<L>(o, p, c.a, vb, c.key0(j - 1u), rows.lim0 + c.li, c.li, c.g);
    /* Stored whether or not tile j + grp exists: past the last, group 1's X(n-1) writes zeros (or the
     * next part's keys) into V^T buffer n % 2, which M(n) does not read (one softmax, no branch: the
     * two copies of it left the row statistics in different registers, 6 copies a tile). */
    softmax(j, [&] {
      if constexpr (M::kSafe)
        if (c.key0(j + grp) + (uint32_t)kBlockK > rows.stair0) zero_nonfinite(vst);
      cp.store_vt(vst, lds_vt[P ^ grp]);
      pre();
    });
    if constexpr (kActive) {
      /* The O rescale of a tile that raised some row's max: here at the end of X, so the M phase
       * opens on its MFMAs; the entry tie orders the VALU writes of O and P before the waits and the
       * barrier, their 2 wait states. */
      if (__builtin_expect(rise != 0u, 0)) rescale_o(o, alpha);
      mfma_entry_tie2(o, p);
      wait_lgkmcnt_depth(); /* this X's LDS writes landed; the kLdsDepth reads may still fly */
    } else {
      wait_lgkmcnt0();
    }
    wait_vmcnt0();
    before_barrier();
    x_barrier();
  };
  /* M(j+1) after X(j), j % 2 == P: PV(j) from V^T buffer P, S(j+1) from K buffer P ^ 1 (fa, moved
   * there in X(j)); K(j+2)'s rows into K buffer P (kt), V(j+1+grp)'s rows into vst (vt), both made in
   * X(j), before its barrier. */
  auto m_next = [&](typename Copy::KTile& kt, const typename Copy::VTile& vt) {
    if constexpr (kActive) {
      m_phase<true, true, false>(s, o, p, qf, f, fa, copies(kt, vt));
#if RA_INJECT_SLOWDOWN_PCT > 0
      inject_slowdown(qf);
#endif
    } else {
      copies_only(kt, vt);
    }
    if constexpr (kActive)
      m_end_s(s);
    else
      m_end();
  };
  auto m_last = [&] { /* M(n): the last PV, from V^T buffer (n - 1) % 2 */
    if constexpr (kActive) m_phase<true, false, false>(s, o, p, qf, f, fa, [](auto) {});
  };
  const uint32_t j = key_trips<L, kFits>(c, cp, kb, vb, lds_k, n, grp, x_phase, m_next);
  m_last();
  if (grp == 0u) m_end();
  if constexpr (kActive) fence_o(o);
  if constexpr (kActive && M::kSafe)
    if (c.key0(j) + (uint32_t)kBlockK > rows.stair0) fold_nonfinite_v<L>(o, p, c.a, vb, c.key0(j), rows.lim0 + c.li, c.li, c.g);
}

}  // namespace ra_gfx942

#endif /* RA_HIP_SCHEDULE_H */
