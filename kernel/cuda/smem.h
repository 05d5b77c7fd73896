/*
 * smem.h — the sm_90a kernels' shared-memory plans (Q buffers, K/V stages, key block, output staging)
 * and the fallback's, as plain C++17 types: the kernels lay their shared memory out by them, and the
 * host planner (plan.h) takes each kernel's dynamic shared memory from the same sizeof, with no CUDA
 * headers. Every tile is 128-byte swizzled by TMA and split in two d-halves of 64 columns.
 */
#pragma once
#include <cstddef>
#include <cstdint>

#include "flags.h"

namespace ra_cuda {
namespace sm90 {


constexpr int kBlockM = 128;
constexpr int kBlockN = 128;
constexpr int kThreads = 384;        /* warpgroup 0: producer; 1, 2: consumers */
constexpr int kConsumerWarps = 8;    /* arrivals that complete an "empty" barrier */
constexpr uint32_t kHalfBytes = 128 * 64 * 2; /* one d-half of a 128-row tile: 16 KB */
constexpr uint32_t kTileBytes = 2 * kHalfBytes;

/* How a CTA's shared memory is spent: Q buffers, K/V stages, and whether the epilogue has its
 * staging (else it stores from registers, epilogue 0).
 * Main: 2 Q buffers, so the producer loads tile t + 1's Q (and, the K/V ring being free by then,
 * its first K and V) while tile t still computes, so a CTA always has the next tile's loads in
 * flight: what short key ranges (one or two key blocks per tile) need, where a tile is mostly
 * load latency; 2 K/V stages; staging. 224 KB of the 227 KB a CTA may have.
 * (A 3-stage decode plan was measured and deleted: docs/perf-notes.md, deleted flags.) */
template <int kQ, int kKV, bool kStaging, int kN = kBlockN>
struct Plan {
  static constexpr int kQStages = kQ;
  static constexpr int kStages = kKV;
  static constexpr bool kOStaging = kStaging;
  static constexpr int kBlockN = kN; /* keys per K/V block */
  static_assert(kN % 16 == 0 && kN <= 256, "P.V takes k-steps of 16 keys; a TMA box has at most 256 rows");
};
using MainPlan = Plan<RA_CUDA_Q_STAGES, 2, (RA_CUDA_EPILOGUE >= 1)>;

/* The long-key plan (-DRA_CUDA_LONG_BLOCK_N=N, 160 by default, 0 = none, < 0 = N of 176 that
 * long_keys_pay takes only under RA_CUDA_LONG_RULE=0; attention_sm90.cu takes it for
 * unsplit launches with seqlen_k >= RA_CUDA_LONG_MIN_KEYS, under RA_CUDA_LONG_RULE): key blocks of N keys, as
 * FlashAttention-3's 128 x 176 tile for head_dim 128, so a tile pays its per-block costs (row max
 * and sum reductions, barrier waits, the wgmma issue and wait) 128 / N times as often per FLOP.
 * A K or V stage is N x 256 bytes; 2 K/V stages leave room for one Q buffer only:
 *   N = 160: Q 32 KB + K/V 2 x 2 x 40 KB + staging 32 KB = 224 KB (the main plan's total);
 *   N = 176: Q 32 KB + K/V 2 x 2 x 44 KB = 208 KB; the staging's 32 KB would make 240: the output
 *            is stored from registers (epilogue 0's 4-byte stores, with the cvt rounding);
 *   N = 192: Q 32 KB + K/V 2 x 2 x 48 KB = 224 KB, no staging.
 * The loss accepted is the second Q buffer (v3: a tile's next Q loads while it computes), which
 * bought its gain where a tile has 1-2 key blocks, not at >= 12. Registers per consumer thread: S
 * N / 2 fp32, P N / 4 bf16x2, O 64: 184 / 196 / 208 of the 232. */
/* RA_CUDA_LONG_BLOCK_N: 160 by default since device calls 33-35 (docs/perf-notes.md v12) */
constexpr int kLongBlockN = RA_CUDA_LONG_BLOCK_N > 0 ? RA_CUDA_LONG_BLOCK_N : 176;
constexpr bool kLongStaging = (RA_CUDA_EPILOGUE >= 1) && 32 * 1024 + 4 * kLongBlockN * 256 + 32 * 1024 + 2048 <= 227 * 1024;
using LongPlan = Plan<1, 2, kLongStaging, kLongBlockN>;

/* The short-key plan (-DRA_CUDA_SHORT_BLOCK_N=N, 80 by default, 0 = none; attention_sm90.cu takes it
 * for unsplit launches of the next-Q-K^T schedule with seqlen_k <= N, off the dynamic scheduler):
 * one key block of N keys instead of 128, so a tile of text-encoder cross-attention (77 keys) does
 * 80 / 128 of the Q K^T and P.V work and of the softmax, the rest of which was keys past seqlen_k.
 * A K or V stage is N x 256 bytes (20 KB at 80), which frees the room for a third Q buffer
 * (RA_CUDA_SHORT_Q_STAGES): Q 3 x 32 KB + K/V 2 x 2 x 20 KB + staging 32 KB = 208 KB, so the
 * producer has the Q of the next two tiles in flight while one computes (such a tile is mostly its
 * loads and its store). The scores past seqlen_k that it no longer computes were -Inf, their p
 * exactly 0 and their V rows zero-filled: the row sums and P.V add the same non-zero terms in the
 * same order, so its outputs are the default kernel's bits: benchmarks/h200/h200_split.py's SHORT_CHECK
 * and SHORT_EDGES compare them, and on the H200 (docs/perf-notes.md v14) 96 comparisons differ in
 * no element, an exact -0 output at 80 keys included (the 128-key kernel's k-steps of +0 products
 * past the keys could have made it +0: they did not). */
constexpr int kShortBlockN = RA_CUDA_SHORT_BLOCK_N > 0 ? RA_CUDA_SHORT_BLOCK_N : 80;
static_assert(kShortBlockN < kBlockN, "the short-key plan's block is smaller than the default's");
using ShortPlan = Plan<RA_CUDA_SHORT_Q_STAGES, 2, (RA_CUDA_EPILOGUE >= 1), kShortBlockN>;

template <bool kStaging>
struct OStaging {
  alignas(1024) uint16_t o[kConsumerWarps][16 * 128]; /* per-warp output staging (epilogue.cuh) */
};
template <>
struct OStaging<false> {};

template <class P>
struct Smem : OStaging<P::kOStaging> {
  alignas(1024) uint16_t q[P::kQStages][2][128 * 64];
  alignas(1024) uint16_t k[P::kStages][2][P::kBlockN * 64];
  alignas(1024) uint16_t v[P::kStages][2][P::kBlockN * 64];
  uint64_t q_full[P::kQStages], q_empty[P::kQStages];
  uint64_t k_full[P::kStages], k_empty[P::kStages];
  uint64_t v_full[P::kStages], v_empty[P::kStages];
  int merge_flag[2]; /* split.cuh's merge_if_last, one per consumer warpgroup */
  int tile_id[P::kQStages]; /* RA_CUDA_DYN_SCHED: the tile whose Q is in stage s (num_tiles: none);
                             * accessed as shared (st_tile_id, ld_tile_id): a generic access through
                             * the aligned base leaves the shared window (ST.E, LD.E.STRONG.SYS) */
};
/* The v2 kernels' (mainloop_v2.cuh): the dense layout, then each Q stage's TileInfo (pack_gqa.cuh:
 * 8 ints), which the producer writes before the stage's arrive and the consumers read after its wait.
 * With RA_CUDA_STAIR_EXACT=1, a ring of kStairSlots for the staircase votes (stair.cuh), tile tq in
 * slot tq % kStairSlots: its TileInfo, which the producer writes a tile ahead of its Q stage and
 * publishes by an arrive on stair_info_full (1 a phase), and the vote, one word per vote warp, each
 * written before that warp's arrive on stair_full (3 a phase) and read by the consumers after its
 * wait. Four slots: a slot is rewritten only after the producer has passed the Q stage release of
 * the tile three before, which the consumers give after reading that tile's vote. */
constexpr int kStairSlots = 4;
template <class P>
struct SmemV2 : Smem<P> {
  alignas(16) int tile_info[P::kQStages][8];
#if RA_CUDA_STAIR_EXACT
  alignas(16) int stair_info[kStairSlots][8];
  alignas(16) int stair_votes[kStairSlots][4];
  uint64_t stair_info_full[kStairSlots];
  uint64_t stair_full[kStairSlots];
#endif
};
template <class P>
constexpr size_t kSmemBytes = sizeof(Smem<P>) + 1024; /* + room to align the base to 1024 */
template <class P>
constexpr size_t kSmemBytesV2 = sizeof(SmemV2<P>) + 1024;
static_assert(sizeof(SmemV2<MainPlan>) + 1024 <= 227 * 1024, "over the sm_90 limit of dynamic shared memory per block");
static_assert(kSmemBytes<MainPlan> <= 227 * 1024, "over the sm_90 limit of dynamic shared memory per block");
static_assert(kSmemBytes<LongPlan> <= 227 * 1024, "over the sm_90 limit of dynamic shared memory per block");
static_assert(kSmemBytes<ShortPlan> <= 227 * 1024, "over the sm_90 limit of dynamic shared memory per block");

}  // namespace sm90

namespace sm80 {

constexpr int kBlockM = 64;
constexpr int kBlockN = 64;
constexpr int kThreads = 128;

struct Smem {
  alignas(128) uint16_t q[kBlockM * 128];
  alignas(128) uint16_t k[2][kBlockN * 128];
  alignas(128) uint16_t v[2][kBlockN * 128];
};
constexpr size_t kSmemBytes = sizeof(Smem);

}  // namespace sm80

/* Rows a warpgroup's 4 warps merge at the end of its last split, one each (split.cuh's
 * merge_if_last): merge_row's two rounds of L2 latency (~1.5 us) are paid once, not per row. */
constexpr int kMergeInKernelMaxRows = 4;
constexpr int kMergeRowsPerBlock = 4; /* attn_merge_splits: one warp per row */

}  // namespace ra_cuda
