/*
 * seqlen.cuh — where a v2 tile's sequence lies (FlashAttention-3's seqlen.h idea): the producer asks
 * its Seq part for tile number `tile`'s TileInfo (pack_gqa.cuh) and the TMA coordinates of its rows.
 *
 *   FixedSeq  a dense batch: every sequence seqlen_q x seqlen_k, batch coordinate b; the tile order is
 *             tile_scheduler.cuh's v2_tile_order (L2 sections, causal longest first)
 *   VarSeq    packed sequences (cu_seqlens_q/k on the device): TMA coordinates are packed rows, batch
 *             0; the tiles are the list attn_varlen_tiles wrote before the launch, (sequence, query
 *             block) entries heaviest first (most key blocks), each entry head_groups tiles, head
 *             fastest
 *
 * attn_varlen_tiles: the varlen pre-pass, one CTA on the launch's stream (no host sync: the lengths
 * stay in device memory, so a captured CUDA graph replays it). It checks cu_seqlens as
 * ra_check_seqlens_host does on the CPU (cu[0] = 0, non-decreasing, cu[batch] = the packed total,
 * every length <= its max_seqlen); a list that fails lists no tile, so nothing is read or written
 * out of bounds (the caller's output is left as it was: a GPU backend cannot report it). Then a
 * counting sort by key blocks, descending (ties in any order: tiles are independent, so the order
 * changes no bit). Entries: at most ceil(total_q / R) + batch (plan.h sizes the list by it).
 */
#pragma once
#include "mask.cuh"
#include "pack_gqa.cuh"
#include "params.cuh"
#include "smem.h"
#include "tile_scheduler.cuh"

namespace ra_cuda {

struct FixedSeq {
  static constexpr bool kVarlen = false;
  __device__ __forceinline__ static int num_tiles(const FwdParamsV2& p) { return p.v2_tiles; }
  template <class Mask, bool kPack>
  __device__ __forceinline__ static TileInfo tile_info(const FwdParamsV2& p, int tile) {
    TileInfo t;
    int bh;
    v2_tile_order(p, tile, Mask::kCausal, bh, t.m);
    t.b = bh / p.head_groups;
    t.hg = bh - t.b * p.head_groups;
    t.q0 = 0;
    t.k0 = 0;
    t.len_q = p.seqlen_q;
    t.len_k = p.seqlen_k;
    const int lr = Rows<kPack>::log2_rows(p);
    const int i_last = min(((t.m + 1) << lr) - 1, t.len_q - 1);
    t.nb = tile_key_blocks<Mask, sm90::kBlockN>(p, i_last, t.len_q, t.len_k);
    return t;
  }
  __device__ __forceinline__ static int batch_coord(const TileInfo& t) { return t.b; }
};

struct VarSeq {
  static constexpr bool kVarlen = true;
  __device__ __forceinline__ static int num_tiles(const FwdParamsV2& p) {
    return __ldcg(p.var_count) * p.head_groups; /* the pre-pass wrote it just before */
  }
  template <class Mask, bool kPack>
  __device__ __forceinline__ static TileInfo tile_info(const FwdParamsV2& p, int tile) {
    const int e = tile / p.head_groups;
    const int4 a = __ldcg(reinterpret_cast<const int4*>(p.var_tiles + e));
    const int4 c = __ldcg(reinterpret_cast<const int4*>(p.var_tiles + e) + 1);
    TileInfo t;
    t.q0 = a.x;
    t.len_q = a.y;
    t.k0 = a.z;
    t.len_k = a.w;
    t.m = c.x;
    t.nb = c.y;
    t.b = c.z;
    t.hg = tile - e * p.head_groups;
    return t;
  }
  __device__ __forceinline__ static int batch_coord(const TileInfo&) { return 0; }
};

constexpr int kVarPrepThreads = 1024;
constexpr int kVarBins = 1024; /* key-block counts >= kVarBins - 1 share the heaviest bin */

/* Within one CTA: the exclusive prefix of v over threads in index order; *total gets the sum. */
__device__ __forceinline__ int block_exclusive_scan(int v, int* warp_sums, int* total) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  int x = v;
#pragma unroll
  for (int d = 1; d < 32; d <<= 1) {
    const int y = __shfl_up_sync(0xffffffffu, x, d);
    if (lane >= d) x += y;
  }
  if (lane == 31) warp_sums[warp] = x;
  __syncthreads();
  if (warp == 0) {
    int w = lane < (int)(blockDim.x >> 5) ? warp_sums[lane] : 0;
#pragma unroll
    for (int d = 1; d < 32; d <<= 1) {
      const int y = __shfl_up_sync(0xffffffffu, w, d);
      if (lane >= d) w += y;
    }
    warp_sums[lane] = w; /* inclusive over warps */
    if (lane == 31) *total = w;
  }
  __syncthreads();
  return x - v + (warp > 0 ? warp_sums[warp - 1] : 0);
}

