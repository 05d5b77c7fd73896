/*
 * stair.h — the causal diagonal's non-finite V, kept exact (docs/numerics.md §1b, issue 40).
 *
 * On a q-block's diagonal a key j that some rows of the block see and others do not meets P = 0 in the
 * rows that do not see it; 0 * Inf = NaN in the PV MFMA would reach a row whose reference is finite.
 * The v2 kernels therefore look, once per block before the key loop, at the V rows of the keys some
 * rows do not see ([first row's limit, last row's limit): at most 255 keys, the "staircase"). If all
 * are finite (the common case) the key loop runs as it always did. Otherwise the block runs the key
 * loop's safe variant (schedule.h, RowLimitSafe):
 *   - every V tile that holds staircase keys is stored to LDS with its non-finite elements as +0, so
 *     the PV MFMA multiplies only finite values (column d of O depends on column d of V only: every
 *     column whose V is finite keeps its bits);
 *   - after that tile's PV, each lane adds p_ij * V[j][d] to O[i][d] for the non-finite V[j][d] of the
 *     keys j its row i sees (read again from global memory), before any later rescale: exactly what
 *     the dense row over its visible keys forms (+-Inf, or NaN for p_ij = 0, a NaN V or +Inf with
 *     -Inf), the CPU golden model's p_ij * V[j][d] in fp32.
 */
#ifndef RA_HIP_STAIR_H
#define RA_HIP_STAIR_H

#include "../../common/bf16.h"
#include "dispatch.h"
#include "layout.h"
#include "mfma.h"

