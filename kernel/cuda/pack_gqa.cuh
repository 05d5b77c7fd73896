/*
 * pack_gqa.cuh — which query heads and rows a v2 tile holds (FlashAttention-3's pack_gqa.h idea).
 *
 * Grouped-query attention: query head h reads K/V head h / kv_group. Rows<false>: a tile is 128 query
 * rows of one query head (the dense kernels' tile); its producer loads K/V head hg / kv_group.
 * Rows<true> (plan.h's pack_gqa_rows: decode and short queries, where a tile of one head would be
 * mostly rows past seqlen_q): a tile is the kv_group heads of one K/V head, R = 2^pack_log2_rows rows
 * of each, kv_group x R <= 128 rows, so the group's K/V blocks are read once for all its heads. Its Q
 * tensor map's box is (64, R, kv_group, 1): TMA lays the heads' rows one after the other, tile row r
 * = head (r / R), query row m R + r % R. The TMA store's box of 16 rows of one head does not fit
 * R < 16, so packed tiles store O row by row (epilogue.cuh's store_tile_rows).
 */
#pragma once
#include "params.cuh"
#include "smem.h"

namespace ra_cuda {

/* The tile a v2 CTA works on (the producer fills it, seqlen.cuh, and hands it to the consumers in
 * shared memory beside the tile's Q stage). nb = 0: no tile (the CTA is done). */
struct TileInfo {
  int m;  /* query block of the sequence */
  int hg; /* head index: the query head, or (packed) the K/V head */
  int b;  /* batch entry (fixed lengths) or sequence (varlen) */
  int q0; /* packed row of the sequence's first query (varlen; 0 otherwise) */
  int len_q, k0, len_k;
  int nb; /* key blocks to run */
};

template <bool kPack>
struct Rows;

template <>
struct Rows<false> {
  __device__ __forceinline__ static int log2_rows(const FwdParamsV2&) { return 7; } /* 128 = kBlockM */
  __device__ __forceinline__ static int q_head(const FwdParamsV2&, const TileInfo& t) { return t.hg; }
  __device__ __forceinline__ static int kv_head(const FwdParamsV2& p, const TileInfo& t) { return t.hg / p.kv_group; }
  __device__ __forceinline__ static uint32_t q_bytes(const FwdParamsV2&) { return sm90::kTileBytes; }
  /* tile row r: its query head and its row in the sequence; false past the tile's rows */
  __device__ __forceinline__ static bool row(const FwdParamsV2&, const TileInfo& t, int r, int& head, int& i) {
    head = t.hg;
    i = t.m * sm90::kBlockM + r;
    return true;
  }
  /* warpgroup wg's 64 rows all lie past the sequence */
  __device__ __forceinline__ static bool wg_idle(const FwdParamsV2&, const TileInfo& t, int wg) {
    return t.m * sm90::kBlockM + wg * 64 >= t.len_q;
  }
};

template <>
struct Rows<true> {
  __device__ __forceinline__ static int log2_rows(const FwdParamsV2& p) { return p.pack_log2_rows; }
  __device__ __forceinline__ static int q_head(const FwdParamsV2& p, const TileInfo& t) { return t.hg * p.kv_group; }
  __device__ __forceinline__ static int kv_head(const FwdParamsV2&, const TileInfo& t) { return t.hg; }
  __device__ __forceinline__ static uint32_t q_bytes(const FwdParamsV2& p) {
    return (uint32_t)(p.kv_group << p.pack_log2_rows) * 256u; /* rows x 2 d-halves x 128 B */
  }
  __device__ __forceinline__ static bool row(const FwdParamsV2& p, const TileInfo& t, int r, int& head, int& i) {
    const int lr = p.pack_log2_rows;
    head = t.hg * p.kv_group + (r >> lr);
    i = (t.m << lr) + (r & ((1 << lr) - 1));
    return r < (p.kv_group << lr);
  }
  __device__ __forceinline__ static bool wg_idle(const FwdParamsV2& p, const TileInfo& t, int wg) {
    const int lr = p.pack_log2_rows;
    if (wg * 64 >= (p.kv_group << lr)) return true; /* no head's rows reach this warpgroup */
    /* R >= 64: the warpgroup holds rows of one head from (64 wg) % R on; else every row offset */
    return lr >= 6 && (t.m << lr) + ((wg * 64) & ((1 << lr) - 1)) >= t.len_q;
  }
};

}  // namespace ra_cuda
