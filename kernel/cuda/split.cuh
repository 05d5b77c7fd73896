/*
 * split.cuh — the split over keys (flash-decoding) for grids that would leave SMs idle or a CTA
 * with a long serial key loop: a (batch, head, query block) becomes num_splits tiles, each over a
 * contiguous slice of the key blocks (tile_scheduler.cuh, mainloop_sm90.cuh's key_range).
 *
 * A split tile writes, instead of bf16 O, fp32 partials into the library's workspace:
 *   part_o [split][b*h][row][128]  the unnormalised accumulator, sum_j 2^((s_j - m_use) scale) V_j
 *   part_ml[split][b*h][row][2]    m: the raw row max over the split's keys (-Inf if none finite),
 *                                  l: the row sum of the same probabilities, reduced over the quad
 *                                  in the epilogue's fixed order
 * where m_use is m, or 0 while m = -Inf (softmax.cuh). merge_row combines the splits of a row in
 * split order (fixed: bit-deterministic) and rounds once, in the requested mode, exactly like the
 * one-pass epilogue. Where seqlen_q <= kMergeInKernelMaxRows (decode) it runs in the warpgroup that
 * finishes a query block's rows last: each split's warpgroup fences its partials and adds 1 to the
 * rows' counter in part_cnt; the one that sees num_splits - 1 merges and resets the counter to 0
 * for the next launch, so no second launch is needed. That code is in its own kernel instantiation
 * (attn_fwd_sm90's kMerge), so no other launch carries it. Otherwise (more rows than warps to merge
 * them at once, or -DRA_CUDA_MERGE_KERNEL=1) attn_merge_splits does, a second launch on the same
 * stream, one warp per row over the whole GPU. Either way:
 *   M = max_i m_i;  c_i = 2^((m_i - M) scale) (c_i = 1 where m_i = -Inf: its partials are 0, or NaN
 *   from a NaN score, and must stay so);  O = (sum_i c_i O_i) * (1 / sum_i c_i l_i).
 * Non-finite semantics are those of the one-pass kernel (docs/perf-notes.md, "NaN and Inf"): a NaN
 * score makes its split's l and O NaN, so the row ends NaN; a +Inf score gives m_i = M = +Inf and
 * c_i = 2^(Inf - Inf) = NaN; an all -Inf row has every c_i = 1 and l = 0, so 0 * (1/0) = NaN.
 * The fire drills act here as in the epilogue: round_pack applies RA_INJECT_ULP, and NONDET flips
 * bit 0 of O[0,0,0,0].
 * The tail split (-DRA_CUDA_TAIL_SPLIT, plan.h) cuts only the last partial round's tiles, in
 * its own kernel: store_tail_partial writes their partials compactly ([tail tile][part][128 rows]),
 * and the last part of a tile to finish merges them by the same formula into its registers
 * (tail_merge_if_last), which the ordinary epilogue then rounds and stores.
 */
#pragma once
#include "epilogue.cuh"
#include "params.cuh"
#include "ptx.cuh"
#include "smem.h"
#include "tile_scheduler.cuh"

namespace ra_cuda {

/* Row index of (split, batch * heads + head, row) in the partial buffers. */
__device__ __forceinline__ int64_t part_row(const FwdParams& p, int split, int bh, int row) {
  return ((int64_t)split * p.batch * p.heads + bh) * p.seqlen_q + row;
}

__device__ __forceinline__ void st_global_f2(float* ptr, float a, float b) {
  asm volatile("st.global.v2.f32 [%0], {%1, %2};" ::"l"(ptr), "f"(a), "f"(b) : "memory");
}

/* A thread's partial row sum reduced over its quad, in the order of row_inverses (epilogue.cuh). */
__device__ __forceinline__ float quad_row_sum(float l) {
  l += __shfl_xor_sync(0xffffffffu, l, 1);
  return l + __shfl_xor_sync(0xffffffffu, l, 2);
}

/* This thread's part of accumulator row r (0: its first row, 1: the one 8 below; softmax.cuh's
 * layout) at partial row pr: 16 float2 of O, and (max, sum) from the quad's first thread. */
__device__ __forceinline__ void store_partial_row(const FwdParams& p, const float (&acc)[64], int r, int64_t pr,
                                                  float m, float l, int qc) {
  float* po = p.part_o + pr * kHeadDim;
#pragma unroll
  for (int i = 0; i < 16; ++i) st_global_f2(po + 8 * i + qc, acc[4 * i + 2 * r], acc[4 * i + 2 * r + 1]);
  if (qc == 0) st_global_f2(p.part_ml + 2 * pr, m, l);
}

/* The consumer's epilogue for a split tile: this thread's rows row0 and row0 + 8, rows past
 * seqlen_q not written. */
template <class Softmax>
__device__ __forceinline__ void store_partial(const FwdParams& p, const float (&acc)[64], const Softmax& sfm,
                                              const TileCoord& t, int row0, int qc) {
  const int bh = t.b * p.heads + t.h;
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const float l = quad_row_sum(sfm.l[r]);
    const int row = row0 + 8 * r;
    if (row >= p.seqlen_q) continue;
    store_partial_row(p, acc, r, part_row(p, t.split, bh, row), sfm.m[r], l, qc);
  }
}

