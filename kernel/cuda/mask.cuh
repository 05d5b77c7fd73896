/*
 * mask.cuh — which keys a query row sees (ABI v2's masks), and how the main loop applies it to a
 * tile's key blocks (FlashAttention-3's mask.h idea: a small type the main loop is templated on).
 *
 * Per sequence of len_q queries and len_k keys, query row i sees the keys [0, limit(i)):
 *   NoMask      limit = len_k
 *   CausalMask  limit = clamp(i + 1 + off, 0, len_k), off = 0 (top-left, SDPA's is_causal) or
 *               len_k - len_q (bottom-right, FlashAttention >= 2.1), p.mask_bottom_right
 * A causal row's keys are a prefix, so a tile of query rows [i_first, i_last] runs the key blocks
 * [0, ceil(limit(i_last) / kBN)) (at least one: a tile whose rows see no key still runs one block, so
 * that the S = Q K_0^T hand-over between tiles always has a K_0, and writes +0 rows), and masks only
 * the blocks from floor(limit(i_first) / kBN) on: with 128-row tiles, 128-key blocks and an offset
 * that is a multiple of 128, only the diagonal block.
 *
 * The main loop's parts (blocks_split_pv in mainloop_sm90.cuh asks them which block to mask and
 * masks it through them):
 *   TailMask  the dense kernels: the last block when seqlen_k is not a multiple of kBN, every row
 *             alike (the code the device measured, unchanged)
 *   RowMask   the v2 kernels: blocks >= `from`, each of the thread's two rows at its own limit; with
 *             kZero (causal or varlen), the last block's V rows that no row of the tile sees are
 *             zeroed before its P.V: a masked key's p is 0, but 0 x NaN (or Inf) in its V row would
 *             still reach every row's output, and a varlen tile's last block holds the next
 *             sequence's rows (TMA zero-fills only past the whole tensor). Keys some rows of the
 *             tile see and others do not (the diagonal's staircase) cannot be zeroed for some rows
 *             only: built with RA_CUDA_STAIR_EXACT=0 a NaN or Inf in such a key's V row reaches
 *             the rows that do not see it (0 x NaN), the gap docs/numerics.md §1b states
 *   RowMaskStair  stair.cuh, built with RA_CUDA_STAIR_EXACT=1 (the default): RowMask for a
 *             causal tile whose staircase V holds a non-finite
 *             element (a vote of the producer warpgroup's idle warps, read before the tile's key
 *             loop, which then runs as a second instantiation): those elements are zeroed in
 *             shared memory before their P.V and added back, p_ij V[j][d], to the rows that see
 *             key j, before the next rescale
 * Named barrier ids: 3 and 4 are split.cuh's, 5 and 6 below, 9 and 10 stair.cuh's; one thread count
 * per id.
 */
#pragma once
#include "params.cuh"
#include "ptx.cuh"
#include "smem.h"