namespace ra_gfx942 {

/* A wave's staged V words with every non-finite bf16 replaced by +0. */
__device__ __forceinline__ void zero_nonfinite(unsigned int (&v)[kVKeysPerWave]) {
#pragma unroll
  for (int e = 0; e < kVKeysPerWave; ++e) {
    v[e] = ra_bf16x2_zero_nonfinite(v[e]);
  }
}

/* Whether V rows [k_begin, k_end) (at most kBlockQ of them) hold a non-finite element: all 512 threads
 * read 16 bytes a row granule, each wave's vote goes through the first 8 words of the V^T buffer
 * `flags` (not written before the key loop's second barrier), one barrier, and every wave reads the 8
 * votes into one ballot. Block-uniform (a scalar). */
template <int L>
__device__ __forceinline__ bool v_rows_nonfinite(const KernelArgs& a, const uint16_t* vb, uint32_t k_begin,
                                                 uint32_t k_end, int t, int w, int lane, u32x4* flags) {
  /* thread t: granule t % 16 of rows k_begin + t / 16 + 32 it (rows at or past k_end: not read) */
  constexpr int kRowsPerPass = kThreads / kKGranules; /* 32 */
  constexpr int kLoads = kBlockQ / kRowsPerPass;      /* 8: the at most 255 staircase rows */
  const uint32_t r0 = (uint32_t)t / (uint32_t)kKGranules;
  const uint16_t* first = vb + row_offset<L>(k_begin, a.v_stride[2]) + 8 * (t % kKGranules);
  const int64_t step = row_offset<L>((uint32_t)kRowsPerPass, a.v_stride[2]);
  const uint16_t* row = first + row_offset<L>(r0, a.v_stride[2]);
  u32x4 x[kLoads];
#pragma unroll
  for (int it = 0; it < kLoads; ++it, row += step) { /* all loads in flight at once; none past k_end */
    u32x4 y = {0u, 0u, 0u, 0u};
    if (r0 + (uint32_t)(it * kRowsPerPass) < k_end - k_begin) y = *reinterpret_cast<const u32x4*>(row);
    x[it] = y;
  }
  /* the words' ra_bf16x2_nonfinite_sum OR-ed before one mask: 2 VALU ops a word */
  uint32_t acc = 0u;
#pragma unroll
  for (int it = 0; it < kLoads; ++it)
#pragma unroll
    for (int e = 0; e < 4; ++e) acc |= ra_bf16x2_nonfinite_sum(x[it][e]);
  const uint64_t any = __builtin_amdgcn_ballot_w64(ra_bf16x2_sum_flags(acc) != 0u);
  uint32_t* words = reinterpret_cast<uint32_t*>(flags);
  if (lane == 0) words[w] = any != 0u ? 1u : 0u;
  /* the key loop's prologue barrier: K(0) (issue_k0, before the look) and the votes published */
  asm volatile("s_waitcnt vmcnt(0) lgkmcnt(0)\n\ts_barrier" ::: "memory");
  const uint32_t mine = words[lane & (kWaves - 1)]; /* lanes 0-7: the 8 waves' votes */
  return __builtin_amdgcn_ballot_w64(mine != 0u) != 0u;
}

typedef const u32x2 __attribute__((address_space(1))) GlobalU32x2;

/* After the PV of a tile whose V^T went to LDS through zero_nonfinite: O[i][d] += p_ij * V[j][d] for
 * the tile's keys j < seqlen_k that row i sees (j < lim + 16 mt, lim the lane's row-0 limit) and whose
 * V[j][d] is not finite, on the lane's O^T elements (rows 16 mt + li, dims 16 dt + 4g + r). p_ij is
 * the bf16 P the MFMA took, from lane li + 16 gs (layout.h: lane group gs holds keys tile_key(kt,
 * 4 gs + r)). Wave-uniform loops and branches, so the lane exchanges see every lane. */
template <int L>
__device__ __forceinline__ void fold_nonfinite_v(f32x4 (&o)[kMTiles][kDTiles], const bf16x4 (&p)[kMTiles][kKTiles],
                                                 const KernelArgs& a, const uint16_t* vb, uint32_t key0, int lim,
                                                 int li, int g) {
#pragma clang fp contract(off)
#pragma nounroll
  for (int kk = 0; kk < kBlockK; ++kk) { /* kk = 16 gs + 4 kt + r: p[.][kt] element r of lane group gs */
    const int gs = kk >> 4, kt = (kk >> 2) & 3, r = kk & 3;
    const uint32_t key = key0 + (uint32_t)tile_key(kt, 4 * gs + r);
    if (key >= a.seqlen_k) continue; /* past the block's last visible key: not in the buffer range */
    const uint16_t* row = vb + row_offset<L>(key, a.v_stride[2]) + 4 * g;
    u32x2 x[kDTiles];
    uint32_t bad = 0u;
#pragma unroll
    for (int dt = 0; dt < kDTiles; ++dt) {
      x[dt] = *(const GlobalU32x2*)(uintptr_t)(row + 16 * dt); /* a global_load, not flat */
      bad |= ra_bf16x2_nonfinite(x[dt].x) | ra_bf16x2_nonfinite(x[dt].y);
    }
    uint64_t any = __builtin_amdgcn_ballot_w64(bad != 0u);
    asm volatile("" : "+s"(any)); /* a scalar branch: the exchange below needs every lane */
    if (any == 0u) continue;
#pragma unroll
    for (int mt = 0; mt < kMTiles; ++mt) {
      uint32_t src = 0u;
#pragma unroll
      for (int k2 = 0; k2 < kKTiles; ++k2) {
        const u32x2 pw = __builtin_bit_cast(u32x2, p[mt][k2]);
        if (k2 == kt) src = (r >> 1) ? pw.y : pw.x;
      }
      const uint32_t got = (uint32_t)__builtin_amdgcn_ds_bpermute((li + 16 * gs) << 2, (int)src);
      const float pf = __builtin_bit_cast(float, (r & 1) ? (got & 0xffff0000u) : (got << 16));
      /* integer masks, no lane compare an element (64 lane masks in SGPRs spilled): O - p_ij * W with
       * W = -V[j][d] where the row sees key j and V[j][d] is not finite, else +0 (x - +0 = x for every
       * x, -0 included; p_ij >= 0) */
      const uint32_t vis = (int)key < lim + 16 * mt ? 0xffffffffu : 0u;
#pragma unroll
      for (int dt = 0; dt < kDTiles; ++dt)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const uint32_t wv = (e >> 1) ? x[dt].y : x[dt].x;
          const uint32_t nf = ra_bf16x2_halves(ra_bf16x2_nonfinite(wv)) & vis;
          uint32_t hb = (e & 1) ? (wv & 0xffff0000u) : (wv << 16);
          uint32_t m = (e & 1) ? (nf & 0xffff0000u) : (nf << 16);
          asm volatile("" : "+v"(hb), "+v"(m)); /* no SDWA forms (not emulated) */
          o[mt][dt][e] = o[mt][dt][e] - pf * __builtin_bit_cast(float, (hb ^ 0x80000000u) & m);
        }
    }
  }
}

}  // namespace ra_gfx942

#endif /* RA_HIP_STAIR_H */
