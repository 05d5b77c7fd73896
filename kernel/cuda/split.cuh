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
 */
#pragma once
#include "epilogue.cuh"
#include "params.cuh"
#include "ptx.cuh"
#include "tile_scheduler.cuh"

namespace ra_cuda {

/* Row index of (split, batch * heads + head, row) in the partial buffers. */
__device__ __forceinline__ int64_t part_row(const FwdParams& p, int split, int bh, int row) {
  return ((int64_t)split * p.batch * p.heads + bh) * p.seqlen_q + row;
}

__device__ __forceinline__ void st_global_f2(float* ptr, float a, float b) {
  asm volatile("st.global.v2.f32 [%0], {%1, %2};" ::"l"(ptr), "f"(a), "f"(b) : "memory");
}

/* The consumer's epilogue for a split tile: this thread's rows row0 and row0 + 8 (accumulator
 * layout of softmax.cuh), rows past seqlen_q not written. */
template <class Softmax>
__device__ __forceinline__ void store_partial(const FwdParams& p, const float (&acc)[64], const Softmax& sfm,
                                              const TileCoord& t, int row0, int qc) {
  const int bh = t.b * p.heads + t.h;
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    float l = sfm.l[r];
    l += __shfl_xor_sync(0xffffffffu, l, 1); /* the order of row_inverses (epilogue.cuh) */
    l += __shfl_xor_sync(0xffffffffu, l, 2);
    const int row = row0 + 8 * r;
    if (row >= p.seqlen_q) continue;
    const int64_t pr = part_row(p, t.split, bh, row);
    float* po = p.part_o + pr * kHeadDim;
#pragma unroll
    for (int i = 0; i < 16; ++i) st_global_f2(po + 8 * i + qc, acc[4 * i + 2 * r], acc[4 * i + 2 * r + 1]);
    if (qc == 0) st_global_f2(p.part_ml + 2 * pr, sfm.m[r], l);
  }
}

/* 0 (default): decode's splits merge in the kernel (merge_if_last, in the kMerge instantiation);
 * 1: always attn_merge_splits (the ablation, v5's default). docs/perf-notes.md v6 has both. */
#ifndef RA_CUDA_MERGE_KERNEL
#define RA_CUDA_MERGE_KERNEL 0
#endif
/* Rows a warpgroup's 4 warps merge at the end of its last split, one each: merge_row's two rounds of
 * L2 latency (~1.5 us) are paid once, not per row. */
constexpr int kMergeInKernelMaxRows = 4;

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

constexpr int kMergeRowsPerBlock = 4; /* attn_merge_splits: one warp per row */

template <int kRound>
__global__ void __launch_bounds__(32 * kMergeRowsPerBlock) attn_merge_splits(const __grid_constant__ FwdParams p) {
  const int64_t gr = (int64_t)blockIdx.x * kMergeRowsPerBlock + (threadIdx.x >> 5);
  if (gr >= (int64_t)p.batch * p.heads * p.seqlen_q) return;
  const int bh = (int)(gr / p.seqlen_q);
  merge_row<kRound>(p, bh, (int)(gr - (int64_t)bh * p.seqlen_q), threadIdx.x & 31);
}

}  // namespace ra_cuda