/* RA_CUDA_MERGE_KERNEL 0 (default): decode's splits merge in the kernel (merge_if_last, in the kMerge
 * instantiation); 1: always attn_merge_splits (the ablation, v5's default). docs/perf-notes.md v6
 * has both. kMergeInKernelMaxRows and kMergeRowsPerBlock: smem.h (the planner reads them too) */

/* One row of O from its splits' partials: one warp, 4 columns per lane. */
template <int kRound>
__device__ __forceinline__ void merge_row(const FwdParams& p, int bh, int row, int lane) {
  const float kNegInf = -__int_as_float(0x7f800000);
  float mx = kNegInf;
  for (int i = 0; i < p.num_splits; ++i) mx = fmaxf(mx, __ldcg(p.part_ml + 2 * part_row(p, i, bh, row)));
  float acc[4] = {0.f, 0.f, 0.f, 0.f};
  float l = 0.f;
  for (int i = 0; i < p.num_splits; ++i) {
    const int64_t pr = part_row(p, i, bh, row);
    const float2 ml = __ldcg(reinterpret_cast<const float2*>(p.part_ml) + pr);
    const float4 o = __ldcg(reinterpret_cast<const float4*>(p.part_o + pr * kHeadDim) + lane);
    const float c = ml.x == kNegInf ? 1.f : ex2((ml.x - mx) * p.scale_log2);
    l = fmaf(ml.y, c, l);
    acc[0] = fmaf(o.x, c, acc[0]);
    acc[1] = fmaf(o.y, c, acc[1]);
    acc[2] = fmaf(o.z, c, acc[2]);
    acc[3] = fmaf(o.w, c, acc[3]);
  }
  const float inv = 1.0f / l; /* l = 0 only for an all -Inf row: 0 * Inf = NaN, the reference's 0/0 */
  uint2 w;
  w.x = round_pack<kRound>(acc[0] * inv, acc[1] * inv);
  w.y = round_pack<kRound>(acc[2] * inv, acc[3] * inv);
  if (RA_INJECT_NONDET && p.nondet_flip && bh == 0 && row == 0 && lane == 0) w.x ^= 1u;
  const int b = bh / p.heads;
  const int h = bh - b * p.heads;
  uint16_t* out = p.o + (int64_t)b * p.o_stride[0] + (int64_t)h * p.o_stride[1] + (int64_t)row * p.o_stride[2];
  __stcg(reinterpret_cast<uint2*>(out) + lane, w);
}

/* After store_partial, in every thread of consumer warpgroup wg (tid: 0..127 in it): the last of
 * the query block's splits to get here merges the warpgroup's 64 rows. `flag`: one shared word per
 * warpgroup, accessed as shared (a generic access through the aligned base would leave the shared
 * window, ST.E). Named barrier 3 + wg (1 and 2 are ping-pong's). The release fence makes each
 * split's partials visible before its arrival is counted; the acquire fence makes the others'
 * visible to the last one (its loads go to L2: ld.global.cg). */
template <int kRound>
__device__ __forceinline__ void merge_if_last(const FwdParams& p, const TileCoord& t, int wg, int tid, int* flag) {
  asm volatile("fence.acq_rel.gpu;" ::: "memory");
  named_bar_sync(3 + wg, 128);
  const int bh = t.b * p.heads + t.h;
  const uint32_t flag_addr = smem_u32(flag);
  if (tid == 0) {
    int* cnt = p.part_cnt + ((int64_t)bh * p.num_m_blocks + t.m) * 2 + wg;
    const int last = atomicAdd(cnt, 1) == p.num_splits - 1;
    if (last) atomicExch(cnt, 0); /* every split has arrived: ready for the next launch */
    asm volatile("st.shared.u32 [%0], %1;" ::"r"(flag_addr), "r"(last) : "memory");
  }
  named_bar_sync(3 + wg, 128);
  int last;
  asm volatile("ld.shared.u32 %0, [%1];" : "=r"(last) : "r"(flag_addr) : "memory");
  if (!last) return;
  asm volatile("fence.acq_rel.gpu;" ::: "memory");
  const int row = t.m * 128 + wg * 64 + (tid >> 5); /* seqlen_q <= 4: rows 0-3, one per warp */
  if (row < p.seqlen_q) merge_row<kRound>(p, bh, row, tid & 31);
}

/* merge_if_last's arrival (the same fences, barriers and counter; it stays inline there: calling
 * this from merge_if_last changed the decode kernel's SASS, measured on the device as it is): true in every
 * thread of warpgroup wg iff its part is the last of `parts` to count itself on *counter(), which
 * it resets to 0. */
