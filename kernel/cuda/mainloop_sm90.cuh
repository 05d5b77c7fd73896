/*
 * mainloop_sm90.cuh — the sm_90a path: a TMA producer warp and two wgmma consumer warpgroups.
 *
 * Shared memory (one CTA per SM, 224 KB + barriers in the main plan; the short-key plan's 208 KB
 * with 3 Q stages: see ShortPlan), every tile 128-byte swizzled by TMA and
 * split in two d-halves of 64 columns (a 128-byte swizzle row holds 64 bf16):
 *   q[qstage][half][128 rows x 64]      Q tile, A operand of S = Q K^T (K-major); 2 stages
 *   o[warp][2][16 x 64]                 output staging of the epilogue, the TMA store's box (epilogue.cuh)
 *   k[stage][half][128 keys x 64]       B operand of S (K-major: keys are N, d is K)
 *   v[stage][half][128 keys x 64]       B operand of O += P V (MN-major: d is N, contiguous)
 * (the long-key plan: key blocks of RA_CUDA_LONG_BLOCK_N keys instead of 128, see LongPlan; the
 * short-key plan: one block of RA_CUDA_SHORT_BLOCK_N keys and 3 Q stages, see ShortPlan)
 * Barriers: q_full/q_empty[qstage], k_full/k_empty[stage], v_full/v_empty[stage]. "full" completes on
 * the TMA byte count; "empty" on one arrival from each of the 8 consumer warps.
 *
 * Consumer warpgroup w owns query rows 64w..64w+63 of the tile; per key block n it overlaps the
 * softmax of block n with P.V products (FlashAttention-3's intra-warpgroup pipelining, with each
 * block's P.V in two halves of its keys: RA_CUDA_SPLIT_PV below): issue O += P_n V_n over the first
 * half, the second half's exponentials beside it, issue S_{n+1} = Q K_{n+1}^T and P_n V_n's second
 * half, wait S_{n+1}, its max and first-half exponentials beside the second half's product, wait
 * P.V, rescale O. (RA_CUDA_SPLIT_PV=0, v4-v14: issue S_n and P_{n-1} V_{n-1}, wait S_n, the whole
 * softmax, wait P.V, rescale O, P_n = bf16(S_n).)
 */
#pragma once
#include "drill.cuh"
#include "trace.cuh"
#include "epilogue.cuh"
#include "mask.cuh"
#include "params.cuh"
#include "ptx.cuh"
#include "smem.h"
#include "softmax.cuh"
#include "split.cuh"
#include "tile_scheduler.cuh"
#include "wgmma_m64n128.cuh"

