/*
 * stair.cuh — the causal diagonal's non-finite V kept exact on sm_90a (RA_CUDA_STAIR_EXACT=1, the
 * default since the H100 measured it at 0.95-0.99x the build without it, >= 1.02x cuDNN; 0 builds
 * none of this and has the gap of docs/numerics.md §1b). The gfx942 v2 kernels' design
 * (kernel/hip/parts/stair.h), on wgmma.
 *
 * A key j that some rows of a tile see and others do not (the "staircase": tile keys [limit(first
 * row), limit(last row)), at most 127) meets P = 0 in the rows that do not see it, and 0 x NaN or
 * 0 x Inf in the P.V would reach a row whose reference is finite. So the producer warpgroup's three
 * idle warps vote on every tile's staircase V rows ahead of its consumers (stair_nonfinite: they
 * read those rows from global memory once the producer has published the tile to them, ahead of its
 * Q stage, and publish one word per warp, mainloop_v2.cuh's vote_stairs_v2); a consumer reads the
 * words at the tile's start, so the vote's memory latency falls inside the previous tile. All finite (the common case):
 * the key loop runs as before (RowMask). Otherwise the tile runs the key loop's second instantiation
 * with RowMaskStair:
 *   before_pv  after a block's V has landed in shared memory and before any wgmma reads it, the
 *              non-finite bf16s of its staircase rows become +0 (a 16-byte chunk is 8 columns of one
 *              row in every swizzle, so no column is needed), then fence.proxy.async and a barrier
 *              of the threads that read it. Column d of O depends on column d of V only: every
 *              column whose V is finite keeps its bits.
 *   after_pv   after that block's P.V has completed and before the next block's rescale of O, each
 *              thread adds p_ij * V[j][d] to O[i][d] for the non-finite V[j][d] (read again from
 *              global memory) of each staircase key j its row i sees, p_ij the bf16 P the wgmma took
 *              (the quad's lane that holds it, by shuffle): the +-Inf, or NaN for p_ij = 0, a NaN V
 *              or +Inf with -Inf, that the dense row over its visible keys forms, as the CPU golden
 *              model's fp32 p_ij * V[j][d]. The fold needs block n's P after its P.V, so this
 *              instantiation packs the next block's first-half fragments after the wait
 *              (RA_CUDA_EARLY_FRAGS's 0 schedule: the same bits).
 * Keys no row of the tile sees are zeroed whole by RowMask::before_last_pv; keys every row sees need
 * nothing. Named barriers 9 (256 threads) and 10 (128: the second warpgroup has no row of the tile)
 * for the zeroing: their own ids, one count each (mask.cuh's comment).
 */
#pragma once
#include "mask.cuh"
#include "params.cuh"
#include "ptx.cuh"
#include "../common/bf16.h"

namespace ra_cuda {

constexpr int kBarStairZero = 9;
constexpr int kBarStairZero0 = 10;
constexpr int kStairVoteWarps = 3; /* the producer warpgroup's warps 1-3 */

/* Whether V rows [lo, hi) (0 < hi - lo <= 128; row r at v + r * ld) hold a non-finite element, in
 * every lane of the calling warp; t (0 .. 95) is the thread's index among the vote warps, which call
 * it together and each OR what they read. Thread t reads the 16-byte chunk t % 16 of rows
 * lo + t / 16 + 6 k; each pass issues four loads with no branch between them (a row past hi reads
 * row hi - 1 again, harmless to an OR), so they are in flight at once: six round trips cover 128 rows,
 * off the consumers' path. Four, because the producer warpgroup runs at 40 registers: six spilled.
 * (A branch per load made ptxas wait for each in turn: the H100 measured 16 round trips a tile.) */
__device__ __forceinline__ bool stair_nonfinite(const uint16_t* v, int64_t ld, int lo, int hi, int t) {
  constexpr int kRowsPerPass = 32 * kStairVoteWarps / 16;
  constexpr int kLoads = 4;
  const uint16_t* first = v + (int64_t)lo * ld + 8 * (t & 15);
  const int last = hi - lo - 1;
  uint32_t acc = 0u; /* the words' ra_bf16x2_nonfinite_sum OR-ed before one mask */
#pragma unroll 1
  for (int r0 = t >> 4; r0 <= last; r0 += kLoads * kRowsPerPass) {
    uint4 x[kLoads];
#pragma unroll
    for (int it = 0; it < kLoads; ++it)
      x[it] = __ldg(reinterpret_cast<const uint4*>(first + (int64_t)min(r0 + kRowsPerPass * it, last) * ld));
#pragma unroll
    for (int it = 0; it < kLoads; ++it)
      acc |= ra_bf16x2_nonfinite_sum(x[it].x) | ra_bf16x2_nonfinite_sum(x[it].y) |
             ra_bf16x2_nonfinite_sum(x[it].z) | ra_bf16x2_nonfinite_sum(x[it].w);
  }
  return __any_sync(0xffffffffu, ra_bf16x2_sum_flags(acc) != 0u);
}

/* RowMask<true> for a tile whose staircase V holds a non-finite element (the vote above). */
struct RowMaskStair : RowMask<true> {
  static constexpr bool kStair = true;
  int lo, hi;        /* the staircase, tile keys [limit(first row), limit(last row)) */
  const uint16_t* v; /* V's row of tile key 0 (the tile's K/V head and sequence) in global memory */
  int64_t ld;        /* V's row stride, elements */

