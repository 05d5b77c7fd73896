/*
 * plan.h — the sm_90a library's launch planner: which kernel runs a shape, on how many CTAs, with
 * which split over keys, shared memory and workspace. Pure host code, plain C++17 with no CUDA
 * headers: attention_sm90.cu's launch() runs exactly this (validate, plan, allocate the workspace
 * the plan names, switch on plan.kind), and plan_host.cpp builds the same planner with g++ alone so
 * that Python, the tests and the benchmarks ask it through ra_plan_launch on a machine with no GPU.
 *
 * The call it plans is call_view's (below): the caller's, or under RA_CUDA_GQA_ROWS=1 (the default) a
 * GQA call whose query heads are rows of one dense head as that dense call (kernel/common/gqa_rows.h).
 * The rules, in the order plan() applies them:
 *   1. The fallback (mma.sync, 64 x 64 tiles) where a TMA descriptor cannot express the tensors
 *      (launch(): cuTensorMapEncodeTiled's answer; ra_plan_launch: tma_expressible below) or
 *      RA_CUDA_FORCE_MMA_SYNC=1. (batch x head) is grid.y: launches of whole batches, more than
 *      65535 heads refused.
 *   2. The schedule: the next tile's Q K^T beside the last P.V (next_qk) where seqlen_k <=
 *      RA_CUDA_NEXT_QK_MAX_KEYS (RA_CUDA_NEXT_QK = -1) or always / never (1 / 0).
 *   3. The uniform split over keys (split_rule's cost model), if its workspace fits; decode's
 *      splits (seqlen_q <= kMergeInKernelMaxRows, not next_qk) merge in the kernel, the others in
 *      attn_merge_splits.
 *   4. The dynamic scheduler: unsplit next_qk launches of at most RA_CUDA_DYN_MAX_BLOCKS key blocks
 *      and RA_CUDA_DYN_MAX_M_BLOCKS query blocks a head (two counters of workspace).
 *   5. The grid: min(tiles, SMs), balanced to the fewest CTAs that keep the tile waves
 *      (RA_CUDA_GRID_BALANCE) except on the dynamic scheduler (CTAs take tiles as they free up).
 *   6. The tail split (tail_split_plan below) of unsplit, not next_qk, non-decode launches that the
 *      long-key kernel does not take, if its workspace fits; then one CTA per SM.
 *   7. The kernel, the first that holds: merge in kernel; dynamic; short keys (unsplit next_qk off
 *      the dynamic scheduler, seqlen_k <= RA_CUDA_SHORT_BLOCK_N); tail split; long keys (unsplit,
 *      not next_qk, non-decode, long_keys_pay); else the main kernel of the schedule.
 * A workspace that cannot be had (launch(): the allocation failed) is planned again with none: no
 * split of either kind and no dynamic scheduler.
 */
#pragma once
#include <cstddef>
#include <cstdint>

#include "../common/gqa_rows.h"
#include "../common/validate.h"
#include "../include/regress_attn.h"
#include "flags.h"
#include "smem.h"

