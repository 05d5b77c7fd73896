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

}  // namespace ra_cuda
