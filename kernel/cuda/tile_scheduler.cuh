/*
 * tile_scheduler.cuh — which (batch, head, query block) a CTA works on.
 *
 * sm_90a path: persistent grid of min(tiles, SMs) CTAs; CTA c takes tiles c, c + grid, c + 2 grid...
 * Tiles are numbered query-block fastest, so the CTAs running at one time share a (batch, head)
 * and read its K and V through L2 rather than HBM. Every tile costs the same (no causal mask), so
 * a static order loses only the last partial wave (2048 tiles on 132 SMs: 97 %). With a split over
 * keys (split.cuh) a tile is one slice of one query block's keys.
 */
#pragma once
#include "params.cuh"

/* RA_CUDA_DYN_SCHED 1 (default): unsplit launches within the two gates (plan.h) hand tiles out by an atomic counter
 * (FlashAttention-3's dynamic persistent scheduler; its own kernel, kDyn): a CTA's producer takes its
 * next tile when it has issued the loads of this one and tells the consumers through shared memory,
 * so CTAs that get less bandwidth take fewer tiles and all finish together (ncu, (256,32,128,128):
 * SMs active 89.6 % of the launch against cuDNN's 98.4 %). 0: the static order above everywhere.
 * Every launch outside the gates runs the static kernels. Tiles are independent: the same bits.
 * 1: the producer takes its next tile after issuing this one's loads; 2: it asks for it before
 * them, so the atomic's round trip overlaps the waits for free stages. RA_CUDA_DYN_MAX_BLOCKS: only
 * launches whose tiles have at most this many key blocks are scheduled dynamically;
 * RA_CUDA_DYN_MAX_M_BLOCKS: at most this many query blocks a (batch, head): the counter won where a head has one
 * (256,32,128,128) and lost 6-14 % with 2, 8 or 32 ((67,5,200,128), (2,40,1024,77), (2,24,4096,77);
 * docs/perf-notes.md v8, call 32). */

namespace ra_cuda {

struct TileCoord {
  int b, h, m;
  int split; /* which slice of the keys (0 when num_splits = 1) */
};

/* Splits are numbered fastest, so the CTAs that share a (batch, head)'s keys run side by side. */
__device__ __forceinline__ TileCoord decode_tile(int tile, int num_m_blocks, int heads, int num_splits) {
  TileCoord t;
  const int bhm = tile / num_splits;
  t.split = tile - bhm * num_splits;
  tile = bhm;
  const int bh = tile / num_m_blocks;
  t.m = tile - bh * num_m_blocks;
  t.b = bh / heads;
  t.h = bh - t.b * heads;
  return t;
}

/* Slot i = blockIdx.x + k * gridDim.x (the loops of mainloop_sm90.cuh) -> its tile's coordinates:
 * the cyclic order (a blocked one and a batch-fastest one measured no better: docs/perf-notes.md,
 * deleted flags). */
__device__ __forceinline__ TileCoord tile_coord(const FwdParams& p, int i) {
  return decode_tile(i, p.num_m_blocks, p.heads, p.num_splits);
}

/* RA_CUDA_TAIL_SPLIT's order (its own kernel, launched on one CTA per SM): items [0, tail_first)
 * are the first tiles, whole, in the order above (tail_first is a multiple of the grid, so they are
 * whole rounds); the last partial round's tiles come after them as tail_splits parts each, parts
 * numbered fastest. part: -1 for a whole tile, else the part; tail_tile: j of tile tail_first + j. */
__device__ __forceinline__ TileCoord tail_coord(const FwdParams& p, int i, int& part, int& tail_tile) {
  part = -1;
  tail_tile = 0;
  if (i >= p.tail_first) {
    const int j = i - p.tail_first;
    tail_tile = j / p.tail_splits;
    part = j - tail_tile * p.tail_splits;
    i = p.tail_first + tail_tile;
  }
  return decode_tile(i, p.num_m_blocks, p.heads, 1);
}

/* The v2 kernels' order over fixed-length tiles (seqlen.cuh's FixedSeq; always taken from the
 * dynamic counter, mainloop_v2.cuh): FlashAttention-3's L2 sections. The (batch, head index) pairs,
 * head fastest (so the query heads of one K/V head are neighbours), are cut into sections of
 * p.l2_section pairs (plan.h: as many K/V heads as fit 32 MB of L2); within a section query blocks
 * are the major order, pairs the minor, so the CTAs running at one time share the section's K/V in
 * L2; causal launches take each section's query blocks longest first (the last block first), so the
 * heavy diagonal tiles start early and the light ones fill the end of the launch. l2_section = 1 is
 * the dense kernels' order (query block fastest). */
__device__ __forceinline__ void v2_tile_order(const FwdParamsV2& p, int tile, bool longest_first, int& bh, int& m) {
  const int pairs = p.batch * p.head_groups;
  const int per_section = p.l2_section * p.v2_m_blocks;
  const int section = tile / per_section;
  const int rem = tile - section * per_section;
  const int first = section * p.l2_section;
  const int size = min(p.l2_section, pairs - first); /* the last section may be smaller */
  const int mi = rem / size;
  bh = first + (rem - mi * size);
  m = longest_first ? p.v2_m_blocks - 1 - mi : mi;
}

}  // namespace ra_cuda