namespace ra_cuda {

struct NoMask {
  static constexpr bool kCausal = false;
  __device__ __forceinline__ static int limit(const FwdParamsV2&, int, int, int len_k) { return len_k; }
};

struct CausalMask {
  static constexpr bool kCausal = true;
  __device__ __forceinline__ static int limit(const FwdParamsV2& p, int i, int len_q, int len_k) {
    const int off = p.mask_bottom_right ? len_k - len_q : 0;
    return min(max(i + 1 + off, 0), len_k);
  }
};

/* The key blocks of kBN keys a tile of query rows [i_first, i_last] runs (>= 1). */
template <class Mask, int kBN>
__device__ __forceinline__ int tile_key_blocks(const FwdParamsV2& p, int i_last, int len_q, int len_k) {
  return max(1, (Mask::limit(p, i_last, len_q, len_k) + kBN - 1) / kBN);
}

/* The first of its blocks that holds a key some row of the tile does not see. */
template <class Mask, int kBN>
__device__ __forceinline__ int tile_first_masked(const FwdParamsV2& p, int i_first, int len_q, int len_k) {
  return Mask::limit(p, i_first, len_q, len_k) / kBN;
}

/* The staircase hooks of blocks_split_pv (stair.cuh's RowMaskStair has them): none, so no code. */
struct NoStair {
  static constexpr bool kStair = false;
  template <class SmemT>
  __device__ __forceinline__ void before_pv(SmemT&, int, int) const {}
  template <int NP>
  __device__ __forceinline__ void after_pv(float (&)[64], const uint32_t (&)[NP], int) const {}
};

/* The dense kernels' mask: the partial last block (b: mainloop_sm90.cuh's TileBlocks). */
struct TailMask : NoStair {
  template <class B>
  __device__ __forceinline__ bool masks(const B& b, int n) const {
    return n == b.nb - 1 && b.tail;
  }
  template <bool kFirst, class Softmax, class B, int N>
  __device__ __forceinline__ void begin(Softmax& sfm, float (&s)[N], float scale_log2, const B& b, int,
                                        float (&corr)[2], float (&ms)[2], float (&sum)[2]) const {
    sfm.template begin<kFirst, true>(s, scale_log2, b.last_valid, b.qc, corr, ms, sum);
  }
  template <class SmemT>
  __device__ __forceinline__ void before_last_pv(SmemT&, int) const {}
};

/* Named barriers of the consumer warpgroups that zero V rows (ids 3 and 4: split.cuh's): 5 when both
 * read the block (256 threads), 6 when the second has no row of the tile (128). Two ids, not one id
 * with two counts: a warpgroup with no row of tile A runs ahead into tile B, and its 256-thread wait
 * there must never meet the first warpgroup's 128-thread wait of tile A on the same barrier (mixed
 * counts on one barrier: the H200 stopped the launch with an illegal instruction, device call 2). */
constexpr int kBarZeroV = 5;
constexpr int kBarZeroV0 = 6;

/* The v2 kernels' mask: blocks >= from, row r of this thread at key limit lim[r] (tile keys). */
template <bool kZero>
struct RowMask : NoStair {
  int from;
  int lim[2];
  int zero_from; /* kZero: the last block's first V row no row of the tile sees (kBN: none) */
  int zero_threads, zero_tid; /* the consumer threads that read V (128 or 256) and this one's index */

  template <class B>
  __device__ __forceinline__ bool masks(const B&, int n) const {
    return n >= from;
  }
  template <bool kFirst, class Softmax, class B, int N>
  __device__ __forceinline__ void begin(Softmax& sfm, float (&s)[N], float scale_log2, const B& b, int n,
                                        float (&corr)[2], float (&ms)[2], float (&sum)[2]) const {
    constexpr int kBN = N * 2;
    sfm.template begin_rows<kFirst>(s, scale_log2, lim[0] - n * kBN, lim[1] - n * kBN, b.qc, corr, ms, sum);
  }
  /* After the last block's V has landed, before any wgmma reads it. */
  template <class SmemT>
  __device__ __forceinline__ void before_last_pv(SmemT& sm, int stage) const {
    if constexpr (kZero) {
      constexpr int kBN = sizeof(sm.v[0][0]) / (64 * sizeof(uint16_t));
      if (zero_from >= kBN) return; /* the same for every thread of both warpgroups */
      const int chunks = (kBN - zero_from) * 8; /* 16-byte chunks of one d-half's rows */
      const uint4 z = make_uint4(0u, 0u, 0u, 0u);
      for (int c = zero_tid; c < 2 * chunks; c += zero_threads) {
        const int half = c >= chunks;
        uint16_t* row0 = &sm.v[stage][half][zero_from * 64];
        reinterpret_cast<uint4*>(row0)[c - half * chunks] = z;
      }
      fence_proxy_async_smem(); /* the wgmmas read shared memory through the async proxy */
      named_bar_sync(zero_threads == 256 ? kBarZeroV : kBarZeroV0, zero_threads);
    }
  }
};

}  // namespace ra_cuda
