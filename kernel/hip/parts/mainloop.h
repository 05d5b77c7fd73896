/*
 * mainloop.h — data movement and the two MFMA batches of one K/V tile.
 *
 *   load_q_fragments   HBM -> VGPR, once per block: each lane's Q B-operands (16-byte loads)
 *   TileCopy::load     HBM -> VGPR staging for the next tile (issued before the MFMAs of this one)
 *   TileCopy::store    VGPR staging -> LDS (K row-major, V transposed to V^T), swizzled
 *   score_tile         S^T = K Q^T       2 query tiles x 4 key tiles x 8 k-steps  = 64 MFMAs
 *   pv_tile            O^T += V^T P^T    2 query tiles x 8 dim tiles x 4 k-steps  = 64 MFMAs
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

/* s[mt][kt] = S^T fragment: lane holds S[query 16 mt + li][key tile_key(kt, 4g + r)], r = 0..3. */
__device__ __forceinline__ void score_tile(f32x4 (&s)[kMTiles][kKTiles], const u32x4 (&qf)[kMTiles][4],
                                           const u32x4* lds_k, int li, int g) {
#if !RA_HIP_FIRST_MFMA_ZERO_C
#pragma unroll
  for (int mt = 0; mt < kMTiles; ++mt)
#pragma unroll
    for (int kt = 0; kt < kKTiles; ++kt) s[mt][kt] = f32x4{0.f, 0.f, 0.f, 0.f};
#endif
#pragma unroll
  for (int kt = 0; kt < kKTiles; ++kt) {
    const int row = tile_key(kt, li);
#pragma unroll
    for (int p = 0; p < 4; ++p) {
      const u32x4 kf = lds_k[k_lds_index(row, 4 * p + g)];
      /* Alternate accumulators so that no MFMA waits for the previous one's result. */
#pragma unroll
      for (int mt = 0; mt < kMTiles; ++mt) {
        if (RA_HIP_FIRST_MFMA_ZERO_C && p == 0)
          mfma_16x16x16_bf16_first(s[mt][kt], lo_half(kf), lo_half(qf[mt][p]));
        else
          mfma_16x16x16_bf16(s[mt][kt], lo_half(kf), lo_half(qf[mt][p]));
      }
#pragma unroll
      for (int mt = 0; mt < kMTiles; ++mt) mfma_16x16x16_bf16(s[mt][kt], hi_half(kf), hi_half(qf[mt][p]));
    }
  }
  mfma_fence(s[0][0], s[0][1], s[0][2], s[0][3], s[1][0], s[1][1], s[1][2], s[1][3]);
}

/* o[mt][dt] += V^T P^T: lane holds O[query 16 mt + li][dim 16 dt + 4g + r]. */
__device__ __forceinline__ void pv_tile(f32x4 (&o)[kMTiles][kDTiles], const bf16x4 (&p)[kMTiles][kKTiles],
                                        const u32x4* lds_vt, int li, int g) {
#pragma unroll
  for (int dt = 0; dt < kDTiles; ++dt) {
    const int d = 16 * dt + li;
#pragma unroll
    for (int c = 0; c < 2; ++c) {
      const u32x4 vf = lds_vt[vt_lds_index(d, 4 * c + g)];
#pragma unroll
      for (int mt = 0; mt < kMTiles; ++mt) mfma_16x16x16_bf16(o[mt][dt], lo_half(vf), p[mt][2 * c]);
#pragma unroll
      for (int mt = 0; mt < kMTiles; ++mt) mfma_16x16x16_bf16(o[mt][dt], hi_half(vf), p[mt][2 * c + 1]);
    }
  }
#pragma unroll
  for (int mt = 0; mt < kMTiles; ++mt) {
    mfma_fence(o[mt][0], o[mt][1], o[mt][2], o[mt][3], o[mt][4], o[mt][5], o[mt][6], o[mt][7]);
  }
}

}  // namespace ra_gfx942

#endif /* RA_HIP_MAINLOOP_H */