template <class Counter>
__device__ __forceinline__ bool last_to_arrive(int parts, int wg, int tid, int* flag, Counter counter) {
  asm volatile("fence.acq_rel.gpu;" ::: "memory");
  named_bar_sync(3 + wg, 128);
  const uint32_t flag_addr = smem_u32(flag);
  if (tid == 0) {
    int* cnt = counter();
    const int last = atomicAdd(cnt, 1) == parts - 1;
    if (last) atomicExch(cnt, 0); /* every part has arrived: ready for the next launch */
    asm volatile("st.shared.u32 [%0], %1;" ::"r"(flag_addr), "r"(last) : "memory");
  }
  named_bar_sync(3 + wg, 128);
  int last;
  asm volatile("ld.shared.u32 %0, [%1];" : "=r"(last) : "r"(flag_addr) : "memory");
  if (!last) return false;
  asm volatile("fence.acq_rel.gpu;" ::: "memory");
  return true;
}

/* RA_CUDA_TAIL_SPLIT (tile_scheduler.cuh's tail_coord): the partials of the tail's tiles only,
 * [tail tile][part][the tile's 128 rows], every row written (rows past seqlen_q too, so the merge
 * reads no unwritten word; the epilogue clips them). */
__device__ __forceinline__ int64_t tail_part_row(const FwdParams& p, int tail_tile, int part, int row) {
  return ((int64_t)tail_tile * p.tail_splits + part) * 128 + row;
}

/* store_partial's layout and order, at the tail's rows (all of them): r0 = this thread's row in the tile. */
template <class Softmax>
__device__ __forceinline__ void store_tail_partial(const FwdParams& p, const float (&acc)[64], const Softmax& sfm,
                                                   int tail_tile, int part, int r0, int qc) {
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const float l = quad_row_sum(sfm.l[r]);
    store_partial_row(p, acc, r, tail_part_row(p, tail_tile, part, r0 + 8 * r), sfm.m[r], l, qc);
  }
}

/* After store_tail_partial, in every thread of consumer warpgroup wg: false in all but the last of
 * the tile's parts to get here (part_cnt [tail tile][wg], reset by it); that one merges its 64 rows
 * as merge_row does (parts in index order, the same operations: bit-deterministic, and the same
 * bits as attn_merge_splits from these partials), each thread its own accumulator elements, into
 * acc, and sets sfm.l so that the epilogue's quad reduction (row_inverses) gives the merged row
 * sum exactly (the row's sum in the quad's first thread, +0 in the others; x + 0 = x for every x
 * but -0, and a row sum is never -0). The caller then stores O as for a whole tile: one rounding,
 * in the epilogue, with its drills. No wgmma is in flight here (the tail kernel is not kNQK). */
template <class Softmax>
__device__ __forceinline__ bool tail_merge_if_last(const FwdParams& p, float (&acc)[64], Softmax& sfm, int tail_tile,
                                                   int r0, int qc, int wg, int tid, int* flag) {
  if (!last_to_arrive(p.tail_splits, wg, tid, flag, [&] { return p.part_cnt + (int64_t)tail_tile * 2 + wg; }))
    return false;
  const float kNegInf = -__int_as_float(0x7f800000);
  float mx[2] = {kNegInf, kNegInf};
  for (int i = 0; i < p.tail_splits; ++i)
#pragma unroll
    for (int r = 0; r < 2; ++r) mx[r] = fmaxf(mx[r], __ldcg(p.part_ml + 2 * tail_part_row(p, tail_tile, i, r0 + 8 * r)));
  float l[2] = {0.f, 0.f};
#pragma unroll
  for (int j = 0; j < 64; ++j) acc[j] = 0.f;
  for (int i = 0; i < p.tail_splits; ++i) {
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const int64_t pr = tail_part_row(p, tail_tile, i, r0 + 8 * r);
      const float2 ml = __ldcg(reinterpret_cast<const float2*>(p.part_ml) + pr);
      const float c = ml.x == kNegInf ? 1.f : ex2((ml.x - mx[r]) * p.scale_log2);
      l[r] = fmaf(ml.y, c, l[r]);
      const float* po = p.part_o + pr * kHeadDim;
#pragma unroll
      for (int k = 0; k < 16; ++k) {
        const float2 o = __ldcg(reinterpret_cast<const float2*>(po + 8 * k + qc));
        acc[4 * k + 2 * r] = fmaf(o.x, c, acc[4 * k + 2 * r]);
        acc[4 * k + 2 * r + 1] = fmaf(o.y, c, acc[4 * k + 2 * r + 1]);
      }
    }
  }
#pragma unroll
  for (int r = 0; r < 2; ++r) sfm.l[r] = qc == 0 ? l[r] : 0.f;
  return true;
}

template <int kRound>
__global__ void __launch_bounds__(32 * kMergeRowsPerBlock) attn_merge_splits(const __grid_constant__ FwdParams p) {
  const int64_t gr = (int64_t)blockIdx.x * kMergeRowsPerBlock + (threadIdx.x >> 5);
  if (gr >= (int64_t)p.batch * p.heads * p.seqlen_q) return;
  const int bh = (int)(gr / p.seqlen_q);
  merge_row<kRound>(p, bh, (int)(gr - (int64_t)bh * p.seqlen_q), threadIdx.x & 31);
}

}  // namespace ra_cuda