namespace ra_cuda {

/* The kernels a plan can name; the values are ra_launch_plan.kind_id, the names its kind. */
enum class Kind : int32_t {
  kMain = 0,          /* attn_fwd_sm90<R, L, false, false, false>: Q K^T after the epilogue */
  kMainNextQK = 1,    /* attn_fwd_sm90<R, L, false, true, false>: the next Q K^T beside the last P.V */
  kMergeInKernel = 2, /* attn_fwd_sm90<..., kMerge = true>: decode's splits merged by their last part */
  kDynamic = 3,       /* attn_fwd_sm90<..., kDyn = true>: tiles taken from a counter */
  kShort = 4,         /* attn_fwd_sm90_short: one key block of RA_CUDA_SHORT_BLOCK_N keys */
  kTailSplit = 5,     /* attn_fwd_sm90_tail: the last partial round's tiles split over keys */
  kLong = 6,          /* attn_fwd_sm90_long: key blocks of RA_CUDA_LONG_BLOCK_N keys */
  kMmaSync = 7,       /* attn_fwd_mma_sync: the fallback */
  /* ABI v2 (issue 40): attn_fwd_sm90_v2<R, Mask, Seq, kPack>, kind 8 + causal + 2 varlen + 4 packed
   * (rule 0 below): the dense kernels above never take a v2 feature, so their code is unchanged */
  kV2 = 8,
  kV2Causal = 9,
  kV2Varlen = 10,
  kV2VarlenCausal = 11,
  kV2Pack = 12,
  kV2PackCausal = 13,
  kV2VarlenPack = 14,
  kV2VarlenPackCausal = 15,
};
constexpr int kKinds = 16;
constexpr Kind v2_kind(bool causal, bool varlen, bool pack) {
  return Kind(int32_t(Kind::kV2) + (causal ? 1 : 0) + (varlen ? 2 : 0) + (pack ? 4 : 0));
}
constexpr bool is_v2_kind(Kind k) { return int32_t(k) >= int32_t(Kind::kV2); }

inline const char* kind_name(Kind k) {
  switch (k) {
    case Kind::kMain: return "sm90_main";
    case Kind::kMainNextQK: return "sm90_main_next_qk";
    case Kind::kMergeInKernel: return "sm90_merge_in_kernel";
    case Kind::kDynamic: return "sm90_dynamic";
    case Kind::kShort: return "sm90_short";
    case Kind::kTailSplit: return "sm90_tail_split";
    case Kind::kLong: return "sm90_long";
    case Kind::kMmaSync: return "sm80_mma_sync";
    case Kind::kV2: return "sm90_v2";
    case Kind::kV2Causal: return "sm90_v2_causal";
    case Kind::kV2Varlen: return "sm90_v2_varlen";
    case Kind::kV2VarlenCausal: return "sm90_v2_varlen_causal";
    case Kind::kV2Pack: return "sm90_v2_packgqa";
    case Kind::kV2PackCausal: return "sm90_v2_packgqa_causal";
    case Kind::kV2VarlenPack: return "sm90_v2_varlen_packgqa";
    case Kind::kV2VarlenPackCausal: return "sm90_v2_varlen_packgqa_causal";
  }
  return "unknown";
}

constexpr int kDecodeMaxRows = 64;       /* seqlen_q <= this: decode (no tail split, no long kernel) */
constexpr int kMaxGridY = 65535;         /* CUDA's limit on gridDim.y (the fallback's batch x head) */
constexpr size_t kMaxWorkspaceBytes = size_t{512} << 20;

/* ---- split over keys: split_rule ----
 * Splits for a launch of `tiles` (batch, head, query block) tiles of `nb` key blocks on `sms` SMs.
 * Cost model, in key blocks of one CTA (1.5-2.5 us each on the H200): a persistent CTA's serial
 * work, ceil(tiles * s / sms) tiles of ceil(nb / s) blocks plus kSplitTileCost per tile (pipeline
 * fill, epilogue), plus kSplitMergeCost for the merge launch when s > 1 (3.9-8 us in ncu); the
 * s <= kMaxSplits of least cost, and only if it saves a tenth of the unsplit cost: the partials'
 * traffic, which the model leaves out, cost 3-12 % where the grid is already full (forced splits
 * on (8,32,1,4096) and (4,32,64,8192), docs/perf-notes.md v5). So it splits where the grid leaves
 * SMs idle for much of the launch: decode and short queries at small batch x heads, long keys at
 * few heads. RA_CUDA_SPLIT = N > 0: min(N, nb) (1: never). */
constexpr int kMaxSplits = 32;
constexpr int kSplitTileCost = 1;
constexpr int kSplitMergeCost = 3;

inline int split_rule(int64_t tiles, int nb, int sms) {
  if (RA_CUDA_SPLIT > 0) return RA_CUDA_SPLIT < nb ? RA_CUDA_SPLIT : nb;
  auto cost = [&](int s) {
    const int sb = (nb + s - 1) / s;
    return (tiles * s + sms - 1) / sms * (sb + kSplitTileCost) + (s > 1 ? kSplitMergeCost : 0);
  };
  int best = 1;
  int64_t best_cost = cost(1);
  const int top = nb < kMaxSplits ? nb : kMaxSplits;
  for (int s = 2; s <= top; ++s) {
    const int sb = (nb + s - 1) / s;
    if ((nb + sb - 1) / sb != s) continue; /* s would leave a split empty: the same as fewer */
    if (cost(s) < best_cost) best_cost = cost(s), best = s;
  }
  return 10 * best_cost <= 9 * cost(1) ? best : 1;
}

/* ---- the tail split: tail_split_plan ----
 * Wave quantization: a persistent launch of `tiles` tiles on `sms` SMs runs R = floor(tiles / sms)
 * whole rounds and a last round of tail = tiles - R sms tiles, which leaves sms - tail SMs idle
 * (2048 tiles on 132 SMs: 15 rounds + 68, 97.0 % of the machine at best). split_rule's uniform
 * split cannot help there: tiles * s stays misaligned with sms. The tail split runs the R sms first
 * tiles whole, on one CTA per SM, and cuts only the tail's tiles into s parts over contiguous key
 * ranges, so their tail * s parts fill ceil(tail * s / sms) rounds of ~nb / s key blocks each; the
 * last part of each tile to finish merges in fp32 and rounds once.
 * Cost model, in key-block times of one CTA (split_rule's unit):
 *   a whole tile      nb + 1          (the 1: pipeline fill and epilogue, split_rule's kSplitTileCost)
 *   a part            ceil(nb / s) + 1  (its own fill, and its fp32 partials' store instead of bf16)
 *   the merge         ceil(s / 2)       (the last warpgroup of a tail tile reads s partials of
 *                                        32 KB from L2, ~0.7 us each: about half a key block)
 *   unsplit tail: nb + 1;  split tail: ceil(tail s / sms) (ceil(nb / s) + 1) + ceil(s / 2).
 * The least-cost s in 2..min(nb, kTailMaxSplits) (the smaller on a tie: fewer partials), none
 * leaving a part empty, taken only if it saves at least kTailMinGainPerMille of the unsplit
 * launch's (R + 1) (nb + 1): the model leaves out the partials' traffic and the power cap (132
 * busy SMs instead of 128 may clock lower), so a smaller predicted gain is within its error.
 * Only for launches with at least one whole round (tiles > sms; fewer tiles are split_rule's) and
 * a tail (tiles % sms != 0). forced > 1 (RA_CUDA_TAIL_SPLIT=N, measurement builds): N parts (fewer
 * where a part would be empty) wherever there is a tail, no cost test. */
constexpr int kTailMaxSplits = 64;
constexpr int kTailMinGainPerMille = 5;

struct TailPlan {
  int64_t tail; /* the last tiles, split; 0: no tail split */
  int splits;   /* parts per tail tile, none empty */
  int blocks;   /* key blocks per part; the last part may have fewer */
};

inline TailPlan tail_split_plan(int64_t tiles, int nb, int sms, int forced = 0) {
  const TailPlan none{0, 0, 0};
  if (sms <= 0 || nb < 2 || tiles <= sms || tiles % sms == 0) return none;
  const int64_t tail = tiles % sms;
  auto parts_of = [&](int s, int& sb) {
    sb = (nb + s - 1) / s;
    return (nb + sb - 1) / sb; /* s parts of sb blocks may leave the last empty: fewer parts */
  };
  if (forced > 1) {
    int sb = 0;
    const int s = parts_of(forced < nb ? forced : nb, sb);
    return s > 1 ? TailPlan{tail, s, sb} : none;
  }
  const int64_t unsplit = nb + 1;
  int64_t best = unsplit;
  TailPlan plan = none;
  const int top = nb < kTailMaxSplits ? nb : kTailMaxSplits;
  for (int s = 2; s <= top; ++s) {
    int sb = 0;
    if (parts_of(s, sb) != s) continue; /* the same parts as a smaller s */
    const int64_t cost = (tail * s + sms - 1) / sms * (sb + 1) + (s + 1) / 2;
    if (cost < best) best = cost, plan = TailPlan{tail, s, sb};
  }
  const int64_t launch = (tiles / sms + 1) * unsplit;
  return 1000 * (unsplit - best) >= kTailMinGainPerMille * launch ? plan : none;
}

/* ---- the short- and long-key kernels' conditions on seqlen_k ----
 * Long (RA_CUDA_LONG_BLOCK_N = N, 160 by default; 0 builds none): seqlen_k >= RA_CUDA_LONG_MIN_KEYS
 * and, under RA_CUDA_LONG_RULE=1 (the default), only where key blocks of N pad the keys less than
 * blocks of 128 (ceil(Sk / N) N < ceil(Sk / 128) 128; a tie stays at 128), since that is where it
 * was measured ahead (calls 33-34, benchmarks/campaigns/h200-issue26.tar.xz:call14/ and -call15, default / 160
 * time: 1.020-1.041 at 4097 keys, 1.039-1.057 at 2049) while at multiples of 128 it was 0.982-1.030
 * (1.007-1.069 at (1,32,16384,16384) in call 34 alone) and the tail split, which plans 128-key
 * blocks, gains more there; RA_CUDA_LONG_RULE=0: every launch of >= RA_CUDA_LONG_MIN_KEYS keys.
 * Short (RA_CUDA_SHORT_BLOCK_N = N, 80 by default; 0 builds none): keys that fit one block of N (a
 * block of 128 would be mostly padding). */
inline bool long_keys_pay(int64_t seqlen_k) {
  const int64_t n = RA_CUDA_LONG_BLOCK_N > 0 ? RA_CUDA_LONG_BLOCK_N : 128; /* < 0: the rule never holds */
  return RA_CUDA_LONG_BLOCK_N != 0 && seqlen_k >= RA_CUDA_LONG_MIN_KEYS &&
         (RA_CUDA_LONG_RULE == 0 || (seqlen_k + n - 1) / n * n < (seqlen_k + 127) / 128 * 128);
}
inline bool short_keys_pay(int64_t seqlen_k) { return RA_CUDA_SHORT_BLOCK_N != 0 && seqlen_k <= RA_CUDA_SHORT_BLOCK_N; }
static_assert(RA_CUDA_LONG_BLOCK_N == 0 || RA_CUDA_LONG_MIN_KEYS > RA_CUDA_NEXT_QK_MAX_KEYS,
              "the long kernel has no next-Q-K^T overlap");

/* What the planner is told: the launch's sizes, whether TMA can express its tensors, the device's
 * SMs and the most workspace it may take (0: none). */
struct PlanInput {
  int batch, heads, seqlen_q, seqlen_k;
  bool tma;
  int sms;
  size_t max_workspace;
  /* ABI v2 (0 / false: a dense call; seqlen_q/k are then the packed totals of a varlen call) */
  int heads_kv = 0;
  int mask = 0;
  bool varlen = false;
  int max_seqlen_q = 0, max_seqlen_k = 0;
  bool lse = false;
  bool v2() const { return (heads_kv != 0 && heads_kv != heads) || mask != 0 || varlen || lse; }
};

/* A launch: the kernel, its FwdParams fields (num_* ... tail_blocks), its grid, and the workspace:
 * partial_floats fp32 partials (part_o at 0, part_ml at ml_offset floats) then `counters` ints. */
struct LaunchPlan {
  Kind kind;
  bool next_qk;
  int block_m, block_n; /* the kernel's tile: query rows, keys per key block */
  int num_m_blocks, num_n_blocks;
  int64_t tiles; /* (batch, head, query block) tiles of the unsplit launch */
  int num_tiles; /* work items of the launch (tiles x splits, or whole tiles + the tail's parts) */
  int num_splits, split_blocks;
  bool merge_in_kernel;
  bool merge_launch; /* attn_merge_splits after the kernel */
  bool dynamic;      /* two tile counters */
  int tail_first, tail_splits, tail_blocks;
  int64_t tail_tiles;
  int threads;
  int64_t grid[3];
  int launches; /* kernel launches of the forward kernel (the fallback: one per batch_per_launch) */
  int batch_per_launch;
  int64_t merge_grid; /* attn_merge_splits' blocks of 32 * kMergeRowsPerBlock threads */
  size_t shared_bytes;
  size_t partial_floats, ml_offset, counters;
  /* ABI v2 (plan_v2): the FwdParams fields of the v2 kernels; a varlen plan's workspace is its tile
   * list as `partial_floats` (its length in the first 16 bytes, then var_entries VarTiles of 8 ints:
   * not among the counters, which other launches on the stream expect at 0), then the dynamic
   * scheduler's 2 counters */
  int pack_log2_rows, head_groups, v2_m_blocks, l2_section;
  int64_t var_entries;
  bool prepare; /* attn_varlen_tiles before the kernel */
  size_t workspace_bytes() const { return partial_floats * sizeof(float) + counters * sizeof(int); }
};

/* The schedule's choice (rule 2). */
inline bool next_qk_of(int64_t seqlen_k) {
  return RA_CUDA_NEXT_QK == 1 || (RA_CUDA_NEXT_QK == -1 && seqlen_k <= RA_CUDA_NEXT_QK_MAX_KEYS);
}

/* The fallback's plan; false where its grid cannot hold the heads. */
inline bool plan_mma_sync(const PlanInput& in, LaunchPlan& lp) {
  lp = LaunchPlan{};
  lp.kind = Kind::kMmaSync;
  lp.block_m = sm80::kBlockM;
  lp.block_n = sm80::kBlockN;
  lp.num_m_blocks = (in.seqlen_q + sm80::kBlockM - 1) / sm80::kBlockM;
  lp.num_n_blocks = (in.seqlen_k + sm80::kBlockN - 1) / sm80::kBlockN;
  lp.tiles = (int64_t)lp.num_m_blocks * in.batch * in.heads;
  lp.num_splits = 1;
  lp.split_blocks = lp.num_n_blocks;
  lp.threads = sm80::kThreads;
  lp.shared_bytes = sm80::kSmemBytes;
  if (in.heads > kMaxGridY) return false;
  lp.batch_per_launch = kMaxGridY / in.heads < in.batch ? kMaxGridY / in.heads : in.batch;
  lp.launches = (in.batch + lp.batch_per_launch - 1) / lp.batch_per_launch;
  lp.num_tiles = lp.num_m_blocks * lp.batch_per_launch * in.heads; /* of one launch */
  lp.grid[0] = lp.num_m_blocks;
  lp.grid[1] = (int64_t)lp.batch_per_launch * in.heads;
  lp.grid[2] = 1;
  return true;
}

/* The sm_90a plan (rules 2-7); `in.tma` is true. */
inline LaunchPlan plan_sm90(const PlanInput& in) {
  LaunchPlan lp{};
  const bool nqk = next_qk_of(in.seqlen_k);
  const int sms = in.sms;
  lp.next_qk = nqk;
  lp.block_m = sm90::kBlockM;
  lp.block_n = sm90::kBlockN;
  lp.threads = sm90::kThreads;
  lp.launches = 1;
  lp.batch_per_launch = in.batch;
  lp.num_m_blocks = (in.seqlen_q + sm90::kBlockM - 1) / sm90::kBlockM;
  lp.num_n_blocks = (in.seqlen_k + sm90::kBlockN - 1) / sm90::kBlockN;
  const int64_t tiles = (int64_t)lp.num_m_blocks * in.batch * in.heads;
  lp.tiles = tiles;
  lp.num_splits = 1;
  lp.split_blocks = lp.num_n_blocks;
  /* rule 3: decode's splits merge in the kernel; not next_qk launches, which have no kMerge kernel */
  const int want = split_rule(tiles, lp.num_n_blocks, sms);
  const bool mik = !RA_CUDA_MERGE_KERNEL && !nqk && in.seqlen_q <= kMergeInKernelMaxRows;
  if (want > 1) {
    const int sb = (lp.num_n_blocks + want - 1) / want;
    const int s = (lp.num_n_blocks + sb - 1) / sb;
    const size_t rows = (size_t)in.batch * in.heads * in.seqlen_q;
    const size_t floats = (size_t)s * rows * (RA_HEAD_DIM + 2);
    const size_t counters = mik ? (size_t)tiles * 2 : 0; /* merge_if_last's */
    if (floats * sizeof(float) + counters * sizeof(int) <= in.max_workspace) {
      lp.num_splits = s;
      lp.split_blocks = sb;
      lp.partial_floats = floats;
      lp.ml_offset = (size_t)s * rows * RA_HEAD_DIM;
      lp.counters = counters;
    }
  }
  lp.merge_in_kernel = mik && lp.num_splits > 1;
  lp.merge_launch = lp.num_splits > 1 && !lp.merge_in_kernel;
  if (lp.merge_launch) {
    const int64_t rows = (int64_t)in.batch * in.heads * in.seqlen_q;
    lp.merge_grid = (rows + kMergeRowsPerBlock - 1) / kMergeRowsPerBlock;
  }
  /* rule 4: the dynamic scheduler's two counters (tile_scheduler.cuh) */
  if (RA_CUDA_DYN_SCHED && nqk && lp.num_splits == 1 && lp.num_n_blocks <= RA_CUDA_DYN_MAX_BLOCKS &&
      lp.num_m_blocks <= RA_CUDA_DYN_MAX_M_BLOCKS && 2 * sizeof(int) <= in.max_workspace) {
    lp.dynamic = true;
    lp.counters = 2;
  }
  /* rule 5: the grid */
  lp.num_tiles = (int)(tiles * lp.num_splits);
  int grid = lp.num_tiles < sms ? lp.num_tiles : sms;
  if (RA_CUDA_GRID_BALANCE && !lp.dynamic) {
    const int waves = (lp.num_tiles + sms - 1) / sms;
    grid = (lp.num_tiles + waves - 1) / waves;
  }
  /* rule 6: the tail split; its partials are the tail's rows only, its counters merge_if_last's */
  if (RA_CUDA_TAIL_SPLIT != 0 && !nqk && lp.num_splits == 1 && in.seqlen_q > kDecodeMaxRows &&
      !long_keys_pay(in.seqlen_k)) {
    const TailPlan tp =
        tail_split_plan(tiles, lp.num_n_blocks, sms, RA_CUDA_TAIL_SPLIT > 1 ? RA_CUDA_TAIL_SPLIT : 0);
    if (tp.splits > 1) {
      const size_t rows = (size_t)tp.tail * tp.splits * sm90::kBlockM;
      const size_t floats = rows * (RA_HEAD_DIM + 2);
      const size_t counters = (size_t)tp.tail * 2;
      if ((floats + counters) * sizeof(float) <= in.max_workspace) {
        lp.tail_first = (int)(tiles - tp.tail);
        lp.tail_splits = tp.splits;
        lp.tail_blocks = tp.blocks;
        lp.tail_tiles = tp.tail;
        lp.partial_floats = floats;
        lp.ml_offset = rows * RA_HEAD_DIM;
        lp.counters = counters;
        lp.num_tiles = lp.tail_first + (int)(tp.tail * tp.splits);
        grid = sms; /* tail_first is a multiple of it: the whole tiles fill whole rounds */
      }
    }
  }
  lp.grid[0] = grid;
  lp.grid[1] = lp.grid[2] = 1;
  /* rule 7: the kernel */
  auto over_blocks_of = [&](int n) {
    lp.block_n = n;
    lp.num_n_blocks = (in.seqlen_k + n - 1) / n;
    lp.split_blocks = lp.num_n_blocks;
  };
  if (!RA_CUDA_MERGE_KERNEL && !nqk && lp.merge_in_kernel) {
    lp.kind = Kind::kMergeInKernel;
    lp.shared_bytes = sm90::kSmemBytes<sm90::MainPlan>;
  } else if (RA_CUDA_DYN_SCHED != 0 && nqk && lp.dynamic) {
    lp.kind = Kind::kDynamic;
    lp.shared_bytes = sm90::kSmemBytes<sm90::MainPlan>;
  } else if (RA_CUDA_SHORT_BLOCK_N != 0 && nqk && lp.num_splits == 1 && short_keys_pay(in.seqlen_k)) {
    lp.kind = Kind::kShort;
    over_blocks_of(sm90::ShortPlan::kBlockN);
    lp.shared_bytes = sm90::kSmemBytes<sm90::ShortPlan>;
  } else if (RA_CUDA_TAIL_SPLIT != 0 && !nqk && lp.tail_splits > 1) {
    lp.kind = Kind::kTailSplit;
    lp.shared_bytes = sm90::kSmemBytes<sm90::MainPlan>;
  } else if (RA_CUDA_LONG_BLOCK_N != 0 && !nqk && lp.num_splits == 1 && long_keys_pay(in.seqlen_k) &&
             in.seqlen_q > kDecodeMaxRows) {
    lp.kind = Kind::kLong;
    over_blocks_of(sm90::LongPlan::kBlockN);
    lp.shared_bytes = sm90::kSmemBytes<sm90::LongPlan>;
  } else {
    lp.kind = nqk ? Kind::kMainNextQK : Kind::kMain;
    lp.shared_bytes = sm90::kSmemBytes<sm90::MainPlan>;
  }
  return lp;
}

/* ---- ABI v2: the v2 kernels' plan (rule 0) ----
 * Grouped-query packing (FlashAttention-3's should_pack_gqa): a tile of one query head computes
 * 128 rows (64 where its second warpgroup has none), however few of them lie below seqlen_q; a packed
 * tile holds the `group` query heads of one K/V head, R rows each (R = 128 / group, or the smallest
 * power of two >= Sq where that is fewer), so decode's one row per head becomes `group` rows of one
 * tile that reads the K/V head once. The rows each computes (in 64-row warpgroups), per K/V head:
 *   unpacked: group x ceil64(Sq);  packed: ceil(Sq / R) x ceil64(group x R),
 * and, as FlashAttention-3 asks of its tile efficiencies, a fixed-length call packs only where that
 * computes at most kPackGqaRatio of the unpacked rows. A varlen call always packs, as FlashAttention-3
 * does (its lengths are in device memory: max_seqlen_q sizes R, but a mix of many short sequences
 * wastes a partial 128-row tile per sequence and head, which packed tiles of R rows mostly do not).
 * Measured on the H200 (docs/perf-notes.md v18, call 3's A/B against RA_CUDA_PACK_GQA=2): packing
 * every GQA call was 4-15 % slower on causal GQA prefill at 2k-16k, 6 % on non-causal GQA at 4k and
 * 7 % on a chunked prefill (kept unpacked by the ratio), equal on a causal varlen prefill mix and
 * 9 % and 7 % faster on the non-causal varlen prefill and chunked-prefill varlen mixes (the varlen
 * rule). RA_CUDA_PACK_GQA=0: never; 2: every call (FlashAttention-3's newer heuristic packs every
 * causal call too; the first measurement above is why this one does not). Returns log2 R, or -1. */
constexpr int kPackGqaRatioPercent = 90; /* FlashAttention-3's 0.9 (hopper/heuristics.h) */
inline int pack_gqa_log2_rows(int group, int64_t sq, bool varlen = false) {
  if (!RA_CUDA_PACK_GQA || group < 2 || group > sm90::kBlockM || (group & (group - 1)) != 0 || sq < 1) return -1;
  int lr = 0;
  while ((group << (lr + 1)) <= sm90::kBlockM && (int64_t{1} << lr) < sq) ++lr;
  const int64_t r = int64_t{1} << lr;
  auto ceil64 = [](int64_t x) { return (x + 63) / 64 * 64; };
  const int64_t packed = (sq + r - 1) / r * ceil64(group * r);
  const int64_t unpacked = group * ceil64(sq);
  return RA_CUDA_PACK_GQA == 2 || varlen || 100 * packed <= kPackGqaRatioPercent * unpacked ? lr : -1;
}

/* FlashAttention-3's L2 swizzle (tile_scheduler.hpp): a causal launch's tiles are cut into sections
 * of as many K/V heads as fit kL2SectionBytes (their K and V over seqlen_k keys), each K/V head's
 * query heads with it where unpacked, so that the CTAs running at one time, spread over a section's
 * query blocks, read K/V blocks their neighbours have brought into L2 (tile_scheduler.cuh's
 * v2_tile_order). FlashAttention-3's 32 MB of the H100's 50 MB; the H200 has 60 MB. */
constexpr int64_t kL2SectionBytes = int64_t{32} << 20;
inline int l2_section_pairs(int64_t seqlen_k, int group_per_pair, int64_t pairs) {
  const int64_t kv_head_bytes = seqlen_k * RA_HEAD_DIM * 2 /* bf16 */ * 2 /* K and V */;
  int64_t heads = kL2SectionBytes / (kv_head_bytes > 0 ? kv_head_bytes : 1);
  heads = (heads < 1 ? 1 : heads) * group_per_pair;
  return (int)(heads < pairs ? heads : pairs);
}

/* Rule 0: a call with any ABI v2 feature (grouped-query heads, a causal mask, varlen, the LSE) runs a
 * v2 kernel (mainloop_v2.cuh), the dense ones never: one kernel over (batch, head index, query
 * block) tiles taken longest first from the dynamic counter (causal: tile_scheduler.cuh's
 * v2_tile_order; varlen: seqlen.cuh's pre-pass lists them heaviest first), no split over keys, 128 x
 * 128 tiles (the causal diagonal is then one block of each tile), one CTA per SM at most. A varlen
 * plan's tiles are an upper bound (the lengths are in device memory): entries <= ceil(total_q / R) +
 * batch, head_groups tiles each. */
inline LaunchPlan plan_v2(const PlanInput& in) {
  LaunchPlan lp{};
  const int group = in.heads / (in.heads_kv > 0 ? in.heads_kv : in.heads);
  const int64_t sq = in.varlen ? in.max_seqlen_q : in.seqlen_q;
  const int64_t sk = in.varlen ? in.max_seqlen_k : in.seqlen_k;
  const int lr = pack_gqa_log2_rows(group, sq, in.varlen);
  const bool pack = lr >= 0;
  const bool causal = in.mask != RA_MASK_NONE;
  lp.kind = v2_kind(causal, in.varlen, pack);
  lp.pack_log2_rows = pack ? lr : 7;
  lp.head_groups = pack ? in.heads / group : in.heads;
  const int rows = 1 << lp.pack_log2_rows;
  lp.block_m = pack ? group * rows : sm90::kBlockM;
  lp.block_n = sm90::kBlockN;
  lp.threads = sm90::kThreads;
  lp.launches = 1;
  lp.batch_per_launch = in.batch;
  lp.num_m_blocks = (int)((sq + rows - 1) / rows);
  lp.num_n_blocks = (int)(sk > 0 ? (sk + sm90::kBlockN - 1) / sm90::kBlockN : 1);
  lp.num_splits = 1;
  lp.split_blocks = lp.num_n_blocks;
  size_t floats = 0, counters = 2; /* the dynamic counter's two */
  if (in.varlen) {
    lp.var_entries = (in.seqlen_q + rows - 1) / rows + in.batch;
    lp.tiles = lp.var_entries * lp.head_groups;
    lp.prepare = true;
    floats = 4 + (size_t)lp.var_entries * 8; /* the list's length (16 bytes), then 8 ints per VarTile */
  } else {
    lp.v2_m_blocks = lp.num_m_blocks;
    lp.tiles = (int64_t)in.batch * lp.head_groups * lp.v2_m_blocks;
    const int64_t pairs = (int64_t)in.batch * lp.head_groups;
    lp.l2_section = causal ? l2_section_pairs(in.seqlen_k, pack ? 1 : group, pairs) : 1;
  }
  if (floats * sizeof(float) + counters * sizeof(int) <= in.max_workspace) {
    lp.partial_floats = floats;
    lp.counters = counters;
    lp.dynamic = true;
  } /* else a fixed-length launch takes the static order; a varlen one cannot run (launch refuses) */
  lp.num_tiles = (int)(lp.tiles < INT32_MAX ? lp.tiles : INT32_MAX);
  lp.grid[0] = lp.tiles < in.sms ? lp.tiles : in.sms;
  lp.grid[1] = lp.grid[2] = 1;
  lp.shared_bytes = sm90::kSmemBytesV2<sm90::MainPlan>;
  return lp;
}

/* The plan (rule 1 and the rest); false only where the fallback cannot hold the heads. A v2 call
 * needs the TMA path (the fallback has no v2 feature): the callers refuse it first (refuse_v2). */
inline bool plan(const PlanInput& in, LaunchPlan& lp) {
  if (in.v2() && in.tma && !RA_CUDA_FORCE_MMA_SYNC) {
    lp = plan_v2(in);
    return true;
  }
  if (RA_CUDA_FORCE_MMA_SYNC || !in.tma) return plan_mma_sync(in, lp);
  lp = plan_sm90(in);
  return true;
}

/* Whether cuTensorMapEncodeTiled can describe a tensor of (seq, head, batch) sizes and element
 * strides, by its documented requirements on top of what ra_validate_params checks (16-byte rows
 * and base): every stride a size > 1 uses is non-zero (the fallback's zero batch stride) and under
 * 2^40 bytes. launch() asks the driver itself; ra_plan_launch, which has none, asks this. */
inline bool tma_expressible_tensor(const int64_t stride[4], int64_t seqlen, int64_t heads, int64_t batch) {
  const int64_t sizes[3] = {batch, heads, seqlen};
  for (int i = 0; i < 3; ++i)
    if (sizes[i] > 1 && (stride[i] <= 0 || stride[i] * 2 >= (int64_t{1} << 40))) return false;
  return true;
}
inline bool tma_expressible(const ra_attention_params* P) {
  const int64_t batch = P->cu_seqlens_q ? 1 : P->batch; /* varlen: one packed batch entry */
  return tma_expressible_tensor(P->q_stride, P->seqlen_q, P->heads, batch) &&
         tma_expressible_tensor(P->k_stride, P->seqlen_k, P->heads_kv, batch) &&
         tma_expressible_tensor(P->v_stride, P->seqlen_k, P->heads_kv, batch) &&
         tma_expressible_tensor(P->o_stride, P->seqlen_q, P->heads, batch);
}

/* The message of a plan_mma_sync refusal (launch() and ra_plan_launch say the same). */
inline ra_status refuse_heads(int64_t heads, char* err, size_t err_len) {
  return ra_fail(err, err_len, RA_ERR_SHAPE,
                 "H=%lld heads: the mma.sync path (taken where TMA refuses the strides) launches at most %d "
                 "heads at a time",
                 (long long)heads, kMaxGridY);
}

/* Whether the call uses an ABI v2 feature (a v2 kernel runs it). */
inline bool is_v2_call(const ra_attention_params* P) {
  return P->heads_kv != P->heads || P->mask != RA_MASK_NONE || P->cu_seqlens_q != nullptr || P->lse != nullptr;
}

/* A v2 call whose tensors only the mma.sync fallback can address (or a FORCE_MMA_SYNC build): the
 * fallback has none of v2's features (launch() and ra_plan_launch say the same). */
inline ra_status refuse_v2_fallback(char* err, size_t err_len) {
  return ra_fail(err, err_len, RA_ERR_UNSUPPORTED,
                 "GQA, masks, varlen and the LSE run on the sm_90a TMA path only; these strides need the mma.sync "
                 "fallback (a zero or >= 2^40-byte stride), which has none of them");
}

/* The plan input of a call: its sizes and v2 fields. */
inline PlanInput plan_input(const ra_attention_params* P, bool tma, int sms, size_t max_workspace) {
  PlanInput in{(int)P->batch, (int)P->heads, (int)P->seqlen_q, (int)P->seqlen_k, tma, sms, max_workspace};
  in.heads_kv = (int)P->heads_kv;
  in.mask = P->mask;
  in.varlen = P->cu_seqlens_q != nullptr;
  in.max_seqlen_q = (int)P->max_seqlen_q;
  in.max_seqlen_k = (int)P->max_seqlen_k;
  in.lse = P->lse != nullptr;
  return in;
}

/* The call the library runs for a valid call `p`: under RA_CUDA_GQA_ROWS=1 (the default), a GQA call whose query
 * heads are rows of one dense head (kernel/common/gqa_rows.h) as that dense call, written into
 * `storage`; else `p` itself. ra_attention_fwd and plan_launch_abi take it once, right after
 * validation, so the plan, tensor maps, grid, workspace and merge all see the same call. */
inline const ra_attention_params* call_view(const ra_attention_params* p, ra_attention_params& storage) {
  if (!RA_CUDA_GQA_ROWS) return p;
  return ra_gqa_rows_view(p, &storage) ? &storage : p;
}

/* ra_plan_launch's body (attention_sm90.cu and plan_host.cpp export it): validate exactly as
 * ra_attention_fwd does, take the same call_view, plan, and copy the plan into the ABI's struct. */
inline ra_status plan_launch_abi(const ra_attention_params* caller, const ra_device_facts* dev, ra_launch_plan* out,
                                 char* err, size_t err_len) {
  ra_status st = ra_validate_params(caller, err, err_len);
  if (st != RA_OK) return st;
  ra_attention_params viewed;
  const ra_attention_params* P = call_view(caller, viewed);
  if (!dev) return ra_fail(err, err_len, RA_ERR_NULL_POINTER, "device facts is a null pointer");
  if (!out) return ra_fail(err, err_len, RA_ERR_NULL_POINTER, "plan is a null pointer");
  if (dev->compute_units < 1)
    return ra_fail(err, err_len, RA_ERR_DEVICE, "device facts: %d SMs, must be >= 1", (int)dev->compute_units);
  const bool tma = tma_expressible(P) && !RA_CUDA_FORCE_MMA_SYNC;
  if (is_v2_call(P) && !tma) return refuse_v2_fallback(err, err_len);
  if (err && err_len) err[0] = '\0';
  const PlanInput in = plan_input(P, tma_expressible(P), (int)dev->compute_units,
                                  dev->max_workspace_bytes > 0 ? (size_t)dev->max_workspace_bytes : kMaxWorkspaceBytes);
  LaunchPlan lp;
  if (!plan(in, lp)) return refuse_heads(P->heads, err, err_len);
  ra_launch_plan r{};
  const char* name = kind_name(lp.kind);
  for (int i = 0; i < RA_PLAN_KIND_LEN - 1 && name[i]; ++i) r.kind[i] = name[i];
  r.kind_id = (int32_t)lp.kind;
  r.threads = lp.threads;
  for (int i = 0; i < 3; ++i) r.grid[i] = lp.grid[i];
  r.tiles = lp.tiles;
  r.block_q = lp.block_m;
  r.block_k = lp.block_n;
  r.key_blocks = lp.num_n_blocks;
  r.splits = lp.num_splits;
  r.split_tiles = lp.tail_tiles;
  r.tail_splits = lp.tail_splits;
  r.blocks_per_split = lp.tail_splits > 1 ? lp.tail_blocks : lp.split_blocks;
  r.merge = lp.merge_in_kernel || lp.tail_splits > 1 ? RA_MERGE_KERNEL : lp.merge_launch ? RA_MERGE_LAUNCH : RA_MERGE_NONE;
  r.dynamic_scheduler = lp.dynamic ? 1 : 0;
  r.shared_bytes = (int64_t)lp.shared_bytes;
  r.workspace_bytes = (int64_t)lp.workspace_bytes();
  *out = r;
  return RA_OK;
}

}  // namespace ra_cuda
