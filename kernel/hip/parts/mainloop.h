/*
 * mainloop.h — data movement and the two MFMA batches of one K/V tile.
 *
 *   load_q_fragments   HBM -> VGPR, once per block: each lane's Q B-operands (16-byte loads)
 *   TileCopy::load     HBM -> VGPR staging for the next tile (issued before the MFMAs of this one)
 *   TileCopy::store    VGPR staging -> LDS (K row-major, V transposed to V^T), swizzled
 *   score_tile_stream  S^T = K Q^T       2 query tiles x 4 key tiles x 8 k-steps  = 64 MFMAs
 *   pv_tile_stream     O^T += V^T P^T    2 query tiles x 8 dim tiles x 4 k-steps  = 64 MFMAs
 *                      (the 32 LDS fragment reads of a tile one stream, kLdsDepth reads ahead)
 * Keys past seqlen_k are loaded as zeros (K and V), so tail rows contribute exactly 0 * 0.
 */
#ifndef RA_HIP_MAINLOOP_H
#define RA_HIP_MAINLOOP_H

#include "dispatch.h"
#include "layout.h"
#include "mfma.h"

namespace ra_gfx942 {

/* qf[mt][p]: dims 32p + 8g .. +7 of query row (q_row0 + 16 mt + li); zeros past seqlen_q. */
template <int L>
__device__ __forceinline__ void load_q_fragments(u32x4 (&qf)[kMTiles][4], const uint16_t* qbase,
                                                 int64_t seq_stride, uint32_t q_row0, uint32_t seqlen_q,
                                                 int li, int g) {
#pragma unroll
  for (int mt = 0; mt < kMTiles; ++mt) {
    const uint32_t row = q_row0 + 16 * mt + li;
    const bool ok = row < seqlen_q;
    const uint16_t* src = qbase + row_offset<L>(ok ? row : 0, seq_stride) + 8 * g;
#pragma unroll
    for (int p = 0; p < 4; ++p) {
      u32x4 x = {0u, 0u, 0u, 0u};
      if (ok) x = *reinterpret_cast<const u32x4*>(src + 32 * p);
      qf[mt][p] = x;
    }
  }
}

/* Per-thread staging of one K/V tile (16 VGPRs). */
template <int L>
struct TileCopy {
  u32x4 k[2];       /* K rows k_copy_row(t, i), granule k_copy_granule(t) */
  unsigned int v[8]; /* V keys 8*keygroup + e, dims 2*dimpair, +1 */

  __device__ __forceinline__ void load(const uint16_t* kbase, const uint16_t* vbase, int64_t k_seq_stride,
                                       int64_t v_seq_stride, uint32_t key0, uint32_t seqlen_k, int t) {
#pragma unroll
    for (int i = 0; i < 2; ++i) {
      const uint32_t key = key0 + (uint32_t)k_copy_row(t, i);
      u32x4 x = {0u, 0u, 0u, 0u};
      if (key < seqlen_k)
        x = *reinterpret_cast<const u32x4*>(kbase + row_offset<L>(key, k_seq_stride) + 8 * k_copy_granule(t));
      k[i] = x;
    }
    const uint32_t vkey0 = key0 + 8u * (uint32_t)v_copy_keygroup(t);
#pragma unroll
    for (int e = 0; e < 8; ++e) {
      const uint32_t key = vkey0 + (uint32_t)e;
      unsigned int x = 0u;
      if (key < seqlen_k)
        x = *reinterpret_cast<const unsigned int*>(vbase + row_offset<L>(key, v_seq_stride) + 2 * v_copy_dimpair(t));
      v[e] = x;
    }
  }

