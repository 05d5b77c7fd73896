/*
 * plan.h — the one launch planner of the gfx942 backend (issue 37): which kernels run for a call,
 * on which grids, with how much LDS and workspace. Pure host C++17: no HIP header, no device call,
 * nothing read behind the params' pointers, device facts passed in. Two callers build it:
 * ra_attention_fwd (../attention_gfx942.hip), which launches what it says, and ../plan_host.cpp, the
 * host-only library (system C++ compiler) through which the emulator, the benchmarks, the tests and
 * `regress plan` ask the very same code.
 *
 * A call of B x H heads, Sq queries, Sk keys is T = ceil(Sq / 256) * B * H q-blocks (tiles) of
 * n = ceil(Sk / 64) key tiles. One workgroup resides per CU (64 KiB of LDS), so T tiles take
 * ceil(T / CUs) rounds. Two plans:
 *   gfx942_dense       one launch, grid (ceil(Sq/256), B*H): every tile over every key, rounded in
 *                      its epilogue (issued in chunks of 65535 rows of grid y, all on one stream).
 *   gfx942_tail_split  (step 10) the last partial round's `tail` tiles split by key range: the dense
 *                      launch stops before them, the split launch (parts x tail workgroups) writes
 *                      fp32 partials to the workspace, the merge launch (16 x tail, 512 threads)
 *                      combines each tile's parts in index order and rounds once.
 *   gfx942_v2          (issue 40) a call with GQA, a causal mask, varlen or an LSE: one launch of the
 *                      v2 kernels, grid (ceil(Sq / 256), B*H), Sq the longest sequence's in varlen
 *                      (a sequence's q-blocks past its own length return at once); a causal q-block
 *                      runs only the key tiles below its last row's limit.
 *   gfx942_v2_split    (issue 40) an unmasked fixed-length v2 call (GQA prefill, an LSE) whose last
 *                      round is partial: step 10 on the v2 kernels (v2_splits). The v2 launch runs
 *                      the grid's first T - tail workgroups as one row (grid (T - tail, 1): its
 *                      numbering is the grid's linear id), the v2 split and merge launches the rest,
 *                      the merge writing the LSE from the merged offset and sum.
 *   gfx942_gqa_rows /  a GQA call whose query heads of one K/V head are rows of one dense head
 *   gfx942_gqa_rows_split  (../../common/gqa_rows.h: decode, BSHD MQA) runs as that dense call, the
 *                      first two plans' launches over call_view's params: one q-block holds the group's
 *                      rows, each key tile is read once for the group, and a decode gets the dense tail
 *                      split (the v2 split below takes unmasked calls only).
 *   gfx942_waves /     (issue 40) a dense call (a GQA view's too) whose q-block's rows fit one wave,
 *   gfx942_waves_split seqlen_q <= kRowsPerWave (a decode): the first two plans' launches on the
 *   (gfx942_gqa_rows_waves[_split] for a view) decode kernels, parts/waves.h: the block's keys spread
 *                      over its eight waves, their partials merged in LDS in wave order; the split
 *                      parts write step 10's records and the same merge launch combines them.
 * launch_at(i) lists the launches of a plan in issue order; the host part launches exactly them and
 * the emulator (regress/emu/library.py) runs exactly them.
 */
#ifndef RA_HIP_PLAN_H
#define RA_HIP_PLAN_H

#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "../../common/gqa_rows.h"
#include "../../common/validate.h"
#include "../../include/regress_attn.h"
#include "layout.h"

/* One launch of a plan, in the terms of the kernel's argument block (dispatch.h, KernelArgs): the
 * host copies these fields into KernelArgs; everything else in it comes from the params. */
#define RA_GFX942_KERNEL_NAME_LEN 48
typedef enum { RA_GFX942_DENSE = 0, RA_GFX942_SPLIT = 1, RA_GFX942_MERGE = 2 } ra_gfx942_role;
typedef struct {
  int32_t role;                            /* ra_gfx942_role */
  char kernel[RA_GFX942_KERNEL_NAME_LEN];  /* the extern "C" kernel it launches */
  uint32_t grid[3];                        /* workgroups x y z (512 threads each) */
  uint32_t bh_offset;                      /* first (batch*heads + head) row of grid y */
  uint32_t wg_end;                         /* dense: q-blocks at or past it return (UINT32_MAX: none) */
  uint32_t qblocks;                        /* ceil(Sq / 256) */
  uint32_t split_parts;                    /* key parts per tail q-block (0: no split) */
  uint32_t split_tiles;                    /* key tiles per part */
} ra_gfx942_launch;