namespace ra_cuda {
namespace sm90 {

template <class P>
__device__ __forceinline__ void init_barriers(Smem<P>& sm) {
  for (int s = 0; s < P::kQStages; ++s) {
    mbar_init(&sm.q_full[s], 1);
    mbar_init(&sm.q_empty[s], kConsumerWarps);
  }
  for (int s = 0; s < P::kStages; ++s) {
    mbar_init(&sm.k_full[s], 1);
    mbar_init(&sm.k_empty[s], kConsumerWarps);
    mbar_init(&sm.v_full[s], 1);
    mbar_init(&sm.v_empty[s], kConsumerWarps);
  }
  fence_barrier_init();
}

/* The key blocks of split `split` (all of them when num_splits = 1). */
struct KeyRange {
  int begin, end;
};
__device__ __forceinline__ KeyRange key_range(const FwdParams& p, int split) {
  KeyRange r;
  r.begin = split * p.split_blocks;
  r.end = min(r.begin + p.split_blocks, p.num_n_blocks);
  return r;
}
/* The tail split's (tile_scheduler.cuh's tail_coord): part -1 is a whole tile. */
__device__ __forceinline__ KeyRange tail_key_range(const FwdParams& p, int part) {
  KeyRange r;
  r.begin = part < 0 ? 0 : part * p.tail_blocks;
  r.end = part < 0 ? p.num_n_blocks : min(r.begin + p.tail_blocks, p.num_n_blocks);
  return r;
}

/* One elected thread. Stage s of the K/V ring is used by key blocks kv = s, s + 2, ... counted over
 * all tiles of this CTA; the producer waits for the previous use to be released (parity flipped:
 * the first wait on a fresh barrier returns at once). */
/* The next tile's number beside its Q stage: written before the stage's arrive (release), read
 * after its wait (acquire); asm volatile with a memory clobber keeps each on its side. */
__device__ __forceinline__ void st_tile_id(int* slot, int tile) {
  asm volatile("st.shared.u32 [%0], %1;" ::"r"(smem_u32(slot)), "r"(tile) : "memory");
}
__device__ __forceinline__ int ld_tile_id(int* slot) {
  int tile;
  asm volatile("ld.shared.u32 %0, [%1];" : "=r"(tile) : "r"(smem_u32(slot)) : "memory");
  return tile;
}

/* The dynamic scheduler's end (the producer's, after its last take): every CTA has taken its last
 * tile before it counts itself done, and the last one resets both counters for the next launch.
 * The fences (release, acquire: split.cuh's pattern) order each CTA's last take before its count and
 * the reset after every count (any grid size: a CTA past the tiles takes nothing and counts itself
 * all the same). */
__device__ __forceinline__ void reset_tile_counter_if_last(const FwdParams& p) {
  asm volatile("fence.acq_rel.gpu;" ::: "memory");
  if (atomicAdd(&p.tile_counter[1], 1) == (int)gridDim.x - 1) {
    asm volatile("fence.acq_rel.gpu;" ::: "memory");
    atomicExch(&p.tile_counter[0], 0);
    atomicExch(&p.tile_counter[1], 0);
  }
}

/* kDyn: the dynamic scheduler's instantiation (tile_scheduler.cuh), launched only with
 * p.tile_counter set; the static one keeps the code it had before the scheduler existed. kTail:
 * the tail split's (RA_CUDA_TAIL_SPLIT), the same loop over tail_coord's work items. */
template <class P, bool kDyn = false, bool kTail = false>
__device__ __forceinline__ void produce(const FwdParams& p, Smem<P>& sm) {
  constexpr int kQStages = P::kQStages;
  constexpr int kStages = P::kStages;
  constexpr int kBN = P::kBlockN;
  constexpr uint32_t kKVBytes = kBN * 256; /* one K or V block: 2 d-halves of kBN rows x 128 B */
  int kv = 0;
  int tq = 0;
  constexpr bool dyn = kDyn;
  for (int tile = blockIdx.x; tile < p.num_tiles; ++tq) {
    /* RA_CUDA_DYN_SCHED 2: the next tile's number is asked for first, used after this tile's loads */
    const int fetched = RA_CUDA_DYN_SCHED == 2 && dyn ? atomicAdd(&p.tile_counter[0], 1) : 0;
    int part, tail_tile;
    const TileCoord t = kTail ? tail_coord(p, tile, part, tail_tile) : tile_coord(p, tile);
    const KeyRange kr = kTail ? tail_key_range(p, part) : key_range(p, t.split);
    const int qs = tq % kQStages;
    mbar_wait(&sm.q_empty[qs], ((tq / kQStages) & 1) ^ 1);
    if constexpr (dyn) st_tile_id(&sm.tile_id[qs], tile); /* published by the arrive below (release) */
    mbar_arrive_expect_tx(&sm.q_full[qs], kTileBytes);
    tma_load_4d(sm.q[qs][0], &p.tma_q, &sm.q_full[qs], 0, t.m * kBlockM, t.h, t.b);
    tma_load_4d(sm.q[qs][1], &p.tma_q, &sm.q_full[qs], 64, t.m * kBlockM, t.h, t.b);
    for (int n = kr.begin; n < kr.end; ++n, ++kv) {
      const int s = kv % kStages;
      const uint32_t ph = (kv / kStages) & 1;
      mbar_wait(&sm.k_empty[s], ph ^ 1);
      mbar_arrive_expect_tx(&sm.k_full[s], kKVBytes);
      tma_load_4d(sm.k[s][0], &p.tma_k, &sm.k_full[s], 0, n * kBN, t.h, t.b);
      tma_load_4d(sm.k[s][1], &p.tma_k, &sm.k_full[s], 64, n * kBN, t.h, t.b);
      mbar_wait(&sm.v_empty[s], ph ^ 1);
      mbar_arrive_expect_tx(&sm.v_full[s], kKVBytes);
      tma_load_4d(sm.v[s][0], &p.tma_v, &sm.v_full[s], 0, n * kBN, t.h, t.b);
      tma_load_4d(sm.v[s][1], &p.tma_v, &sm.v_full[s], 64, n * kBN, t.h, t.b);
    }
    if constexpr (RA_CUDA_DYN_SCHED == 2 && dyn)
      tile = (int)gridDim.x + fetched;
    else
      tile = dyn ? (int)gridDim.x + atomicAdd(&p.tile_counter[0], 1) : tile + (int)gridDim.x;
  }
  if constexpr (dyn) {
    /* the consumers learn there is no next tile from a Q stage that carries no bytes */
    const int qs = tq % kQStages;
    mbar_wait(&sm.q_empty[qs], ((tq / kQStages) & 1) ^ 1);
    st_tile_id(&sm.tile_id[qs], p.num_tiles);
    mbar_arrive(&sm.q_full[qs]);
    reset_tile_counter_if_last(p);
  }
}

/* S(64 x kBN) = Q_w(64 x 128) K^T: 8 k-steps of 16 along d. K-major 128B-swizzled operands: the
 * k-step's 32-byte column slice is addressed by moving the start address inside the swizzle row
 * (the hardware applies the XOR on absolute address bits; tiles are 1024-aligned). SBO = 1024: the
 * next 8 rows. LBO is unused for swizzled K-major layouts. A d-half is 128 rows of Q, kBN of K. */
template <int kBN>
__device__ __forceinline__ void gemm_qk(float (&s)[kBN / 2], uint32_t q_addr, uint32_t k_addr) {
  /* The address field is addr >> 4 in the low bits, so a k-step's descriptor is the tile's plus a
   * constant (smem addresses stay below 2^18: no carry out of the field). */
  const uint64_t dq = make_desc_sw128(q_addr, 16, 1024);
  const uint64_t dk = make_desc_sw128(k_addr, 16, 1024);
#pragma unroll
  for (int kk = 0; kk < 8; ++kk) {
    const uint32_t off = ((kk >> 2) * kHalfBytes + (kk & 3) * 32) >> 4;
    const uint32_t koff = ((kk >> 2) * (uint32_t)(kBN * 128) + (kk & 3) * 32) >> 4;
    wgmma_m64nNk16_ss<kBN>(s, dq + off, dk + koff, kk > 0);
  }
}

/* k-steps [J0, J1) of O += P V (gemm_pv below is all of them): the split P.V issues a block's
 * product in two commit groups, the first while the second half's exponentials run. */
template <int kBN, int J0, int J1>
__device__ __forceinline__ void gemm_pv_range(float (&o)[64], const uint32_t (&pf)[kBN / 4], uint32_t v_addr,
                                              int accumulate) {
  const uint64_t dv = make_desc_sw128(v_addr, kBN * 128, 1024);
#pragma unroll
  for (int j = J0; j < J1; ++j) {
    const uint32_t a[4] = {pf[4 * j + 0], pf[4 * j + 1], pf[4 * j + 2], pf[4 * j + 3]};
    wgmma_m64n128k16_rs_tb(o, a, dv + j * (2048 >> 4), j > J0 || accumulate);
  }
}

/* O(64 x 128) += P(64 x kBN keys, registers) V(kBN keys x 128 d): kBN / 16 k-steps of 16 keys. V
 * is MN-major: LBO = a d-half (kBN x 128 B: 16 KB at 128 keys) to the second d-half (next 64
 * columns of N), SBO = 1024 to the next 8 keys; a k-step of 16 keys is 2048 bytes. accumulate = 0
 * on a tile's first block: O = P V, so O is never zeroed by ordinary instructions (which, while the
 * next tile's S = Q K^T is in flight, would make ptxas serialise the wgmmas: C7515). */
template <int kBN>
__device__ __forceinline__ void gemm_pv(float (&o)[64], const uint32_t (&pf)[kBN / 4], uint32_t v_addr,
                                        int accumulate) {
  gemm_pv_range<kBN, 0, kBN / 16>(o, pf, v_addr, accumulate);
}

/* Scores (accumulator layout) -> bf16 A fragments of the P.V product: k-step j takes n8-tiles 2j
 * (a0: row r, a1: row r + 8) and 2j + 1 (a2, a3). Here k-steps [J0, J1) only;
 * scores_to_frags below takes them all. */
template <int kBN, int J0, int J1>
__device__ __forceinline__ void scores_to_frags_range(const float (&s)[kBN / 2], uint32_t (&pf)[kBN / 4]) {
#pragma unroll
  for (int j = J0; j < J1; ++j) {
    pf[4 * j + 0] = pack_bf16x2(s[8 * j + 0], s[8 * j + 1]);
    pf[4 * j + 1] = pack_bf16x2(s[8 * j + 2], s[8 * j + 3]);
    pf[4 * j + 2] = pack_bf16x2(s[8 * j + 4], s[8 * j + 5]);
    pf[4 * j + 3] = pack_bf16x2(s[8 * j + 6], s[8 * j + 7]);
  }
}

template <int kBN>
__device__ __forceinline__ void scores_to_frags(const float (&s)[kBN / 2], uint32_t (&pf)[kBN / 4]) {
  scores_to_frags_range<kBN, 0, kBN / 16>(s, pf);
}

/* Each warp releases a stage once its own wgmmas that read it have completed (wait_group is
 * warp-synchronous, so lane 0 arriving after it speaks for the warp). */
__device__ __forceinline__ void warp_release(uint64_t* bar, int lane) {
  if (lane == 0) mbar_arrive(bar);
}

/* When the next tile's S = Q K_0^T is issued (the kernel's kNQK, chosen per launch by plan.h):
 * true: beside this tile's last P.V, so that it runs during the epilogue; false: after the epilogue,
 * waited for at once. RA_CUDA_NEXT_QK: -1 (default) true for seqlen_k <= RA_CUDA_NEXT_QK_MAX_KEYS,
 * 0 never, 1 always. On the H200 with the TMA-store epilogue (docs/perf-notes.md v4), "always" was
 * ahead by 2-8 % against cuDNN where a tile has one or two key blocks (77, 128, 256 keys), even at
 * 512-1024, and 1-3 % behind at most long shapes. (v3, with the slow epilogue, it bought nothing.)
 *
 * The split P.V (RA_CUDA_SPLIT_PV, docs/perf-notes.md v15): a block's P.V is issued in two halves
 * of its k-steps, the first as soon as the first half of the block's exponentials is done, so the
 * second half's run beside it on the MUFU while the tensor cores multiply, instead of all of them
 * in front of the product: a tile's first block, whose softmax had no product beside it at all,
 * now has half of one; every later block's first-half exponentials run beside the previous block's
 * second-half product. The same arithmetic in the same order (the row sums' chains, the k-steps
 * into O, the rescales), so the bits are the unsplit schedule's. The loop's back edge is where no
 * wgmma is in flight (after the wait for the previous second half), which ptxas needs not to
 * serialise them. 1 (default since device calls 51-53: 1.030 / 1.033 / 1.031x the speed of 0 over
 * the 30 nightly families, rtne / rtna / rtz; the nightly from 1.050 / 1.047 / 1.049x cuDNN to
 * 1.081 / 1.078 / 1.080x, 1.089 / 1.086 / 1.089x with RA_CUDA_EARLY_FRAGS), 0 = one P.V per block
 * after the whole softmax (v4-v14). RA_CUDA_EARLY_FRAGS 1 (default): with the split P.V, the next
 * block's first-half fragments are packed before the wait for the second half's product, so after
 * it only the rescale stands before the next issue; 0: after it (the same bits).
 *
 * O *= corr on every block (a vote that skips it where every corr is exactly 1 measured slower:
 * docs/perf-notes.md, deleted flags). */

/* A warpgroup whose 64 query rows all lie past seqlen_q (decode: seqlen_q <= 64 leaves warpgroup 2
 * with no row) skips the tile's softmax, P.V products, epilogue and every Q K^T but the first
 * (issued before the tile's rows were known), and only releases the stages it would have read, so
 * the producer's ring keeps turning. */
__device__ __forceinline__ bool wg_idle(const FwdParams& p, int m_block, int wg) {
  return m_block * kBlockM + wg * 64 >= p.seqlen_q;
}

/* The hand-over of S = Q K_0^T between a consumer warpgroup's tiles, over the consumer's own
 * variables (references: consume() owns them). A tile's S = Q K_0^T is computed before the tile
 * starts: the first tile's in consume(), every later one's at the end of the previous tile (after
 * its epilogue, or with kNQK beside its last P.V), and waited for there. ptxas serialises every
 * wgmma of the kernel (C7515) when an accumulator is in flight across the loop's back edge, or when
 * the issue is conditional; so the wait stays inside the iteration and the last tile issues a
 * discarded S = Q K_0^T on its own, already released, buffers (the producer loads nothing after a
 * CTA's last tile). */
template <class P, bool kDyn>
struct QK0 {
  static constexpr int kQStages = P::kQStages;
  static constexpr int kStages = P::kStages;
  static constexpr int kBN = P::kBlockN;
  const FwdParams& p;
  Smem<P>& sm;
  float (&s)[kBN / 2];
  const int& wg;
  const int& tile;
  int& next;