  /* The same copy for a tile wholly below seqlen_k (step 5): no per-load bounds test, and the rows
   * addressed from wave-uniform bases (a wave's V keys 8w..8w+7 and K rows 4w + 32i are uniform,
   * only the lane's column and K's row within the wave vary), so the address arithmetic is scalar
   * but for one 64-bit add per K load. Same bytes as load(). */
  __device__ __forceinline__ void load_full(const uint16_t* kbase, const uint16_t* vbase, int64_t k_seq_stride,
                                            int64_t v_seq_stride, uint32_t key0, int w, int lane) {
    /* Step 12: the same loads as buffer loads: the wave's K and V row bases are the resources' base
     * (scalar), each row's distance an SGPR soffset (loop-invariant), the lane's offset a constant
     * VGPR; no VALU address arithmetic per tile. Row distances must fit 31 bits: strides below 2^20
     * elements (else the flat path below). No bounds checks: full tiles only (num_records max). */
    const uint64_t strides = (uint64_t)k_seq_stride | (uint64_t)v_seq_stride;
    if (((uint32_t)(strides >> 32) | ((uint32_t)strides >> 20)) == 0u) { /* 32-bit scalar tests */
      const uint16_t* krow = kbase + row_offset<L>(key0 + 4u * (uint32_t)w, k_seq_stride);
      const __amdgpu_buffer_rsrc_t rk = __builtin_amdgcn_make_buffer_rsrc((void*)krow, (short)0, -1, 0x00020000);
      const uint32_t klane = 2u * (uint32_t)row_offset<L>((uint32_t)(lane >> 4), k_seq_stride) + 16u * (uint32_t)(lane & 15);
#pragma unroll
      for (int i = 0; i < 2; ++i)
        k[i] = __builtin_amdgcn_raw_buffer_load_b128(rk, klane, (int)(2 * row_offset<L>(32u * (uint32_t)i, k_seq_stride)), 0);
      const uint16_t* vrow = vbase + row_offset<L>(key0 + 8u * (uint32_t)w, v_seq_stride);
      const __amdgpu_buffer_rsrc_t rv = __builtin_amdgcn_make_buffer_rsrc((void*)vrow, (short)0, -1, 0x00020000);
#pragma unroll
      for (int e = 0; e < 8; ++e)
        v[e] = __builtin_amdgcn_raw_buffer_load_b32(rv, 4u * (uint32_t)lane, (int)(2 * row_offset<L>((uint32_t)e, v_seq_stride)), 0);
      asm volatile("");
      return;
    }
    const int64_t klane = row_offset<L>((uint32_t)(lane >> 4), k_seq_stride) + 8 * (lane & 15);
#pragma unroll
    for (int i = 0; i < 2; ++i) {
      /* Each K row set from its own scalar base: folded into one base + 8 KiB (packed), the second
       * address took a v_add_co/v_addc pair (the 13-bit load offset cannot hold it). */
      uint32_t rows = 32u * (uint32_t)i;
      asm("" : "+s"(rows));
      const uint16_t* krow = kbase + row_offset<L>(key0 + 4u * (uint32_t)w + rows, k_seq_stride);
      k[i] = *reinterpret_cast<const u32x4*>(krow + klane);
    }
    const uint16_t* vrow = vbase + row_offset<L>(key0 + 8u * (uint32_t)w, v_seq_stride);
#pragma unroll
    for (int e = 0; e < 8; ++e)
      v[e] = *reinterpret_cast<const unsigned int*>(vrow + row_offset<L>((uint32_t)e, v_seq_stride) + 2 * lane);
    /* Keeps the optimiser from merging this block's last load into load()'s guarded one (it did:
     * the merged path waited vmcnt(0) right after issuing the tile's loads). */
    asm volatile("");
  }

