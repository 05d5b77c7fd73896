/*
 * mainloop.h — the operands of a tile's MFMAs.
 *
 *   load_q_fragments   HBM -> VGPR, once per block: each lane's Q B-operands (16-byte loads)
 *   FragAddr           each lane's LDS byte addresses of its K and V^T fragments
 *   read_frag          one 16-byte fragment read (a ds_read_b128 of a lane register and an immediate)
 * The MFMAs that use them, the copies that fill LDS and their schedule: schedule.h, copy.h.
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
 * 8 K and 8 V^T offsets per lane cover all 32 reads; the rest (kt >> 1, dt >> 2) is the read's
 * immediate offset. Step 13 adds the buffer's LDS address to them (the key loop moves them from
 * buffer to buffer), so a read needs no address arithmetic at all. */
struct FragAddr {
  int li, g;
  uint32_t k[8]; /* [(kt & 1) * 4 + p]: 16 * k_lds_index(tile_key(kt & 1, li), 4p + g) + buffer */
  uint32_t v[8]; /* [(dt & 3) * 2 + c]: 16 * vt_lds_index(16 (dt & 3) + li, 4c + g) + buffer */
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

/* Fragment i of the tile at fa's buffers: a 32-bit LDS address as an LDS-address-space pointer, so the
 * read is a ds_read_b128 of the lane's address register and an immediate offset. */
typedef const u32x4 __attribute__((address_space(3)))* LdsPtr;
__device__ __forceinline__ u32x4 read_frag(int i, const FragAddr& fa) {
  static_assert(kLdsKBytes == 16384 && kLdsVBytes == 16384, "offsets below assume 64 x 128 tiles");
  if (i < 16) {
    const int kt = i >> 2;
    return *(LdsPtr)(uintptr_t)(fa.k[4 * (kt & 1) + (i & 3)] + 8192u * (uint32_t)(kt >> 1));
  }
  const int j = i - 16, dt = j >> 1;
  return *(LdsPtr)(uintptr_t)(fa.v[2 * (dt & 3) + (j & 1)] + 8192u * (uint32_t)(dt >> 2));
}

}  // namespace ra_gfx942

#endif /* RA_HIP_MAINLOOP_H */
