/*
 * mainloop_v2.cuh — the tile loops of the ABI v2 kernels (attn_fwd_sm90_v2<kRound, Mask, Seq, kPack>):
 * grouped-query heads, causal masks, varlen and the LSE, over the dense kernels' main loop.
 *
 *   producer (one thread)                        consumers (2 warpgroups, 64 rows each)
 *   ---------------------                        --------------------------------------
 *   tile = blockIdx.x, then the dynamic counter   wait q_full[s]; read TileInfo[s] (nb = 0: done)
 *   TileInfo t = Seq::tile_info(tile)            rows: Rows<kPack>::row -> (query head, row i)
 *     (seqlen.cuh: fixed order or the varlen       limits: Mask::limit(i) keys; the tile's first
 *      pre-pass's list; mask.cuh: t.nb blocks)      masked block (mask.cuh)
 *   wait q_empty[s]; TileInfo -> smem[s]          blocks_split_pv (mainloop_sm90.cuh) with RowMask:
 *   TMA Q (Rows' box: 128 rows of a head, or       the dense main loop; blocks >= from masked per
 *     packed: R rows of kv_group heads)            row; varlen zeroes V rows past the sequence
 *   for n < t.nb: TMA K, V at row k0 + n 128,     epilogue: LSE (m scale + ln l), +0 rows where no
 *     K/V head Rows::kv_head                         key is visible, O by TMA (or row by row where a
 *   no tile left: TileInfo{nb = 0} -> smem           box would cross the sequence or mix heads)
 *                                                  next tile's S = Q K_0^T, as the dense kernels
 *
 * With RA_CUDA_STAIR_EXACT=1 (stair.cuh; the default) the producer warpgroup's warps 1-3 vote on
 * each causal tile's staircase V rows before the consumers reach it (vote_stairs_v2: the producer
 * publishes each tile to them ahead of its Q stage), and a tile whose staircase holds a non-finite
 * element runs blocks_split_pv with RowMaskStair instead.
 *
 * The tile's description travels from producer to consumers in shared memory beside its Q stage
 * (written before the stage's arrive, read after its wait), so only the producer reads the tile
 * list and cu_seqlens from global memory. The dense kernels' loops (produce, consume) are untouched:
 * their code is what the device measured.
 */
#pragma once
#include "mainloop_sm90.cuh"
#include "mask.cuh"
#include "pack_gqa.cuh"
#include "seqlen.cuh"
#include "stair.cuh"