  /* Block n (stage `stage` of shared memory, its V landed, no wgmma has read it): its staircase
   * rows' non-finite elements become +0, visible to the async proxy before any thread goes on. */
  template <class SmemT>
  __device__ __forceinline__ void before_pv(SmemT& sm, int stage, int n) const {
    constexpr int kBN = sizeof(sm.v[0][0]) / (64 * sizeof(uint16_t));
    const int j0 = max(lo, n * kBN), j1 = min(hi, (n + 1) * kBN);
    if (j0 >= j1) return; /* the same for every thread of the tile */
    const int chunks = (j1 - j0) * 16; /* 8 16-byte chunks per row of each d-half */
    for (int c = zero_tid; c < chunks; c += zero_threads) {
      const int row = j0 - n * kBN + (c >> 4);
      const uint32_t a = smem_u32(&sm.v[stage][(c >> 3) & 1][row * 64]) + 16u * (uint32_t)(c & 7);
      uint32_t x0, x1, x2, x3;
      asm volatile("ld.shared.v4.b32 {%0, %1, %2, %3}, [%4];"
                   : "=r"(x0), "=r"(x1), "=r"(x2), "=r"(x3)
                   : "r"(a)
                   : "memory");
      if ((ra_bf16x2_nonfinite(x0) | ra_bf16x2_nonfinite(x1) | ra_bf16x2_nonfinite(x2) |
           ra_bf16x2_nonfinite(x3)) == 0u)
        continue;
      asm volatile("st.shared.v4.b32 [%0], {%1, %2, %3, %4};" ::"r"(a), "r"(ra_bf16x2_zero_nonfinite(x0)),
                   "r"(ra_bf16x2_zero_nonfinite(x1)), "r"(ra_bf16x2_zero_nonfinite(x2)),
                   "r"(ra_bf16x2_zero_nonfinite(x3))
                   : "memory");
    }
    fence_proxy_async_smem(); /* the wgmmas read shared memory through the async proxy */
    named_bar_sync(zero_threads == 256 ? kBarStairZero : kBarStairZero0, zero_threads);
  }

  /* Block n's P.V has completed (o holds it, in block n's frame; pf is its P): O[i][d] += p_ij
   * V[j][d] for the non-finite V[j][d] of the block's staircase keys j that row i sees. The thread's
   * rows: lim[0], lim[1]; its columns 8 i + qc + {0, 1}; p_ij of block key 16 ks + jj is in lane
   * 4 (lane / 4) + (jj % 8) / 2 of the quad, word pf[4 ks + 2 (jj / 8) + r], half jj % 2
   * (mainloop_sm90.cuh's scores_to_frags). A warp-uniform loop (one key a step, not unrolled: the
   * slow path's code stays small), so every shuffle sees every lane. */
  template <int NP>
  __device__ __forceinline__ void after_pv(float (&o)[64], const uint32_t (&pf)[NP], int n) const {
    constexpr int kBN = NP * 4;
    const int j0 = max(lo, n * kBN), j1 = min(hi, (n + 1) * kBN);
    const int lane = zero_tid & 31;
    const int qc = 2 * (lane & 3);
#pragma unroll 1
    for (int key = j0; key < j1; ++key) {
      const int kk = key - n * kBN;
      const int w = 4 * (kk >> 4) + ((kk & 8) >> 2); /* pf word of row r: w + r */
      uint32_t q0 = 0u, q1 = 0u;
#pragma unroll
      for (int i = 0; i < NP; i += 2) /* registers, not a dynamically indexed (local) array */
        if (i == w) q0 = pf[i], q1 = pf[i + 1];
      const int src = (lane & ~3) | ((kk & 7) >> 1);
      const uint32_t w0 = __shfl_sync(0xffffffffu, q0, src);
      const uint32_t w1 = __shfl_sync(0xffffffffu, q1, src);
      const float p0 = __uint_as_float((kk & 1) ? (w0 & 0xffff0000u) : (w0 << 16));
      const float p1 = __uint_as_float((kk & 1) ? (w1 & 0xffff0000u) : (w1 << 16));
      const uint32_t* row = reinterpret_cast<const uint32_t*>(v + (int64_t)key * ld + qc);
      uint32_t x[16];
      uint32_t bad = 0u;
#pragma unroll
      for (int i = 0; i < 16; ++i) {
        x[i] = __ldg(row + 4 * i); /* columns 8 i + qc, + 1 */
        bad |= ra_bf16x2_nonfinite(x[i]);
      }
      if (bad == 0u) continue;
      const bool see0 = key < lim[0], see1 = key < lim[1];
#pragma unroll
      for (int i = 0; i < 16; ++i)
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          const uint32_t e = h ? (x[i] & 0xffff0000u) : (x[i] << 16);
          if ((ra_bf16x2_nonfinite(e) & 0x80000000u) == 0u) continue;
          const float vf = __uint_as_float(e);
          if (see0) o[4 * i + h] = o[4 * i + h] + p0 * vf;
          if (see1) o[4 * i + 2 + h] = o[4 * i + 2 + h] + p1 * vf;
        }
    }
  }
};

}  // namespace ra_cuda