  __device__ __forceinline__ void store(u32x4* lds_k, u32x4* lds_vt, int t) const {
#pragma unroll
    for (int i = 0; i < 2; ++i) lds_k[k_lds_index(k_copy_row(t, i), k_copy_granule(t))] = k[i];
    /* Transpose 8 keys x 2 dims into two V^T granules (8 keys of one dim each). */
    u32x4 even, odd;
    even.x = __builtin_amdgcn_perm(v[1], v[0], 0x05040100u);
    even.y = __builtin_amdgcn_perm(v[3], v[2], 0x05040100u);
    even.z = __builtin_amdgcn_perm(v[5], v[4], 0x05040100u);
    even.w = __builtin_amdgcn_perm(v[7], v[6], 0x05040100u);
    odd.x = __builtin_amdgcn_perm(v[1], v[0], 0x07060302u);
    odd.y = __builtin_amdgcn_perm(v[3], v[2], 0x07060302u);
    odd.z = __builtin_amdgcn_perm(v[5], v[4], 0x07060302u);
    odd.w = __builtin_amdgcn_perm(v[7], v[6], 0x07060302u);
    const int d = 2 * v_copy_dimpair(t);
    const int kg = v_copy_keygroup(t);
    lds_vt[vt_lds_index(d, kg)] = even;
    lds_vt[vt_lds_index(d + 1, kg)] = odd;
  }
};

/* Step 3 (docs/hip-gfx942.md, "Design steps"): the 32 LDS fragment reads of a tile (16 K, then
 * 16 V^T) as one stream kept kLdsDepth reads ahead of the MFMAs that use them, instead of each read
 * waited for (lgkmcnt(0)) right before its four MFMAs. The MFMAs are asm volatile, and
 * LLVM orders memory accesses against them, so the program order written here is the issue order;
 * SIInsertWaitcnts then waits with lgkmcnt(depth). The first V^T reads are issued under the last
 * score MFMAs and are in flight through the softmax. Fragment f[i]: i < 16 K (key tile i/4, dims
 * 32(i%4) + 8g), else V^T (dim tile (i-16)/2, keys 32((i-16)%2) + 8g). */
constexpr int kFrags = 2 * kKTiles * 4; /* 16 K + 16 V^T reads per wave per tile */
constexpr int kLdsDepth = 8;            /* reads in flight ahead of their MFMAs */

/* Step 8: each lane's LDS byte offsets, computed once before the tile loop. The swizzles
 * depend only on the low bits of a K row (key tile kt & 1) and of a V^T row (dim tile dt & 3), so
 * 8 K and 8 V^T offsets per lane cover all 32 reads; the rest (kt >> 1, dt >> 2, the buffer) is a
 * constant or scalar added to them, and the per-read v_lshl_or / v_add address arithmetic goes. */
struct FragAddr {
  int li, g;
  uint32_t k[8]; /* [(kt & 1) * 4 + p]: 16 * k_lds_index(tile_key(kt & 1, li), 4p + g) */
  uint32_t v[8]; /* [(dt & 3) * 2 + c]: 16 * vt_lds_index(16 (dt & 3) + li, 4c + g) */
  __device__ __forceinline__ FragAddr(int li_, int g_) : li(li_), g(g_) {
#pragma unroll
    for (int h = 0; h < 2; ++h)
#pragma unroll
      for (int p = 0; p < 4; ++p) k[4 * h + p] = 16u * (uint32_t)k_lds_index(tile_key(h, li), 4 * p + g);
#pragma unroll
    for (int d = 0; d < 4; ++d)
#pragma unroll
      for (int c = 0; c < 2; ++c) v[2 * d + c] = 16u * (uint32_t)vt_lds_index(16 * d + li, 4 * c + g);
  }
};

__device__ __forceinline__ u32x4 read_frag(int i, const u32x4* lds_k, const u32x4* lds_vt, const FragAddr& fa) {
  static_assert(kLdsKBytes == 16384 && kLdsVBytes == 16384, "offsets below assume 64 x 128 tiles");
  if (i < 16) {
    const int kt = i >> 2;
    return *reinterpret_cast<const u32x4*>(reinterpret_cast<const char*>(lds_k) + fa.k[4 * (kt & 1) + (i & 3)] +
                                           8192 * (kt >> 1));
  }
  const int j = i - 16, dt = j >> 1;
  return *reinterpret_cast<const u32x4*>(reinterpret_cast<const char*>(lds_vt) + fa.v[2 * (dt & 3) + (j & 1)] +
                                         8192 * (dt >> 2));
}

/* Step 13: the same reads through an LDS-address-space pointer made from a 32-bit LDS address (the M
 * phase's buffer addresses, computed before its barrier). */
typedef const u32x4 __attribute__((address_space(3)))* LdsPtr;
typedef const char __attribute__((address_space(3)))* LdsBytes;
__device__ __forceinline__ LdsPtr lds_ptr(uint32_t addr) { return (LdsPtr)(uintptr_t)addr; }
__device__ __forceinline__ u32x4 read_frag(int i, LdsPtr lds_k, LdsPtr lds_vt, const FragAddr& fa) {
  if (i < 16) {
    const int kt = i >> 2;
    return *reinterpret_cast<LdsPtr>(reinterpret_cast<LdsBytes>(lds_k) + fa.k[4 * (kt & 1) + (i & 3)] + 8192 * (kt >> 1));
  }
  const int j = i - 16, dt = j >> 1;
  return *reinterpret_cast<LdsPtr>(reinterpret_cast<LdsBytes>(lds_vt) + fa.v[2 * (dt & 3) + (j & 1)] + 8192 * (dt >> 2));
}

template <int D>
__device__ __forceinline__ void score_tile_stream(f32x4 (&s)[kMTiles][kKTiles], const u32x4 (&qf)[kMTiles][4],
                                                  u32x4 (&f)[kFrags], const u32x4* lds_k, const u32x4* lds_vt,
                                                  const FragAddr& fa) {
  /* Step 1: every score chain starts from the literal 0 (mfma_16x16x16_bf16_first). */
#pragma unroll
  for (int i = 0; i < D; ++i) f[i] = read_frag(i, lds_k, lds_vt, fa);
#pragma unroll
  for (int kt = 0; kt < kKTiles; ++kt) {
#pragma unroll
    for (int p = 0; p < 4; ++p) {
      const int i = 4 * kt + p;
      if (i + D < kFrags) f[i + D] = read_frag(i + D, lds_k, lds_vt, fa);
#pragma unroll
      for (int mt = 0; mt < kMTiles; ++mt) {
        if (p == 0)
          mfma_16x16x16_bf16_first(s[mt][kt], lo_half(f[i]), lo_half(qf[mt][p]));
        else
          mfma_16x16x16_bf16(s[mt][kt], lo_half(f[i]), lo_half(qf[mt][p]));
      }
#pragma unroll
      for (int mt = 0; mt < kMTiles; ++mt) mfma_16x16x16_bf16(s[mt][kt], hi_half(f[i]), hi_half(qf[mt][p]));
    }
  }
  mfma_fence(s[0][0], s[0][1], s[0][2], s[0][3], s[1][0], s[1][1], s[1][2], s[1][3]);
}

template <int D>
__device__ __forceinline__ void pv_tile_stream(f32x4 (&o)[kMTiles][kDTiles], bf16x4 (&p)[kMTiles][kKTiles],
                                               u32x4 (&f)[kFrags], const u32x4* lds_k, const u32x4* lds_vt,
                                               const FragAddr& fa) {
#pragma unroll
  for (int mt = 0; mt < kMTiles; ++mt) mfma_entry_fence(o[mt], p[mt]);
#pragma unroll
  for (int dt = 0; dt < kDTiles; ++dt) {
#pragma unroll
    for (int c = 0; c < 2; ++c) {
      const int i = 16 + 2 * dt + c;
      if (i + D < kFrags) f[i + D] = read_frag(i + D, lds_k, lds_vt, fa);
#pragma unroll
      for (int mt = 0; mt < kMTiles; ++mt) mfma_16x16x16_bf16(o[mt][dt], lo_half(f[i]), p[mt][2 * c]);
#pragma unroll
      for (int mt = 0; mt < kMTiles; ++mt) mfma_16x16x16_bf16(o[mt][dt], hi_half(f[i]), p[mt][2 * c + 1]);
    }
  }
#pragma unroll
  for (int mt = 0; mt < kMTiles; ++mt) {
    mfma_fence(o[mt][0], o[mt][1], o[mt][2], o[mt][3], o[mt][4], o[mt][5], o[mt][6], o[mt][7]);
  }
}

}  // namespace ra_gfx942

#endif /* RA_HIP_MAINLOOP_H */