namespace ra_cuda {
namespace sm90 {

__device__ __forceinline__ void st_tile_info(int* slot, const TileInfo& t) {
  const uint32_t a = smem_u32(slot);
  asm volatile("st.shared.v4.b32 [%0], {%1, %2, %3, %4};" ::"r"(a), "r"(t.m), "r"(t.hg), "r"(t.b), "r"(t.q0)
               : "memory");
  asm volatile("st.shared.v4.b32 [%0], {%1, %2, %3, %4};" ::"r"(a + 16), "r"(t.len_q), "r"(t.k0), "r"(t.len_k),
               "r"(t.nb)
               : "memory");
}
__device__ __forceinline__ TileInfo ld_tile_info(int* slot) {
  const uint32_t a = smem_u32(slot);
  TileInfo t;
  asm volatile("ld.shared.v4.b32 {%0, %1, %2, %3}, [%4];"
               : "=r"(t.m), "=r"(t.hg), "=r"(t.b), "=r"(t.q0)
               : "r"(a)
               : "memory");
  asm volatile("ld.shared.v4.b32 {%0, %1, %2, %3}, [%4];"
               : "=r"(t.len_q), "=r"(t.k0), "=r"(t.len_k), "=r"(t.nb)
               : "r"(a + 16)
               : "memory");
  return t;
}

/* The tile the producer takes after `tile`: the dynamic counter's next, or the static order's. */
__device__ __forceinline__ int next_tile(const FwdParamsV2& p, int tile) {
  return p.tile_counter ? (int)gridDim.x + atomicAdd(&p.tile_counter[0], 1) : tile + (int)gridDim.x;
}

/* RA_CUDA_STAIR_EXACT=1: tile `tile` (none past num_tiles) as the vote warps' tile tq (smem.h's ring;
 * SmemV2's stair fields exist in that build only, so this compiles there only). Returns the TileInfo,
 * which the producer's loop carries to that tile (for varlen, one read of the pre-pass list a tile). */
template <class Mask, class Seq, bool kPack, class P>
__device__ __forceinline__ TileInfo publish_stair_tile(const FwdParamsV2& p, SmemV2<P>& sm, int tq, int tile,
                                                       int num_tiles) {
  TileInfo t{};
  if (tile < num_tiles) t = Seq::template tile_info<Mask, kPack>(p, tile);
  st_tile_info(sm.stair_info[tq % kStairSlots], t);
  mbar_arrive(&sm.stair_info_full[tq % kStairSlots]); /* release: the TileInfo above */
  return t;
}

template <class Mask, class Seq, bool kPack, class P>
__device__ __forceinline__ void produce_v2(const FwdParamsV2& p, SmemV2<P>& sm) {
  constexpr int kQStages = P::kQStages;
  constexpr int kStages = P::kStages;
  constexpr int kBN = P::kBlockN;
  constexpr uint32_t kKVBytes = kBN * 256;
  using R = Rows<kPack>;
  const int num_tiles = Seq::num_tiles(p);
  const uint32_t q_bytes = R::q_bytes(p);
  /* stair.cuh's vote warps learn each tile before its Q stage. In a launch of many short tiles (at
   * least 8 rounds of the grid) the producer takes its next tile as it starts this one while more
   * than two rounds remain, so their vote runs while the consumers compute this one (taken when this
   * one's loads are issued, the vote cost 2k causal 11 %, H200). Otherwise it takes it then, as
   * without the vote: the dynamic order keeps its balance (taken early, a launch of ~4 tiles a CTA
   * lost 2-5 %, H100), and a long tile's last blocks leave the vote time. */
  constexpr bool kStairAhead = RA_CUDA_STAIR_EXACT && Mask::kCausal;
  int kv = 0;
  int tq = 0;
  int tile = blockIdx.x;
  TileInfo t_ahead{}; /* kStairAhead: the TileInfo published for the tile taken next */
  if constexpr (kStairAhead) t_ahead = publish_stair_tile<Mask, Seq, kPack>(p, sm, 0, tile, num_tiles);
  for (; tile < num_tiles; ++tq) {
    TileInfo t;
    if constexpr (kStairAhead) t = t_ahead;
    else t = Seq::template tile_info<Mask, kPack>(p, tile);
    int ahead = -1;
    if constexpr (kStairAhead) {
      if (num_tiles >= 8 * (int)gridDim.x && num_tiles - tile > 2 * (int)gridDim.x) {
        ahead = next_tile(p, tile);
        t_ahead = publish_stair_tile<Mask, Seq, kPack>(p, sm, tq + 1, ahead, num_tiles);
      }
    }
    const int qs = tq % kQStages;
    mbar_wait(&sm.q_empty[qs], ((tq / kQStages) & 1) ^ 1);
    st_tile_info(sm.tile_info[qs], t); /* published by the arrive below (release) */
    mbar_arrive_expect_tx(&sm.q_full[qs], q_bytes);
    const int qrow = t.q0 + (t.m << R::log2_rows(p));
    const int bc = Seq::batch_coord(t);
    const int qh = R::q_head(p, t);
    tma_load_4d(sm.q[qs][0], &p.tma_q, &sm.q_full[qs], 0, qrow, qh, bc);
    tma_load_4d(sm.q[qs][1], &p.tma_q, &sm.q_full[qs], 64, qrow, qh, bc);
    const int kh = R::kv_head(p, t);
    for (int n = 0; n < t.nb; ++n, ++kv) {
      const int s = kv % kStages;
      const uint32_t ph = (kv / kStages) & 1;
      const int krow = t.k0 + n * kBN;
      mbar_wait(&sm.k_empty[s], ph ^ 1);
      mbar_arrive_expect_tx(&sm.k_full[s], kKVBytes);
      tma_load_4d(sm.k[s][0], &p.tma_k, &sm.k_full[s], 0, krow, kh, bc);
      tma_load_4d(sm.k[s][1], &p.tma_k, &sm.k_full[s], 64, krow, kh, bc);
      mbar_wait(&sm.v_empty[s], ph ^ 1);
      mbar_arrive_expect_tx(&sm.v_full[s], kKVBytes);
      tma_load_4d(sm.v[s][0], &p.tma_v, &sm.v_full[s], 0, krow, kh, bc);
      tma_load_4d(sm.v[s][1], &p.tma_v, &sm.v_full[s], 64, krow, kh, bc);
    }
    if constexpr (kStairAhead) {
      if (ahead < 0) {
        ahead = next_tile(p, tile);
        t_ahead = publish_stair_tile<Mask, Seq, kPack>(p, sm, tq + 1, ahead, num_tiles);
      }
      tile = ahead;
    } else {
      tile = next_tile(p, tile);
    }
  }
  /* no tile left: a Q stage that carries no bytes and a TileInfo of no blocks */
  const int qs = tq % kQStages;
  mbar_wait(&sm.q_empty[qs], ((tq / kQStages) & 1) ^ 1);
  TileInfo none;
  none.m = none.hg = none.b = none.q0 = none.len_q = none.k0 = none.len_k = none.nb = 0;
  st_tile_info(sm.tile_info[qs], none);
  mbar_arrive(&sm.q_full[qs]);
  if (p.tile_counter) reset_tile_counter_if_last(p);
}

/* Keys the tile's first row sees (mask.cuh's limit; lr: Rows::log2_rows): where its staircase begins. */
template <class Mask>
__device__ __forceinline__ int tile_first_limit(const FwdParamsV2& p, const TileInfo& t, int lr) {
  return Mask::limit(p, t.m << lr, t.len_q, t.len_k);
}
/* Keys the tile's last row sees: where its staircase ends, and past which its last block's keys are
 * seen by no row of the tile. */
template <class Mask>
__device__ __forceinline__ int tile_last_limit(const FwdParamsV2& p, const TileInfo& t, int lr) {
  return Mask::limit(p, min(((t.m + 1) << lr) - 1, t.len_q - 1), t.len_q, t.len_k);
}
/* V's row of the tile's key 0 (its K/V head and sequence) in global memory. */
template <class Seq, bool kPack>
__device__ __forceinline__ const uint16_t* tile_v(const FwdParamsV2& p, const TileInfo& t) {
  return p.v + (int64_t)Seq::batch_coord(t) * p.v_stride[0] + (int64_t)Rows<kPack>::kv_head(p, t) * p.v_stride[1] +
         (int64_t)t.k0 * p.v_stride[2];
}

/* The producer warpgroup's warps 1-3 (t: 0 .. 95; RA_CUDA_STAIR_EXACT=1, causal kernels; SmemV2's
 * stair fields exist in that build only, so these two compile there only): for each tile in the
 * producer's order, once the producer has published it (a tile before its Q stage: produce_v2),
 * whether its staircase V holds a non-finite element, one word per warp in stair_votes and an arrive
 * on stair_full. So the vote's loads run while the consumers compute the tile before (smem.h says
 * why a slot is free when it is rewritten). */
template <class Mask, class Seq, bool kPack, class P>
__device__ __forceinline__ void vote_stairs_v2(const FwdParamsV2& p, SmemV2<P>& sm, int t) {
  for (int tq = 0;; ++tq) {
    const int qs = tq % kStairSlots;
    mbar_wait(&sm.stair_info_full[qs], (tq / kStairSlots) & 1);
    const TileInfo ti = ld_tile_info(sm.stair_info[qs]);
    if (ti.nb == 0) return;
    const int lr = Rows<kPack>::log2_rows(p);
    const int lo = tile_first_limit<Mask>(p, ti, lr), hi = tile_last_limit<Mask>(p, ti, lr);
    const bool any = lo < hi && stair_nonfinite(tile_v<Seq, kPack>(p, ti), p.v_stride[2], lo, hi, t);
    if ((t & 31) == 0) {
      asm volatile("st.shared.b32 [%0], %1;" ::"r"(smem_u32(&sm.stair_votes[qs][t >> 5])), "r"(any ? 1u : 0u)
                   : "memory");
      mbar_arrive(&sm.stair_full[qs]); /* release: the word above */
    }
  }
}
/* The tile's vote (after its stair_full phase): the same in every thread, which vote.any tells ptxas
 * (it otherwise takes both key loops for divergent code and moves their address arithmetic off the
 * uniform datapath). */
template <class P>
__device__ __forceinline__ bool stair_voted(SmemV2<P>& sm, int tq) {
  const int qs = tq % kStairSlots;
  mbar_wait(&sm.stair_full[qs], (tq / kStairSlots) & 1);
  const uint32_t a = smem_u32(sm.stair_votes[qs]);
  uint32_t w0, w1, w2, w3;
  asm volatile("ld.shared.v4.b32 {%0, %1, %2, %3}, [%4];" : "=r"(w0), "=r"(w1), "=r"(w2), "=r"(w3) : "r"(a) : "memory");
  static_assert(kStairVoteWarps == 3, "one word per vote warp");
  return __any_sync(0xffffffffu, (w0 | w1 | w2) != 0u);
}

/* The rows of one thread: r = 0 its first row, 1 the one 8 below (softmax.cuh's layout). */
struct ThreadRows {
  int head[2]; /* query head */
  int i[2];    /* row in its sequence */
  bool in[2];  /* a row of the tile below len_q: one the epilogue writes */
  int lim[2];  /* keys it sees (mask.cuh) */
};

/* The LSE of the thread's rows (the quad's first thread writes it): -Inf where no key is visible;
 * NaN where the row's scores are all -Inf (m stays -Inf) or its sum is NaN; else m scale + ln l. */
template <class Seq, class Softmax>
__device__ __forceinline__ void store_lse(const FwdParamsV2& p, const Softmax& sfm, const TileInfo& t,
                                          const ThreadRows& tr, int qc) {
  const int64_t b = Seq::batch_coord(t); /* dense [B, H, Sq]; varlen [H, total_q] (batch 0) */
  const float kNegInf = -__int_as_float(0x7f800000);
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const float l = quad_row_sum(sfm.l[r]);
    const float m = sfm.m[r];
    float v = (m * p.scale_log2 + lg2(l)) * 0.6931471805599453f;
    if (m == kNegInf) v = __int_as_float(0x7fffffff);
    if (tr.lim[r] <= 0) v = kNegInf;
    if (qc == 0 && tr.in[r]) p.lse[(b * p.heads + tr.head[r]) * p.seqlen_q + t.q0 + tr.i[r]] = v;
  }
}

/* The v2 epilogue: LSE, +0 rows, then O through TMA or row by row (epilogue.cuh). */
template <int kRound, class Seq, bool kPack, class P, class Softmax>
__device__ __forceinline__ void store_output_v2(const FwdParamsV2& p, SmemV2<P>& sm, float (&o)[64], Softmax& sfm,
                                                const TileInfo& t, const ThreadRows& tr, int wg, int warp,
                                                int lane, int qc) {
  if (p.lse) store_lse<Seq>(p, sfm, t, tr, qc);
#pragma unroll
  for (int r = 0; r < 2; ++r)
    if (tr.lim[r] <= 0) { /* no visible key: +0 (its P.V may hold 0 x NaN of masked V rows) */
      sfm.l[r] = 1.f;
#pragma unroll
      for (int i = 0; i < 16; ++i) o[4 * i + 2 * r] = o[4 * i + 2 * r + 1] = 0.f;
    }
  uint16_t* so = sm.o[wg * 4 + warp];
  const int w_row = wg * 64 + warp * 16; /* the warp's first row of the tile */
  int h0, i0;
  Rows<kPack>::row(p, t, w_row, h0, i0);
  const bool flip0 = p.nondet_flip && t.b == 0 && h0 == 0 && t.q0 + i0 == 0;
  if constexpr (!kPack) {
    if (!Seq::kVarlen || i0 + 16 <= t.len_q) { /* the box's 16 rows lie in the sequence */
      store_tile_tma<kRound>(o, sfm.l, so, &p.tma_o, t.q0 + i0, h0, Seq::batch_coord(t), lane, flip0);
      return;
    }
  }
  int h, i;
  const bool ok = Rows<kPack>::row(p, t, w_row + (lane >> 1), h, i) && i < t.len_q;
  uint16_t* row_out =
      ok ? p.o + (int64_t)Seq::batch_coord(t) * p.o_stride[0] + (int64_t)h * p.o_stride[1] +
               (int64_t)(t.q0 + i) * p.o_stride[2]
         : nullptr;
  store_tile_rows<kRound>(o, sfm.l, so, row_out, lane, flip0);
}

template <int kRound, class Mask, class Seq, bool kPack, class P>
__device__ __forceinline__ void consume_v2(const FwdParamsV2& p, SmemV2<P>& sm, int wg, int tid) {
  constexpr int kQStages = P::kQStages;
  constexpr int kStages = P::kStages;
  constexpr int kBN = P::kBlockN;
  using R = Rows<kPack>;
  const int warp = tid >> 5;
  const int lane = tid & 31;
  const int qc = 2 * (lane & 3);
  const int row_in_tile = wg * 64 + warp * 16 + (lane >> 2);

  float s[kBN / 2];
  uint32_t pf[kBN / 4];
  int kv = 0;
  int tq = 0;
  int tile = 0, next = 0; /* QK0's, unused here: the next tile comes from TileInfo */
  const QK0<P, true> h{p, sm, s, wg, tile, next};
  mbar_wait(&sm.q_full[0], 0);
  TileInfo t = ld_tile_info(sm.tile_info[0]);
  if (t.nb > 0) {
    h.wait(0, 0);
    wgmma_fence();
    h.issue(0, 0);
    wgmma_wait<0>();
  }
  while (t.nb > 0) {
    const int qs = tq % kQStages;
    const int kv0 = kv;
    /* key block 0: S is ready */
    fence_regs(s);
    warp_release(&sm.k_empty[kv % kStages], lane);
    if (R::wg_idle(p, t, wg)) {
      release_tile<P>(sm, lane, t.nb, qs, kv);
    } else {
      const long long tile_start = inject_clock(); /* fire drill: this tile's own time (inject.h) */
      const int lr = R::log2_rows(p);
      ThreadRows tr;
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        tr.in[r] = R::row(p, t, row_in_tile + 8 * r, tr.head[r], tr.i[r]) && tr.i[r] < t.len_q;
        tr.lim[r] = Mask::limit(p, tr.i[r], t.len_q, t.len_k);
      }
      RowMask<Seq::kVarlen || Mask::kCausal> mk;
      mk.from = tile_first_masked<Mask, kBN>(p, t.m << lr, t.len_q, t.len_k);
      mk.lim[0] = tr.lim[0];
      mk.lim[1] = tr.lim[1];
      /* the last block's keys no row of the tile sees: past its last row's limit (causal) or past
       * the sequence (varlen; a fixed-length tensor ends there, and TMA has zero-filled them) */
      const int lim_max = tile_last_limit<Mask>(p, t, lr);
      mk.zero_from = Seq::kVarlen || lim_max < t.len_k ? min(max(lim_max - (t.nb - 1) * kBN, 0), kBN) : kBN;
      mk.zero_threads = R::wg_idle(p, t, 1) ? 128 : 256;
      mk.zero_tid = wg * 128 + tid;
      float o[64];
      float corr[2];
      OnlineSoftmax<kBN / 8> sfm;
      sfm.init();
      constexpr bool kStair = RA_CUDA_STAIR_EXACT && Mask::kCausal;
      if (!kStair && t.nb == 1) warp_release(&sm.q_empty[qs], lane);
      const TileBlocks b{t.nb, false, qs, h.q_addr_of(qs), kv, tq, kBN, qc, lane};
      if constexpr (kStair) {
        /* stair.cuh: the tile's staircase V voted on; a non-finite element takes the safe loop. Read
         * before this stage's release (smem.h: the slot's rewrite waits for it). */
        const bool stair = stair_voted(sm, tq);
        if (t.nb == 1) warp_release(&sm.q_empty[qs], lane);
        if (stair) {
          RowMaskStair ms;
          static_cast<RowMask<true>&>(ms) = mk;
          ms.lo = tile_first_limit<Mask>(p, t, lr);
          ms.hi = lim_max;
          ms.v = tile_v<Seq, kPack>(p, t);
          ms.ld = p.v_stride[2];
          blocks_split_pv<false>(h, b, o, corr, sfm, pf, ms);
        } else {
          blocks_split_pv<false>(h, b, o, corr, sfm, pf, mk);
        }
      } else {
        blocks_split_pv<false>(h, b, o, corr, sfm, pf, mk);
      }
      store_output_v2<kRound, Seq, kPack>(p, sm, o, sfm, t, tr, wg, warp, lane, qc);
      inject_spin(tile_start);
    }
    kv += t.nb;
    /* the next tile's S = Q K_0^T (a discarded one on this tile's released buffers after the last:
     * the producer loads nothing after it, and an unconditional issue keeps ptxas from serialising) */
    const int tn = tq + 1;
    mbar_wait(&sm.q_full[tn % kQStages], (tn / kQStages) & 1);
    const TileInfo t_next = ld_tile_info(sm.tile_info[tn % kQStages]);
    const bool has_next = t_next.nb > 0;
    if (has_next) mbar_wait(&sm.k_full[kv % kStages], (kv / kStages) & 1);
    wgmma_fence();
    h.issue(has_next ? tn : tq, has_next ? kv : kv0);
    wgmma_wait<0>();
    t = t_next;
    tq = tn;
  }
  store_tile_tma_drain(lane);
}

}  // namespace sm90
}  // namespace ra_cuda