namespace ra_gfx942 {

enum PlanKind : int32_t {
  kPlanDense = 0,
  kPlanTailSplit = 1,
  kPlanV2 = 2,
  kPlanGqaRows = 3,
  kPlanGqaRowsSplit = 4,
  kPlanV2Split = 5,
  kPlanWaves = 6,
  kPlanWavesSplit = 7,
  kPlanGqaRowsWaves = 8,
  kPlanGqaRowsWavesSplit = 9
};
constexpr const char* kPlanNames[] = {"gfx942_dense",          "gfx942_tail_split",     "gfx942_v2",
                                      "gfx942_gqa_rows",       "gfx942_gqa_rows_split", "gfx942_v2_split",
                                      "gfx942_waves",          "gfx942_waves_split",    "gfx942_gqa_rows_waves",
                                      "gfx942_gqa_rows_waves_split"};
/* the plans whose launches are the v2 kernels (KernelArgsV2) */
inline bool runs_v2(int32_t kind) { return kind == kPlanV2 || kind == kPlanV2Split; }
/* Plans whose kernels are the decode kernels (parts/waves.h) */
constexpr bool waves_plan(int32_t kind) { return kind >= kPlanWaves; }

constexpr uint64_t kGridYMax = 65535;     /* grid.y limit of a dispatch */
constexpr uint64_t kMergeRowsPerWg = 16;  /* merge: 512 threads, 32 per row (4 dims each) */
constexpr uint64_t kRecordBytes = (uint64_t)kBlockQ * kSplitRecord * sizeof(float); /* one part's rows */

/* Step 10's rule: a grid of `wgs` q-blocks leaves cus - wgs % cus CUs idle in its last round. Those
 * `tail` q-blocks are split by key range into `parts` parts of `tiles` key tiles (tail * parts
 * workgroups, their own rounds). The cost of p parts in key-tile times: ceil(tail p / cus) rounds of
 * (ceil(n / p) + 1) tiles (one for a round's fixed work), plus the merge, about one tile time per 256
 * partial rows' records read (a 64-key tile is ~5600 clocks; 256 records are 135 KB of HBM). The
 * cheapest p (the smallest on a tie) wins if it costs less than the n tiles of the unsplit round;
 * calls of fewer than kSplitMinTiles key tiles are never split, and at most kSplitMaxParts partials
 * are made (135 KB each, 277 MB at most) or fewer where the caller caps the workspace. */
constexpr uint64_t kSplitMinTiles = 8;
constexpr uint64_t kSplitMaxParts = 2048;
struct SplitPlan {
  uint64_t tail;  /* q-blocks split (the last ones); 0: no split */
  uint64_t parts; /* key parts per tail q-block, none empty */
  uint64_t tiles; /* key tiles per part, the last part may have fewer */
};
inline SplitPlan tail_split_plan(uint64_t wgs, uint64_t n_tiles, uint64_t cus, int64_t max_workspace) {
  SplitPlan plan = {0u, 0u, 0u};
  if (cus == 0u || n_tiles < kSplitMinTiles || wgs == 0u || wgs % cus == 0u) return plan;
  const uint64_t tail = wgs % cus;
  uint64_t max_parts = kSplitMaxParts;
  if (max_workspace > 0 && (uint64_t)max_workspace / kRecordBytes < max_parts)
    max_parts = (uint64_t)max_workspace / kRecordBytes;
  uint64_t best = n_tiles; /* the unsplit tail round */
  const uint64_t top = n_tiles < cus ? n_tiles : cus;
  for (uint64_t p = 2; p <= top && tail * p <= max_parts; ++p) {
    const uint64_t tiles = (n_tiles + p - 1u) / p;
    const uint64_t cost = (tail * p + cus - 1u) / cus * (tiles + 1u) + (tail * p + 255u) / 256u;
    if (cost < best) {
      best = cost;
      plan.tail = tail;
      plan.tiles = tiles;
      plan.parts = (n_tiles + tiles - 1u) / tiles;
    }
  }
  return plan;
}

/* A call that needs the v2 kernels (any ABI v2 feature); the others run the dense kernels, unchanged. */
inline bool uses_v2(const ra_attention_params& p) {
  return p.heads_kv != p.heads || p.mask != RA_MASK_NONE || p.cu_seqlens_q != nullptr || p.lse != nullptr;
}
constexpr int64_t kV2MaxLen = (int64_t)1 << 30;

/* Which v2 calls take step 10's tail split. Its cost rule above sees one key range for every q-block,
 * which is true of an unmasked fixed-length call (GQA prefill, an LSE): every q-block runs all n key
 * tiles. Not so for a causal q-block (its tiles end at its last row's limit: the grid's last round
 * holds the lightest blocks, heaviest first) or a varlen one (its own sequence's lengths, which live
 * in device memory the planner does not read): those keep one v2 launch. The split launch numbers
 * its blocks as the v2 grid's linear id, so the v2 launch before it runs one row of T - tail
 * workgroups: T stays below 2^32 / 512 work-items of grid x. */
constexpr uint64_t kV2SplitMaxWgs = 0xFFFFFFFFull / (uint64_t)kThreads;
inline bool v2_splits(const ra_attention_params& p, uint64_t wgs) {
  return p.mask == RA_MASK_NONE && p.cu_seqlens_q == nullptr && wgs <= kV2SplitMaxWgs;
}

/* The params the kernels run: a GQA call's dense view where gqa_rows.h takes one, else the call's own.
 * Idempotent (a view has heads_kv = heads), so plan_launch, launch_at and the host part may each ask. */
inline ra_attention_params call_view(const ra_attention_params& p) {
  ra_attention_params v;
  return ra_gqa_rows_view(&p, &v) ? v : p;
}

/* kPacked: every tensor's seq stride is head_dim (one head's rows back to back); else kStrided. */
inline bool packed_layout(const ra_attention_params& p) {
  return p.q_stride[2] == kHeadDim && p.k_stride[2] == kHeadDim && p.v_stride[2] == kHeadDim &&
         p.o_stride[2] == kHeadDim;
}

/* The plan of a call (ra_plan_launch's body), made for call_view's params. */
inline ra_status plan_launch(const ra_attention_params* call, const ra_device_facts* dev, ra_launch_plan* out,
                             char* err, size_t err_len) {
  const ra_status st = ra_validate_params(call, err, err_len);
  if (st != RA_OK) return st;
  if (dev == nullptr || out == nullptr)
    return ra_fail(err, err_len, RA_ERR_NULL_POINTER, "%s is a null pointer", dev == nullptr ? "device" : "plan");
  if (dev->compute_units < 1)
    return ra_fail(err, err_len, RA_ERR_DEVICE, "compute_units is %d, must be >= 1", (int)dev->compute_units);
  const ra_attention_params view = call_view(*call);
  const ra_attention_params* p = &view;
  const bool gqa_rows = view.heads != call->heads;
  const bool v2 = uses_v2(*p);
  /* v2 kernels: signed 32-bit row limits (row + 1 + off) with room to spare */
  if (v2 && (p->seqlen_q >= kV2MaxLen || p->seqlen_k >= kV2MaxLen))
    return ra_fail(err, err_len, RA_ERR_SHAPE, "seqlen_q %lld / seqlen_k %lld: the gfx942 v2 kernels take below 2^30",
                   (long long)p->seqlen_q, (long long)p->seqlen_k);
  const int64_t rows_q = v2 && p->cu_seqlens_q ? p->max_seqlen_q : p->seqlen_q;
  const int64_t rows_k = v2 && p->cu_seqlens_q ? p->max_seqlen_k : p->seqlen_k;
  const uint64_t qblocks = ((uint64_t)rows_q + kBlockQ - 1) / kBlockQ;
  /* The dispatch packet counts work-items in 32 bits per grid dimension. */
  if (qblocks * (uint64_t)kThreads > 0xFFFFFFFFull)
    return ra_fail(err, err_len, RA_ERR_SHAPE, "seqlen_q %lld needs more than 2^32 work-items in grid x",
                   (long long)p->seqlen_q);
  const uint64_t bh = (uint64_t)p->batch * (uint64_t)p->heads;
  /* 32-bit q-block numbers on the device (a scalar compare against wg_end). */
  if (qblocks * bh >= 0xFFFFFFFFull)
    return ra_fail(err, err_len, RA_ERR_SHAPE, "batch*heads*ceil(seqlen_q/256) = %llu q-blocks is 2^32 - 1 or more",
                   (unsigned long long)(qblocks * bh));
  const uint64_t n_tiles = ((uint64_t)rows_k + kBlockK - 1) / kBlockK;
  const SplitPlan sp = v2 && !v2_splits(*p, qblocks * bh)
                          ? SplitPlan{0u, 0u, 0u}
                          : tail_split_plan(qblocks * bh, n_tiles, (uint64_t)dev->compute_units, dev->max_workspace_bytes);

  memset(out, 0, sizeof *out);
  /* a q-block's rows fit one wave: the decode kernels spread its keys over the block's waves */
  const bool waves = !v2 && p->seqlen_q <= kRowsPerWave;
  const int32_t base = gqa_rows ? (waves ? kPlanGqaRowsWaves : kPlanGqaRows) : waves ? kPlanWaves : kPlanDense;
  /* each base kind's split twin is the next value */
  out->kind_id = v2 ? (sp.tail ? kPlanV2Split : kPlanV2) : sp.tail ? (base == kPlanDense ? kPlanTailSplit : base + 1) : base;
  snprintf(out->kind, sizeof out->kind, "%s", kPlanNames[out->kind_id]);
  out->threads = kThreads;
  /* The dense launch; with a split tail it stops at the (batch, head) row of q-block T - tail - 1
   * (0 rows: every q-block runs split). */
  out->grid[0] = (int64_t)qblocks;
  out->grid[1] = (int64_t)(sp.tail ? (qblocks * bh - sp.tail + qblocks - 1) / qblocks : bh);
  out->grid[2] = 1;
  out->tiles = (int64_t)(qblocks * bh);
  out->block_q = kBlockQ;
  out->block_k = kBlockK;
  out->key_blocks = (int32_t)n_tiles;
  out->splits = 1;
  out->split_tiles = (int64_t)sp.tail;
  out->tail_splits = (int32_t)sp.parts;
  out->blocks_per_split = (int32_t)sp.tiles;
  out->merge = sp.tail ? RA_MERGE_LAUNCH : RA_MERGE_NONE;
  out->dynamic_scheduler = 0;
  out->shared_bytes = kLdsBytes; /* static LDS: K and V^T tiles, double-buffered */
  out->workspace_bytes = (int64_t)(sp.tail * sp.parts * kRecordBytes);
  return RA_OK;
}

/* Launch `i` of `plan` (issue order) into *out: false past the last. The dense launch's grid-y chunks
 * first, then (tail split) the split parts and the merge, all ordered on the call's stream. The
 * launches run on call_view(call)'s params (the caller fills the argument block from them too). */
inline bool launch_at(const ra_attention_params& call, const ra_launch_plan& plan, int64_t i, ra_gfx942_launch* out) {
  static const char* const kModes[] = {"rtne", "rtna", "rtz"};
  const ra_attention_params p = call_view(call);
  const char* lay = packed_layout(p) ? "packed" : "strided";
  /* a varlen call whose sequences are all empty of queries launches nothing (grid x 0); the v2 split's
   * v2 launch is one row of the T - tail workgroups before the tail (none where every q-block splits) */
  const bool v2_split = plan.kind_id == kPlanV2Split;
  const int64_t chunks = plan.grid[0] == 0 ? 0
                         : v2_split        ? (plan.tiles > plan.split_tiles ? 1 : 0)
                                           : (plan.grid[1] + (int64_t)kGridYMax - 1) / (int64_t)kGridYMax;
  const int64_t total = chunks + (plan.split_tiles ? 2 : 0);
  if (i < 0 || i >= total) return false;
  memset(out, 0, sizeof *out);
  out->qblocks = (uint32_t)plan.grid[0];
  out->wg_end = plan.split_tiles ? (uint32_t)(plan.tiles - plan.split_tiles) : 0xFFFFFFFFu;
  out->split_parts = (uint32_t)plan.tail_splits;
  out->split_tiles = (uint32_t)plan.blocks_per_split;
  out->grid[2] = 1;
  if (i < chunks) {
    const int64_t off = i * (int64_t)kGridYMax;
    out->role = RA_GFX942_DENSE;
    snprintf(out->kernel, sizeof out->kernel, "ra_attn_%s_gfx942_%s_%s",
             runs_v2(plan.kind_id) ? "v2" : waves_plan(plan.kind_id) ? "waves" : "fwd", kModes[p.rounding], lay);
    out->grid[0] = (uint32_t)(v2_split ? plan.tiles - plan.split_tiles : plan.grid[0]);
    out->grid[1] = (uint32_t)(v2_split                                  ? 1
                              : plan.grid[1] - off < (int64_t)kGridYMax ? plan.grid[1] - off
                                                                        : (int64_t)kGridYMax);
    out->bh_offset = (uint32_t)off;
  } else if (i == chunks) {
    out->role = RA_GFX942_SPLIT;
    snprintf(out->kernel, sizeof out->kernel, "ra_attn_%s_gfx942_%s",
             v2_split ? "v2_split" : waves_plan(plan.kind_id) ? "waves_split" : "split",
             lay); /* fp32 out: no mode */
    out->grid[0] = (uint32_t)plan.tail_splits;
    out->grid[1] = (uint32_t)plan.split_tiles;
  } else {
    out->role = RA_GFX942_MERGE;
    snprintf(out->kernel, sizeof out->kernel, "ra_attn_%s_gfx942_%s_%s", v2_split ? "v2_merge" : "merge",
             kModes[p.rounding], lay);
    out->grid[0] = (uint32_t)(kBlockQ / kMergeRowsPerWg);
    out->grid[1] = (uint32_t)plan.split_tiles;
  }
  return true;
}

}  // namespace ra_gfx942

#endif /* RA_HIP_PLAN_H */