  /* 64 rows of 128 B into each d-half of Q stage qs */
  __device__ __forceinline__ uint32_t q_addr_of(int qs) const { return smem_u32(&sm.q[qs][0][0]) + wg * 64 * 128; }
  __device__ __forceinline__ void wait(int tq_n, int kv_n) const {
    mbar_wait(&sm.q_full[tq_n % kQStages], (tq_n / kQStages) & 1);
    mbar_wait(&sm.k_full[kv_n % kStages], (kv_n / kStages) & 1);
  }
  __device__ __forceinline__ void issue(int tq_n, int kv_n) const {
    gemm_qk<kBN>(s, q_addr_of(tq_n % kQStages), smem_u32(&sm.k[kv_n % kStages][0][0]));
    wgmma_commit();
  }
  /* The tile after this one, once the caller needs it (with the dynamic scheduler: waits for the
   * producer to have taken it, i.e. for its Q stage, which the caller waits for next anyway). */
  __device__ __forceinline__ bool resolve_next(int tq_n) const {
    if constexpr (kDyn) {
      mbar_wait(&sm.q_full[tq_n % kQStages], (tq_n / kQStages) & 1);
      next = ld_tile_id(&sm.tile_id[tq_n % kQStages]);
    } else {
      next = tile + (int)gridDim.x;
    }
    return next < p.num_tiles;
  }
  /* Beside the last block's P.V: the next tile's S = Q K_0^T (a discarded one after the last tile),
   * once its Q and K_0 are there (usually already); kDyn resolved the tile before. */
  __device__ __forceinline__ void issue_next(bool dyn_next, int tq_now, int kv_now, int nb_now) const {
    bool has_next = dyn_next;
    if constexpr (!kDyn) {
      has_next = resolve_next(tq_now + 1);
      if (has_next) wait(tq_now + 1, kv_now + nb_now);
    }
    issue(has_next ? tq_now + 1 : tq_now, has_next ? kv_now + nb_now : kv_now);
  }
  /* kDyn with kNQK: the next tile is known only from shared memory, and a wait on it between the
   * last block's wgmmas made ptxas serialise them (C7520, call 31's build): resolved before they
   * issue */
  template <bool kNQK>
  __device__ __forceinline__ bool resolve_next_early(int tq, int kv, int nb) const {
    bool dyn_next = false;
    if constexpr (kNQK && kDyn) {
      dyn_next = resolve_next(tq + 1);
      if (dyn_next) wait(tq + 1, kv + nb);
    }
    return dyn_next;
  }
};

/* A warpgroup with no row of a tile of nb key blocks (its block 0's K already released): it releases
 * the Q stage and the K/V stages it would have read, so the producer's ring keeps turning. */
template <class P>
__device__ __forceinline__ void release_tile(Smem<P>& sm, int lane, int nb, int qs, int kv) {
  constexpr int kStages = P::kStages;
  warp_release(&sm.q_empty[qs], lane);
  for (int n = 0; n < nb; ++n) {
    const int kc = kv + n;
    if (n > 0) {
      mbar_wait(&sm.k_full[kc % kStages], (kc / kStages) & 1);
      warp_release(&sm.k_empty[kc % kStages], lane);
    }
    mbar_wait(&sm.v_full[kc % kStages], (kc / kStages) & 1);
    warp_release(&sm.v_empty[kc % kStages], lane);
  }
}

/* wg_idle's tile: releases the stages it would have read, then issues the next tile's S. */
template <class P, bool kDyn>
__device__ __forceinline__ void idle_tile(const QK0<P, kDyn>& h, int lane, int nb, int qs, int& kv, int tq) {
  release_tile<P>(h.sm, lane, nb, qs, kv);
  kv += nb;
  if (h.resolve_next(tq + 1)) {
    h.wait(tq + 1, kv);
    wgmma_fence();
    h.issue(tq + 1, kv);
  }
  wgmma_wait<0>();
}

/* What a tile's key-block loop reads besides the hand-over: its blocks, stages and stage counters. */
struct TileBlocks {
  int nb;         /* key blocks */
  bool tail;      /* the last is partial */
  int qs;         /* Q stage */
  uint32_t q_addr;
  int kv;         /* K/V stage counter at the tile's start */
  int tq;         /* Q stage counter */
  int last_valid; /* keys in the last block, 1..kBN */
  int qc, lane;
};

/* The split P.V's key blocks of a tile (S_0 ready): block n's softmax is begin (max, corr), exps
 * over [0, kH), then in the loop: O rescaled, P.V over the first k-steps issued, exps over
 * [kH, kNT) beside it, S_{n+1} and the second k-steps issued, block n + 1's begin and first exps
 * beside those, and the wait for them all. */
template <bool kNQK, class P, bool kDyn, class Softmax, class Mk = TailMask>
__device__ __forceinline__ void blocks_split_pv(const QK0<P, kDyn>& h, const TileBlocks& b, float (&o)[64],
                                                float (&corr)[2], Softmax& sfm, uint32_t (&pf)[P::kBlockN / 4],
                                                const Mk& mk = Mk{}) {
  constexpr int kStages = P::kStages;
  constexpr int kBN = P::kBlockN;
  constexpr int kNT = kBN / 8;      /* column tiles of 8 keys */
  constexpr int kH = 2 * (kNT / 4); /* the first half's column tiles: whole k-steps (16 keys) */
  /* a staircase fold (Mk::kStair, stair.cuh) reads block n's P after its P.V: not overwritten early */
  constexpr bool kEarlyFrags = RA_CUDA_EARLY_FRAGS && !Mk::kStair;
  const FwdParams& p = h.p;
  Smem<P>& sm = h.sm;
  float(&s)[kBN / 2] = h.s;
  const int nb = b.nb, kv = b.kv, lane = b.lane;
  float ms[2], sum[2];
  if (mk.masks(b, 0))
    mk.template begin<true>(sfm, s, p.scale_log2, b, 0, corr, ms, sum);
  else
    sfm.template begin<true, false>(s, p.scale_log2, kBN, b.qc, corr, ms, sum);
  sfm.template exps<0, kH>(s, p.scale_log2, ms, sum);
  scores_to_frags_range<kBN, 0, kH / 2>(s, pf);
  /* blocks 0 .. nb - 2: each ends with no wgmma in flight */
  for (int n = 0; n < nb - 1; ++n) {
    const int kc = kv + n;
    const int sc = kc % kStages;
    const int kn = kc + 1;
    const int sn = kn % kStages;
    if (!kEarlyFrags && n > 0) scores_to_frags_range<kBN, 0, kH / 2>(s, pf);
    mbar_wait(&sm.v_full[sc], (kc / kStages) & 1);
    mk.before_pv(sm, sc, n);
    wgmma_fence();
    gemm_pv_range<kBN, 0, kH / 2>(o, pf, smem_u32(&sm.v[sc][0][0]), n > 0);
    wgmma_commit();
    sfm.template exps<kH, kNT>(s, p.scale_log2, ms, sum);
    sfm.end(n == 0, corr, sum);
    scores_to_frags_range<kBN, kH / 2, kNT / 2>(s, pf);
    mbar_wait(&sm.k_full[sn], (kn / kStages) & 1);
    wgmma_fence();
    gemm_qk<kBN>(s, b.q_addr, smem_u32(&sm.k[sn][0][0]));
    wgmma_commit();
    gemm_pv_range<kBN, kH / 2, kNT / 2>(o, pf, smem_u32(&sm.v[sc][0][0]), 1);
    wgmma_commit();
    wgmma_wait<1>(); /* S_{n+1} is ready (and P_n's first half done); its second half may run */
    fence_regs(s);
    warp_release(&sm.k_empty[sn], lane);
    if (n + 1 == nb - 1) warp_release(&sm.q_empty[b.qs], lane);
    /* the first-half exponentials inside each arm: after the arms, in the block of the wait
     * below, ptxas scheduled them past the wait, out from beside the product */
    /* kEarlyFrags: and their bf16 fragments, which no wgmma in flight reads (P_n's first half
     * is done; its second half reads the other registers) */
    if (mk.masks(b, n + 1)) {
      mk.template begin<false>(sfm, s, p.scale_log2, b, n + 1, corr, ms, sum);
      sfm.template exps<0, kH>(s, p.scale_log2, ms, sum);
      if (kEarlyFrags) scores_to_frags_range<kBN, 0, kH / 2>(s, pf);
    } else {
      sfm.template begin<false, false>(s, p.scale_log2, kBN, b.qc, corr, ms, sum);
      sfm.template exps<0, kH>(s, p.scale_log2, ms, sum);
      if (kEarlyFrags) scores_to_frags_range<kBN, 0, kH / 2>(s, pf);
    }
    wgmma_wait<0>();
    fence_regs(o);
    fence_regs(s);
    mk.after_pv(o, pf, n); /* before the rescale: in block n's frame, as its P.V */
    warp_release(&sm.v_empty[sc], lane);
    rescale_rows<16>(o, corr);
  }
  /* the last block: its two halves, then the next tile's S = Q K_0^T in the same turn (a
   * discarded one after the last tile). Its first half repeats the loop's: as one lambda for
   * both, ptxas scheduled the kernel differently (15,974 SASS lines), untimed */
  {
    const int kl = kv + nb - 1;
    const int sl = kl % kStages;
    const bool dyn_next = h.template resolve_next_early<kNQK>(b.tq, kv, nb);
    if (!kEarlyFrags && nb > 1) scores_to_frags_range<kBN, 0, kH / 2>(s, pf);
    mbar_wait(&sm.v_full[sl], (kl / kStages) & 1);
    mk.before_pv(sm, sl, nb - 1);
    mk.before_last_pv(sm, sl);
    wgmma_fence();
    gemm_pv_range<kBN, 0, kH / 2>(o, pf, smem_u32(&sm.v[sl][0][0]), nb > 1);
    wgmma_commit();
    sfm.template exps<kH, kNT>(s, p.scale_log2, ms, sum);
    sfm.end(nb == 1, corr, sum);
    scores_to_frags_range<kBN, kH / 2, kNT / 2>(s, pf);
    wgmma_fence();
    gemm_pv_range<kBN, kH / 2, kNT / 2>(o, pf, smem_u32(&sm.v[sl][0][0]), 1);
    wgmma_commit();
    if constexpr (kNQK) h.issue_next(dyn_next, b.tq, kv, nb); /* P.V runs meanwhile */
    if constexpr (kNQK)
      wgmma_wait<1>(); /* P.V done; the next S may still run */
    else
      wgmma_wait<0>();
    fence_regs(o);
    mk.after_pv(o, pf, nb - 1);
    warp_release(&sm.v_empty[sl], lane);
  }
}

/* v4-v14's key blocks of a tile (RA_CUDA_SPLIT_PV=0): issue S_n and P_{n-1} V_{n-1}, wait S_n, the
 * whole softmax, wait P.V, rescale O, P_n = bf16(S_n). */
template <bool kNQK, class P, bool kDyn, class Softmax>
__device__ __forceinline__ void blocks_plain(const QK0<P, kDyn>& h, const TileBlocks& b, float (&o)[64],
                                             float (&corr)[2], Softmax& sfm, uint32_t (&pf)[P::kBlockN / 4]) {
  constexpr int kStages = P::kStages;
  constexpr int kBN = P::kBlockN;
  const FwdParams& p = h.p;
  Smem<P>& sm = h.sm;
  float(&s)[kBN / 2] = h.s;
  const int nb = b.nb, kv = b.kv, lane = b.lane;
  if (nb == 1 && b.tail)
    sfm.template step<true, true>(s, p.scale_log2, b.last_valid, b.qc, corr);
  else
    sfm.template step<true, false>(s, p.scale_log2, kBN, b.qc, corr);
  scores_to_frags<kBN>(s, pf);

  for (int n = 1; n < nb; ++n) {
    const int kc = kv + n;
    const int kp = kc - 1;
    const int sc = kc % kStages;
    const int sp = kp % kStages;
    mbar_wait(&sm.k_full[sc], (kc / kStages) & 1);
    mbar_wait(&sm.v_full[sp], (kp / kStages) & 1);
    wgmma_fence();
    gemm_qk<kBN>(s, b.q_addr, smem_u32(&sm.k[sc][0][0]));
    wgmma_commit();
    gemm_pv<kBN>(o, pf, smem_u32(&sm.v[sp][0][0]), n > 1);
    wgmma_commit();

    wgmma_wait<1>(); /* S_n is ready; P_{n-1} V_{n-1} may still run */
    fence_regs(s);
    warp_release(&sm.k_empty[sc], lane);
    if (n == nb - 1) warp_release(&sm.q_empty[b.qs], lane);
    if (n == nb - 1 && b.tail)
      sfm.template step<false, true>(s, p.scale_log2, b.last_valid, b.qc, corr);
    else
      sfm.template step<false, false>(s, p.scale_log2, kBN, b.qc, corr);

    wgmma_wait<0>();
    fence_regs(o);
    fence_regs(s);
    warp_release(&sm.v_empty[sp], lane);
    rescale_rows<16>(o, corr);
    scores_to_frags<kBN>(s, pf);
  }

  /* the last block's P.V, then the next tile's S = Q K_0^T in the same turn (a discarded one after
   * the last tile) */
  {
    const int kl = kv + nb - 1;
    const int sl = kl % kStages;
    const bool dyn_next = h.template resolve_next_early<kNQK>(b.tq, kv, nb);
    mbar_wait(&sm.v_full[sl], (kl / kStages) & 1);
    wgmma_fence();
    gemm_pv<kBN>(o, pf, smem_u32(&sm.v[sl][0][0]), nb > 1);
    wgmma_commit();
    if constexpr (kNQK) h.issue_next(dyn_next, b.tq, kv, nb); /* P.V runs meanwhile */
    if constexpr (kNQK)
      wgmma_wait<1>(); /* P.V done; the next S may still run */
    else
      wgmma_wait<0>();
    fence_regs(o);
    warp_release(&sm.v_empty[sl], lane);
  }
}

/* A tile's output: a split's fp32 partials, or O rounded to bf16 by the epilogue RA_CUDA_EPILOGUE
 * names; nothing where store_o is false (a tail part whose tile another part merges). */
template <int kRound, Layout L, bool kMerge, bool kTail, class P, class Softmax>
__device__ __forceinline__ void store_output(const FwdParams& p, Smem<P>& sm, float (&o)[64], Softmax& sfm,
                                             const TileCoord& t, bool store_o, int row_in_tile, int qc, int wg,
                                             int tid, int warp, int lane) {
  constexpr int kBN = P::kBlockN;
  const int row0 = t.m * kBlockM + row_in_tile;
  uint16_t* obase = p.o + (int64_t)t.b * p.o_stride[0] + (int64_t)t.h * p.o_stride[1];
  const int64_t os = seq_stride<L>(p.o_stride);
  const bool flip0 = p.nondet_flip && row0 == 0 && t.b == 0 && t.h == 0;
  /* the long plan is launched unsplit only (plan.h): no partials in its code */
  if (!kTail && kBN == kBlockN && p.num_splits > 1) {
    store_partial(p, o, sfm, t, row0, qc); /* split.cuh: the last split's warpgroup or a second launch rounds */
    if constexpr (kMerge) merge_if_last<kRound>(p, t, wg, tid, &sm.merge_flag[wg]);
  } else if (!store_o) {
    /* a tail part whose tile another part merges */
  } else if constexpr (!P::kOStaging || RA_CUDA_EPILOGUE == 0) {
    const int row1 = row0 + 8;
    uint16_t* out0 = row0 < p.seqlen_q ? obase + (int64_t)row0 * os : nullptr;
    uint16_t* out1 = row1 < p.seqlen_q ? obase + (int64_t)row1 * os : nullptr;
    store_rows<16, kRound, (kBN != kBlockN)>(o, sfm.l, out0, out1, qc, flip0); /* the long plan: cvt rounding */
  } else {
#if RA_CUDA_EPILOGUE == 2
    if constexpr ((RA_CUDA_ABLATE & 2) == 0) /* measurement: no output store */
      store_tile_tma<kRound>(o, sfm.l, sm.o[wg * 4 + warp], &p.tma_o, row0 - (lane >> 2), t.h, t.b, lane, flip0);
#elif RA_CUDA_EPILOGUE == 1
    store_tile_smem<kRound>(o, sfm.l, sm.o[wg * 4 + warp], obase, os, row0 - (lane >> 2), p.seqlen_q, lane, flip0);
#endif
  }
}

/* One consumer warpgroup over its CTA's tiles: per tile, its key blocks in the build's schedule
 * (blocks_split_pv or blocks_plain; idle_tile for a warpgroup with no rows), its output
 * (store_output) and the next tile's S = Q K_0^T (QK0). */
template <int kRound, Layout L, bool kNQK, bool kMerge, class P, bool kDyn = false, bool kTail = false>
__device__ __forceinline__ void consume(const FwdParams& p, Smem<P>& sm, int wg, int tid) {
  constexpr int kQStages = P::kQStages;
  constexpr int kStages = P::kStages;
  constexpr int kBN = P::kBlockN;
  const int warp = tid >> 5;
  const int lane = tid & 31;
  const int qc = 2 * (lane & 3);
  const int row_in_tile = wg * 64 + warp * 16 + (lane >> 2);
  const int last_valid = p.seqlen_k - (p.num_n_blocks - 1) * kBN; /* keys in the last block, 1..kBN */
  const bool any_tail = last_valid < kBN;

  float s[kBN / 2];
  uint32_t pf[kBN / 4];

  int kv = 0;
  int tq = 0;
  int tile = blockIdx.x;
  int next = 0;
  const QK0<P, kDyn> h{p, sm, s, wg, tile, next};
  if ((int)blockIdx.x < p.num_tiles) {
    h.wait(0, 0);
    if (RA_CUDA_TRACE && wg == 0 && tid == 0) trace(kTraceFirstData);
    wgmma_fence();
    h.issue(0, 0);
    wgmma_wait<0>();
  }
  for (; tile < p.num_tiles; tile = next, ++tq) {
    int part, tail_tile; /* kTail: which part of which tail tile (part -1: a whole tile) */
    const TileCoord t = kTail ? tail_coord(p, tile, part, tail_tile) : tile_coord(p, tile);
    const KeyRange kr = kTail ? tail_key_range(p, part) : key_range(p, t.split);
    const int nb = kr.end - kr.begin;                        /* this tile's key blocks */
    const bool tail = any_tail && kr.end == p.num_n_blocks; /* its last block is partial */
    const int qs = tq % kQStages;
    const uint32_t q_addr = h.q_addr_of(qs);

    /* key block 0: S is ready */
    fence_regs(s);
    warp_release(&sm.k_empty[kv % kStages], lane);

    if (wg_idle(p, t.m, wg)) {
      idle_tile(h, lane, nb, qs, kv, tq);
      continue;
    }

    const long long tile_start = inject_clock(); /* fire drill: this tile's own time (inject.h) */
    float o[64];
    float corr[2];
    OnlineSoftmax<kBN / 8> sfm;
    sfm.init();
    if (nb == 1) warp_release(&sm.q_empty[qs], lane);
    const TileBlocks b{nb, tail, qs, q_addr, kv, tq, last_valid, qc, lane};
    if constexpr (RA_CUDA_SPLIT_PV)
      blocks_split_pv<kNQK>(h, b, o, corr, sfm, pf);
    else
      blocks_plain<kNQK>(h, b, o, corr, sfm, pf);
    kv += nb;

    /* kTail: a tail part stores its partials, and the last part of its tile to get here replaces o
     * and sfm.l by the merged ones and stores O as a whole tile does (split.cuh) */
    bool store_o = true;
    if constexpr (kTail) {
      if (part >= 0) {
        store_tail_partial(p, o, sfm, tail_tile, part, row_in_tile, qc);
        store_o = tail_merge_if_last(p, o, sfm, tail_tile, row_in_tile, qc, wg, tid, &sm.merge_flag[wg]);
      }
    }
    store_output<kRound, L, kMerge, kTail>(p, sm, o, sfm, t, store_o, row_in_tile, qc, wg, tid, warp, lane);
    if constexpr (!kNQK) {
      const bool has_next = h.resolve_next(tq + 1);
      if (has_next) h.wait(tq + 1, kv);
      wgmma_fence();
      h.issue(has_next ? tq + 1 : tq, has_next ? kv : b.kv);
    }
    wgmma_wait<0>(); /* the next tile's S */
    inject_spin(tile_start);
  }
  if constexpr (P::kOStaging && RA_CUDA_EPILOGUE == 2) store_tile_tma_drain(lane);
}

}  // namespace sm90
}  // namespace ra_cuda