template <class Mask, bool kPack>
__global__ void __launch_bounds__(kVarPrepThreads) attn_varlen_tiles(const __grid_constant__ FwdParamsV2 p) {
  __shared__ int bins[kVarBins];
  __shared__ int warp_sums[32];
  __shared__ int bad, total;
  const int tid = threadIdx.x;
  const int lr = Rows<kPack>::log2_rows(p);
  if (tid == 0) {
    bad = p.cu_seqlens_q[0] != 0 || p.cu_seqlens_k[0] != 0 || p.cu_seqlens_q[p.batch] != p.seqlen_q ||
          p.cu_seqlens_k[p.batch] != p.seqlen_k;
  }
  for (int i = tid; i < kVarBins; i += kVarPrepThreads) bins[i] = 0;
  __syncthreads();
  for (int b = tid; b < p.batch; b += kVarPrepThreads) {
    const int lq = p.cu_seqlens_q[b + 1] - p.cu_seqlens_q[b];
    const int lk = p.cu_seqlens_k[b + 1] - p.cu_seqlens_k[b];
    if (lq < 0 || lk < 0 || lq > p.max_seqlen_q || lk > p.max_seqlen_k) bad = 1;
  }
  __syncthreads();
  if (bad) {
    if (tid == 0) *p.var_count = 0;
    return;
  }
  /* pass 1: how many entries of each weight */
  for (int b = tid; b < p.batch; b += kVarPrepThreads) {
    const int lq = p.cu_seqlens_q[b + 1] - p.cu_seqlens_q[b];
    const int lk = p.cu_seqlens_k[b + 1] - p.cu_seqlens_k[b];
    for (int m = 0; (m << lr) < lq; ++m) {
      const int nb = tile_key_blocks<Mask, sm90::kBlockN>(p, min(((m + 1) << lr) - 1, lq - 1), lq, lk);
      atomicAdd(&bins[min(nb, kVarBins - 1)], 1);
    }
  }
  __syncthreads();
  /* heaviest bin first: thread t owns bin kVarBins - 1 - t */
  const int bin = kVarBins - 1 - tid;
  const int start = block_exclusive_scan(bins[bin], warp_sums, &total);
  __syncthreads();
  bins[bin] = start; /* now the bin's next free slot */
  __syncthreads();
  /* pass 2: each entry into a slot of its bin */
  for (int b = tid; b < p.batch; b += kVarPrepThreads) {
    const int q0 = p.cu_seqlens_q[b], k0 = p.cu_seqlens_k[b];
    const int lq = p.cu_seqlens_q[b + 1] - q0;
    const int lk = p.cu_seqlens_k[b + 1] - k0;
    for (int m = 0; (m << lr) < lq; ++m) {
      const int nb = tile_key_blocks<Mask, sm90::kBlockN>(p, min(((m + 1) << lr) - 1, lq - 1), lq, lk);
      const int slot = atomicAdd(&bins[min(nb, kVarBins - 1)], 1);
      int4* e = reinterpret_cast<int4*>(p.var_tiles + slot);
      e[0] = make_int4(q0, lq, k0, lk);
      e[1] = make_int4(m, nb, b, 0);
    }
  }
  if (tid == 0) *p.var_count = total;
}

}  // namespace ra_cuda
