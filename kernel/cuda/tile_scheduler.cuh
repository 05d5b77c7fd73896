/*
 * tile_scheduler.cuh — which (batch, head, query block) a CTA works on.
 *
 * sm_90a path: persistent grid of min(tiles, SMs) CTAs; CTA c takes tiles c, c + grid, c + 2 grid...
 * Tiles are numbered query-block fastest, so the CTAs running at one time share a (batch, head)
 * and read its K and V through L2 rather than HBM. Every tile costs the same (no causal mask), so
 * a static order loses only the last partial wave (2048 tiles on 132 SMs: 97 %).
 */
#pragma once

namespace ra_cuda {

struct TileCoord {
  int b, h, m;
};

__device__ __forceinline__ TileCoord decode_tile(int tile, int num_m_blocks, int heads) {
  const int bh = tile / num_m_blocks;
  TileCoord t;
  t.m = tile - bh * num_m_blocks;
  t.b = bh / heads;
  t.h = bh - t.b * heads;
  return t;
}

}  // namespace ra_cuda
