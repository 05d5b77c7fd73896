/*
 * attention_gfx942.hip — O = softmax(scale * Q K^T) V, bf16 in/out, head_dim 128, for AMD MI300X
 * (gfx942, wave64). One translation unit: device parts in kernel/hip/parts/, host part at the end.
 *
 * Pipeline of one block (8 waves = two groups of 4, 256 query rows, 32 per wave; step 13,
 * parts/schedule.h):
 *
 *   HBM ──Q (16 B loads, once)─────────────────────────────────────► VGPR qf[2][4] (B operands of S^T)
 *   HBM ──K tile j+1: buffer_load_dword ... lds (a 256 B row each)──► LDS K buf[(j+1)&1], row-major
 *   HBM ──V tile: 4 B loads──► VGPR ──v_perm──► ds_write_b128 ──────► LDS V^T buf, both XOR-swizzled
 *   M phase (s_setprio 1), the copies issued between its MFMAs, LDS fragment reads 8 ahead:
 *          O^T += V^T(j-1) P^T(j-1)   64 x v_mfma_f32_16x16x16_bf16, fp32 VGPR
 *          S^T  = K(j) Q^T            64 x v_mfma_f32_16x16x16_bf16, fp32 VGPR
 *   X phase: mask keys >= Sk, online softmax (row max over 4 lanes), P -> bf16 (the PV B-operand
 *          layout), the O rescale where a row max rose, the V^T store, the next M phase's first reads
 *   The groups alternate: on every SIMD one wave is in its M phase while the other is in its X phase;
 *   one s_barrier a phase (double buffering: tile j+1 is written while nobody reads it).
 *   epilogue: row sum over 4 lanes, O / l (IEEE div), bf16 rounding R (rtne/rtna/rtz), 8 B stores
 *
 * Wave groups: waves 0-3 own rows 0-127 of the block, waves 4-7 rows 128-255; all 8 waves share the
 * tile copy (each wave 8 K rows and 8 V rows a tile, 32 B of each a thread). A wave whose 32 rows all
 * lie past Sq skips the MFMAs but still copies and meets the barriers.
 * No atomics: every output element is produced by one lane in a fixed order, so results are
 * bit-identical across launches. Step 10 (RA_HIP_TAIL_SPLIT): when the grid's last round would leave
 * CUs idle, its q-blocks run as key-range parts (fp32 partials in a stream-ordered workspace) and a
 * third launch merges each block's parts in index order and rounds once. No scratch (checked by the
 * compile test).
 * Template constants: R = rounding mode (0 rtne, 1 rtna, 2 rtz), L = layout (kPacked, kStrided),
 * chosen by ra_variant::dispatch() (../common/variant.h, shared with the CUDA backend).
 */
#include "parts/compat.h"
#include "parts/flags.h"

/* Step 13: no packed-F32 VALU (v_pk_{add,fma,mul}_f32) in the device code: the ping-pong's softmax
 * issues beside the other wave's MFMAs, and one reading of LLVM's co-issue rule holds packed-F32 ops
 * behind every MFMA of the SIMD (docs/hip-gfx942.md); the SLP vectorizer also paired the softmax's
 * scalar ops into them, and their register pairs did not coalesce with the MFMA accumulator quads
 * (measured: 59 VGPRs spilled with them, none without). A function attribute would stop the
 * always-inline parts from inlining (callee features must be the caller's), so it is set on every
 * device function of the translation unit (the device pass only: the host pass defines __AMDGCN__ too). */
#if defined(__HIP_DEVICE_COMPILE__)
#pragma clang attribute push(__attribute__((target("no-packed-fp32-ops"))), apply_to = function)
#define RA_HIP_NO_PK_F32 1
#endif

#include "parts/dispatch.h"
#include "parts/epilogue.h"
#include "parts/layout.h"
#include "parts/mainloop.h"
#include "parts/mfma.h"
#include "parts/schedule.h"
#include "parts/softmax.h"
#include "parts/stair.h"
#include "parts/waves.h"

namespace ra_gfx942 {

/* kSplit (step 10): the block is tail q-block wg_end + y, it runs key tiles [x*split_tiles, ...) only
 * and writes an fp32 partial (merge_body combines them); otherwise the whole key range, rounded. */
/* Step 10: a split part's rows as fp32 records (dispatch.h, kSplitRecord): O^T fragment lane
 * (li, g) holds row li's dims 16dt + 4g .. +3, one 16-byte store each; lane group 0 adds q and l.
 * Rows past seqlen_q are written too (their records exist; the merge never reads them). */
__device__ __forceinline__ void store_partial(const f32x4 (&o)[kMTiles][kDTiles], const RowState (&st)[kMTiles],
                                              const KernelArgs& a, int lane, int li, int g, int w) {
  typedef float f32x2 __attribute__((ext_vector_type(2)));
  const uint32_t part = __builtin_amdgcn_workgroup_id_y() * a.split_parts + __builtin_amdgcn_workgroup_id_x();
  float* base = a.ws + (uint64_t)part * (uint64_t)(kBlockQ * kSplitRecord);
#pragma unroll
  for (int mt = 0; mt < kMTiles; ++mt) {
    const float l_row = row_sum(st[mt].l, lane);
    float* rec = base + (w * kRowsPerWave + 16 * mt + li) * kSplitRecord;
#pragma unroll
    for (int dt = 0; dt < kDTiles; ++dt) *reinterpret_cast<f32x4*>(rec + 16 * dt + 4 * g) = o[mt][dt];
    const float q = st[mt].q; /* the offset every p of the row was taken against */
    if (g == 0) *reinterpret_cast<f32x2*>(rec + kHeadDim) = f32x2{st[mt].m == neg_inf() ? neg_inf() : q, l_row};
  }
}

/* Step 10's merge: one thread per (row, 4 dims) of a tail q-block, the parts in index order (so the
 * bits do not depend on timing): Q = max q_p, O = sum o_p 2^(q_p - Q), l = sum l_p 2^(q_p - Q), then
 * O / l rounded once by R, as the dense epilogue does. Grid (kBlockQ / 16, tail), 512 threads. */
template <int R, int L, class Lse>
__device__ __forceinline__ void merge_rows(const KernelArgs& a, uint32_t bh, uint32_t qblock, const Lse& lse) {
#pragma clang fp contract(off)
  const int t = (int)__builtin_amdgcn_workitem_id_x();
  const uint32_t rl = __builtin_amdgcn_workgroup_id_x() * 16u + (uint32_t)(t >> 5);
  const uint32_t row = qblock * (uint32_t)kBlockQ + rl;
  if (row >= a.seqlen_q) return;
  const int c = t & 31;
  const uint32_t b = bh / a.heads;
  const uint32_t h = bh - b * a.heads;
  uint16_t* ob = a.o + (int64_t)b * a.o_stride[0] + (int64_t)h * a.o_stride[1];
  const uint64_t stride = (uint64_t)(kBlockQ * kSplitRecord);
  const float* rec = a.ws + (uint64_t)__builtin_amdgcn_workgroup_id_y() * a.split_parts * stride + rl * kSplitRecord;
  float qm = neg_inf();
  for (uint32_t p = 0; p < a.split_parts; ++p) qm = __builtin_fmaxf(qm, rec[p * stride + kHeadDim]);
  const bool no_max = qm == neg_inf();
  if (no_max) qm = 0.0f; /* every key -Inf: l = 0 and 0/0 = NaN, as the dense kernel gives */
  float l = 0.0f;
  f32x4 o = {0.f, 0.f, 0.f, 0.f};
  for (uint32_t p = 0; p < a.split_parts; ++p) {
    const float* r = rec + p * stride;
    const float wgt = __builtin_amdgcn_exp2f(r[kHeadDim] - qm);
    l = __builtin_fmaf(r[kHeadDim + 1], wgt, l);
    const f32x4 x = *reinterpret_cast<const f32x4*>(r + 4 * c);
    o.x = __builtin_fmaf(x.x, wgt, o.x);
    o.y = __builtin_fmaf(x.y, wgt, o.y);
    o.z = __builtin_fmaf(x.z, wgt, o.z);
    o.w = __builtin_fmaf(x.w, wgt, o.w);
  }
  uint16_t h0 = round_bf16<R>(o.x / l);
  const uint16_t h1 = round_bf16<R>(o.y / l);
  const uint16_t h2 = round_bf16<R>(o.z / l);
  const uint16_t h3 = round_bf16<R>(o.w / l);
#if RA_INJECT_NONDET
  if (a.flip_lsb != 0u && bh == 0u && row == 0u && c == 0) h0 ^= 1u;
#endif
  const u32x2 packed = {(unsigned int)h0 | ((unsigned int)h1 << 16), (unsigned int)h2 | ((unsigned int)h3 << 16)};
  *reinterpret_cast<u32x2*>(ob + row_offset<L>(row, a.o_stride[2]) + 4 * c) = packed;
  /* the v2 kernel's LSE rule on the merged offset and sum: a row whose max is -Inf gives NaN */
  if (c == 0) lse(b, h, row, no_max ? __builtin_nanf("") : (qm + __builtin_amdgcn_logf(l)) * 0.693147180559945f);
}

template <int R, int L>
__device__ __forceinline__ void merge_body(const KernelArgs& a) {
  const uint32_t lin = a.wg_end + __builtin_amdgcn_workgroup_id_y();
  const uint32_t bh = lin / a.qblocks;
  merge_rows<R, L>(a, bh, lin - bh * a.qblocks, [](uint32_t, uint32_t, uint32_t, float) {});
}

/* The v2 kernels' tail split (issue 40; parts/plan.h, gfx942_v2_split: unmasked fixed-length calls,
 * GQA prefill and the LSE): the same merge over the v2 grid's numbering of q-blocks (heaviest first,
 * attention_v2_body), and the LSE from the merged offset and sum, (Q + log2 l) ln 2, as the unsplit
 * v2 kernel takes it from its own. */
template <int R, int L>
__device__ __forceinline__ void merge_v2_body(const KernelArgsV2& x) {
  const uint32_t lin = x.a.wg_end + __builtin_amdgcn_workgroup_id_y();
  const uint32_t bh = lin % x.bh;
  merge_rows<R, L>(x.a, bh, x.a.qblocks - 1u - lin / x.bh, [&](uint32_t b, uint32_t h, uint32_t row, float v) {
    if (x.lse != nullptr) x.lse[b * x.lse_bstride + h * x.lse_hstride + row] = v;
  });
}

template <int R, int L, bool kSplit = false>
__device__ __forceinline__ void attention_body(const KernelArgs& a) {
  static_assert(kMTiles == 2, "score_tile / pv_tile fences are written for two query tiles per wave");
  static_assert(kLdsBytes <= 65536, "gfx942 gives a workgroup at most 64 KiB of LDS");
  __shared__ u32x4 lds_k[2][kBlockK * kKGranules];
  __shared__ u32x4 lds_vt[2][kHeadDim * kVGranules];

  const int t = (int)__builtin_amdgcn_workitem_id_x();
  const int lane = t & 63;
  const int li = lane & 15;
  const int g = lane >> 4;
  const int w = __builtin_amdgcn_readfirstlane(t >> 6); /* wave-uniform, so branches on it stay scalar */

  const uint32_t n_all = (a.seqlen_k + (uint32_t)kBlockK - 1u) / (uint32_t)kBlockK;
  uint32_t bh, qblock, tile0 = 0u, n_tiles = n_all;
  if constexpr (kSplit) {
    const uint32_t lin = a.wg_end + __builtin_amdgcn_workgroup_id_y();
    bh = lin / a.qblocks;
    qblock = lin - bh * a.qblocks;
    tile0 = __builtin_amdgcn_workgroup_id_x() * a.split_tiles;
    n_tiles = n_all - tile0 < a.split_tiles ? n_all - tile0 : a.split_tiles;
  } else {
    bh = __builtin_amdgcn_workgroup_id_y() + a.bh_offset;
    qblock = __builtin_amdgcn_workgroup_id_x();
    /* The tail's q-blocks are the split launch's: the dense grid's last row of blocks returns here.
     * 32 bits (a scalar compare): the planner refuses calls of 2^32 - 1 or more q-blocks. */
    if (bh * a.qblocks + qblock >= a.wg_end) return;
  }
  const uint32_t b = bh / a.heads;
  const uint32_t h = bh - b * a.heads;
  const uint16_t* qb = a.q + (int64_t)b * a.q_stride[0] + (int64_t)h * a.q_stride[1];
  const uint16_t* kb = a.k + (int64_t)b * a.k_stride[0] + (int64_t)h * a.k_stride[1];
  const uint16_t* vb = a.v + (int64_t)b * a.v_stride[0] + (int64_t)h * a.v_stride[1];
  uint16_t* ob = a.o + (int64_t)b * a.o_stride[0] + (int64_t)h * a.o_stride[1];

  const uint32_t row0 = qblock * (uint32_t)kBlockQ + (uint32_t)(w * kRowsPerWave);
  const bool active = row0 < a.seqlen_q;

  u32x4 qf[kMTiles][4];
  load_q_fragments<L>(qf, qb, a.q_stride[2], row0, active ? a.seqlen_q : 0u, li, g);

  f32x4 o[kMTiles][kDTiles];
  RowState st[kMTiles];
#pragma unroll
  for (int mt = 0; mt < kMTiles; ++mt) {
    st[mt].m = neg_inf();
    st[mt].l = 0.0f;
    st[mt].q = 0.0f;
#pragma unroll
    for (int dt = 0; dt < kDTiles; ++dt) o[mt][dt] = f32x4{0.f, 0.f, 0.f, 0.f};
  }

  const KeyLoop c{a, kb, vb, tile0, n_tiles, active, w, lane, li, g};
  if (kv_rows_fit<L>(a)) {
    if (active)
      key_loop<L, true, true>(c, lds_k, lds_vt, qf, o, st);
    else
      key_loop<L, false, true>(c, lds_k, lds_vt, qf, o, st);
  } else {
    if (active)
      key_loop<L, true, false>(c, lds_k, lds_vt, qf, o, st);
    else
      key_loop<L, false, false>(c, lds_k, lds_vt, qf, o, st);
  }

  if constexpr (kSplit) {
    if (active) store_partial(o, st, a, lane, li, g, w);
    return;
  }
  if (active) {
#pragma unroll
    for (int mt = 0; mt < kMTiles; ++mt) {
      const float l_row = row_sum(st[mt].l, lane);
      const uint32_t row = row0 + 16u * (uint32_t)mt + (uint32_t)li;
      const bool flip_first = a.flip_lsb != 0u && bh == 0u && row == 0u && g == 0;
      store_output<R, L>(o[mt], l_row, ob, a.o_stride[2], row, a.seqlen_q, g, flip_first);
    }
  }
}

/* Issue 40's decode kernel (parts/waves.h): a q-block whose rows fit one wave (the planner sends
 * calls of seqlen_q <= kRowsPerWave here: one q-block a head), its keys spread over the waves, wave w
 * rows 16 (w / 4) .. +15 against score key tile w % 4 of every tile; the four partials of a query
 * tile merged in LDS in wave order, then the dense epilogue, or (kSplit) step 10's fp32 record of
 * the block's key range part, which merge_body combines as the dense split's. */
template <int R, int L, bool kSplit = false>
__device__ __forceinline__ void waves_body(const KernelArgs& a) {
  static_assert(kLdsBytes <= 65536, "gfx942 gives a workgroup at most 64 KiB of LDS");
  static_assert(kRowsPerWave == 2 * 16 && kWaves == 2 * 4, "two query tiles of four waves' key shares");
  __shared__ u32x4 lds_k[2][kBlockK * kKGranules];
  __shared__ u32x4 lds_vt[2][kHeadDim * kVGranules];

  const int t = (int)__builtin_amdgcn_workitem_id_x();
  const int lane = t & 63;
  const int li = lane & 15;
  const int g = lane >> 4;
  const int w = __builtin_amdgcn_readfirstlane(t >> 6);

  const uint32_t n_all = (a.seqlen_k + (uint32_t)kBlockK - 1u) / (uint32_t)kBlockK;
  uint32_t bh, qblock, tile0 = 0u, n_tiles = n_all;
  if constexpr (kSplit) {
    const uint32_t lin = a.wg_end + __builtin_amdgcn_workgroup_id_y();
    bh = lin / a.qblocks;
    qblock = lin - bh * a.qblocks;
    tile0 = __builtin_amdgcn_workgroup_id_x() * a.split_tiles;
    n_tiles = n_all - tile0 < a.split_tiles ? n_all - tile0 : a.split_tiles;
  } else {
    bh = __builtin_amdgcn_workgroup_id_y() + a.bh_offset;
    qblock = __builtin_amdgcn_workgroup_id_x();
    if (bh * a.qblocks + qblock >= a.wg_end) return;
  }
  const uint32_t b = bh / a.heads;
  const uint32_t h = bh - b * a.heads;
  const uint16_t* qb = a.q + (int64_t)b * a.q_stride[0] + (int64_t)h * a.q_stride[1];
  const uint16_t* kb = a.k + (int64_t)b * a.k_stride[0] + (int64_t)h * a.k_stride[1];
  const uint16_t* vb = a.v + (int64_t)b * a.v_stride[0] + (int64_t)h * a.v_stride[1];
  uint16_t* ob = a.o + (int64_t)b * a.o_stride[0] + (int64_t)h * a.o_stride[1];

  const int mt = w >> 2, kt = w & 3;
  const uint32_t row0 = qblock * (uint32_t)kBlockQ + 16u * (uint32_t)mt;
  const bool active = row0 < a.seqlen_q;
  const uint32_t row = row0 + (uint32_t)li;

  u32x4 qf[4]; /* dims 32p + 8g .. +7 of the lane's row (load_q_fragments' layout, one query tile) */
  {
    const bool ok = active && row < a.seqlen_q;
    const uint16_t* src = qb + row_offset<L>(ok ? row : 0u, a.q_stride[2]) + 8 * g;
#pragma unroll
    for (int p = 0; p < 4; ++p) {
      u32x4 x = {0u, 0u, 0u, 0u};
      if (ok) x = *reinterpret_cast<const u32x4*>(src + 32 * p);
      qf[p] = x;
    }
  }
  f32x4 o[kDTiles];
#pragma unroll
  for (int dt = 0; dt < kDTiles; ++dt) o[dt] = f32x4{0.f, 0.f, 0.f, 0.f};
  RowState st{neg_inf(), 0.0f, 0.0f};

  const KeyLoop c{a, kb, vb, tile0, n_tiles, active, w, lane, li, g};
  if (kv_rows_fit<L>(a)) {
    if (active)
      key_loop_w<L, true, true>(c, lds_k, lds_vt, qf, o, st, kt);
    else
      key_loop_w<L, false, true>(c, lds_k, lds_vt, qf, o, st, kt);
  } else {
    if (active)
      key_loop_w<L, true, false>(c, lds_k, lds_vt, qf, o, st, kt);
    else
      key_loop_w<L, false, false>(c, lds_k, lds_vt, qf, o, st, kt);
  }
  const WavesMerged m = merge_waves(o, st, active, kt, lane, mt == 0 ? &lds_k[0][0] : &lds_vt[0][0]);
  if (!active || kt != 0) return;
  if constexpr (kSplit) { /* store_partial's record layout, rows 16 mt + li of the block */
    typedef float f32x2 __attribute__((ext_vector_type(2)));
    const uint32_t part = __builtin_amdgcn_workgroup_id_y() * a.split_parts + __builtin_amdgcn_workgroup_id_x();
    float* rec = a.ws + (uint64_t)part * (uint64_t)(kBlockQ * kSplitRecord) + (16 * mt + li) * kSplitRecord;
#pragma unroll
    for (int dt = 0; dt < kDTiles; ++dt) *reinterpret_cast<f32x4*>(rec + 16 * dt + 4 * g) = o[dt];
    if (g == 0) *reinterpret_cast<f32x2*>(rec + kHeadDim) = f32x2{m.q, m.l};
  } else {
    const bool flip_first = a.flip_lsb != 0u && bh == 0u && row == 0u && g == 0;
    store_output<R, L>(o, m.l, ob, a.o_stride[2], row, a.seqlen_q, g, flip_first);
  }
}

/* ABI v2 (issue 40): GQA, causal masks, varlen and the LSE, on the same key loop. The grid's
 * (ceil(longest Sq / 256), B*H) workgroups take the (q-block, sequence and head) pairs heaviest q-block
 * first (KernelArgsV2 says which rows and keys a sequence has). A causal
 * block runs only the key tiles below its last row's limit (the loop's seqlen_k is that limit, so the
 * copies read zeros past it and the tail mask covers it), and masks the diagonal row by row
 * (RowLimit). A row that sees no key writes +0 and LSE -inf, as FlashAttention; a block none of whose
 * rows sees a key runs no key loop. A block whose diagonal V (keys some of its rows see, others not)
 * holds a non-finite element runs the safe key loop (parts/stair.h). An unmasked fixed-length call's
 * last partial round runs split (kSplit, merge_v2_body: the dense kernel's step 10 on this numbering). */
template <int R, int L, bool kSplit = false>
__device__ __forceinline__ void attention_v2_body(const KernelArgsV2& x) {
  static_assert(kLdsBytes <= 65536, "gfx942 gives a workgroup at most 64 KiB of LDS");
  __shared__ u32x4 lds_k[2][kBlockK * kKGranules];
  __shared__ u32x4 lds_vt[2][kHeadDim * kVGranules];

  const int t = (int)__builtin_amdgcn_workitem_id_x();
  const int lane = t & 63;
  const int li = lane & 15;
  const int g = lane >> 4;
  const int w = __builtin_amdgcn_readfirstlane(t >> 6);

  /* Heaviest first: a causal q-block's key range grows with its index, and workgroups are dispatched
   * in linear order, so the linear id is dealt out from the last q-block down, every (sequence, head)
   * at one q-block before the next (a longest-first order over the CUs' rounds). A bijection of the
   * grid: which workgroup computes a block changes, no block's arithmetic does. */
  /* kSplit (the v2 tail split, plan.h's gfx942_v2_split): the block is q-block wg_end + y of the same
   * numbering, running key tiles [x * split_tiles, ...) only, into an fp32 partial (merge_v2_body) */
  const uint32_t lin = kSplit ? x.a.wg_end + __builtin_amdgcn_workgroup_id_y()
                              : (__builtin_amdgcn_workgroup_id_y() + x.a.bh_offset) * x.a.qblocks +
                                    __builtin_amdgcn_workgroup_id_x();
  const uint32_t bh = lin % x.bh;
  const uint32_t qblock = x.a.qblocks - 1u - lin / x.bh;
  const uint32_t b = bh / x.a.heads;
  const uint32_t h = bh - b * x.a.heads;
  uint32_t q0 = 0u, k0 = 0u, len_q = x.a.seqlen_q, len_k = x.a.seqlen_k;
  if (x.cu_q != nullptr) { /* varlen: sequence b's rows (scalar loads: b is the workgroup's) */
    q0 = (uint32_t)x.cu_q[b];
    len_q = (uint32_t)x.cu_q[b + 1] - q0;
    k0 = (uint32_t)x.cu_k[b];
    len_k = (uint32_t)x.cu_k[b + 1] - k0;
  }
  if (qblock * (uint32_t)kBlockQ >= len_q) return; /* past this sequence's rows (grid x is the longest's) */
  /* row i sees keys [0, clamp(i + 1 + off, 0, len_k)); the planner keeps lengths below 2^30, so every
   * limit below is a 32-bit int */
  const int off = x.mask == kMaskTopLeft ? 0 : x.mask == kMaskBottomRight ? (int)len_k - (int)len_q : (int)len_k;
  const uint32_t r_end = len_q - qblock * (uint32_t)kBlockQ < (uint32_t)kBlockQ ? len_q : (qblock + 1u) * (uint32_t)kBlockQ;
  const int e = (int)r_end + off; /* the block's last row's limit */
  const uint32_t lim_blk = e <= 0 ? 0u : (uint32_t)e < len_k ? (uint32_t)e : len_k;

  KernelArgs a = x.a;
  a.seqlen_q = len_q;
  a.seqlen_k = lim_blk; /* the key loop's keys: no tile past the block's last visible key */
  const uint32_t hk = h / x.group;
  const uint16_t* qb = a.q + (int64_t)b * a.q_stride[0] + (int64_t)h * a.q_stride[1] + (int64_t)q0 * a.q_stride[2];
  const uint16_t* kb = a.k + (int64_t)b * a.k_stride[0] + (int64_t)hk * a.k_stride[1] + (int64_t)k0 * a.k_stride[2];
  const uint16_t* vb = a.v + (int64_t)b * a.v_stride[0] + (int64_t)hk * a.v_stride[1] + (int64_t)k0 * a.v_stride[2];
  uint16_t* ob = a.o + (int64_t)b * a.o_stride[0] + (int64_t)h * a.o_stride[1] + (int64_t)q0 * a.o_stride[2];

  const uint32_t row0 = qblock * (uint32_t)kBlockQ + (uint32_t)(w * kRowsPerWave);
  const bool active = row0 < len_q;

  u32x4 qf[kMTiles][4];
  load_q_fragments<L>(qf, qb, a.q_stride[2], row0, active ? len_q : 0u, li, g);

  f32x4 o[kMTiles][kDTiles];
  RowState st[kMTiles];
#pragma unroll
  for (int mt = 0; mt < kMTiles; ++mt) {
    st[mt].m = neg_inf();
    st[mt].l = 0.0f;
    st[mt].q = 0.0f;
#pragma unroll
    for (int dt = 0; dt < kDTiles; ++dt) o[mt][dt] = f32x4{0.f, 0.f, 0.f, 0.f};
  }

  if (lim_blk > 0u) {
    /* the wave's first row's limit (its rows' limits minus 8g stay far inside int's range) */
    const RowLimit rows{(int)row0 + 1 + off};
    const uint32_t n_all = (lim_blk + (uint32_t)kBlockK - 1u) / (uint32_t)kBlockK;
    uint32_t tile0 = 0u, n_tiles = n_all;
    if constexpr (kSplit) { /* the planner splits unmasked calls only: every part's tiles lie below lim_blk */
      tile0 = __builtin_amdgcn_workgroup_id_x() * x.a.split_tiles;
      n_tiles = n_all - tile0 < x.a.split_tiles ? n_all - tile0 : x.a.split_tiles;
    }
    const KeyLoop c{a, kb, vb, tile0, n_tiles, active, w, lane, li, g};
    /* keys at or past the block's first row's limit are seen by some of its rows only (the staircase,
     * parts/stair.h): a non-finite V there takes the safe key loop (the general copies: kFits off) */
    const int lim_first = (int)(qblock * (uint32_t)kBlockQ) + 1 + off;
    const uint32_t stair0 = lim_first <= 0 ? 0u : (uint32_t)lim_first;
    /* K of the loop's first tile, so its latency and the look's overlap; the look's barrier (or this
     * one) publishes it */
    if (kv_rows_fit<L>(a))
      issue_k0<L, true>(a, uniform_ptr(kb), w, lane, lds_addr(lds_k[0]), c.key0(0u));
    else
      issue_k0<L, false>(a, uniform_ptr(kb), w, lane, lds_addr(lds_k[0]), c.key0(0u));
    bool nonfinite = false;
    /* a split part is an unmasked call's (no staircase): the safe loop is not compiled into it */
    if (!kSplit && stair0 < lim_blk) {
      nonfinite = v_rows_nonfinite<L>(a, vb, stair0, lim_blk, t, w, lane, lds_vt[1]);
    } else {
      wait_vmcnt0();
      phase_barrier();
    }
    if (!kSplit && nonfinite) {
      const RowLimitSafe safe{rows.lim0, stair0};
      if (active)
        key_loop<L, true, false>(c, lds_k, lds_vt, qf, o, st, safe);
      else
        key_loop<L, false, false>(c, lds_k, lds_vt, qf, o, st, safe);
    } else if (kv_rows_fit<L>(a)) {
      if (active)
        key_loop<L, true, true>(c, lds_k, lds_vt, qf, o, st, rows);
      else
        key_loop<L, false, true>(c, lds_k, lds_vt, qf, o, st, rows);
    } else {
      if (active)
        key_loop<L, true, false>(c, lds_k, lds_vt, qf, o, st, rows);
      else
        key_loop<L, false, false>(c, lds_k, lds_vt, qf, o, st, rows);
    }
  }

  if constexpr (kSplit) {
    if (active) store_partial(o, st, x.a, lane, li, g, w);
    return;
  }
  if (active) {
#pragma unroll
    for (int mt = 0; mt < kMTiles; ++mt) {
      const float l_row = row_sum(st[mt].l, lane);
      const uint32_t row = row0 + 16u * (uint32_t)mt + (uint32_t)li;
      const bool none = len_k == 0u || (int)row + 1 + off <= 0; /* no visible key: +0, LSE -inf */
      if (none) {
#pragma unroll
        for (int dt = 0; dt < kDTiles; ++dt) o[mt][dt] = f32x4{0.f, 0.f, 0.f, 0.f};
      }
      const bool flip_first = a.flip_lsb != 0u && bh == 0u && row == 0u && g == 0;
      store_output<R, L>(o[mt], none ? 1.0f : l_row, ob, a.o_stride[2], row, len_q, g, flip_first);
      if (x.lse != nullptr && g == 0 && row < len_q) {
        /* ln sum_j exp(scale s_j) = (q + log2 l) ln 2, q the row's exponent offset (softmax.h); a row
         * whose max is -Inf (every visible score -Inf) gives NaN, as the reference */
        const float v = (st[mt].q + __builtin_amdgcn_logf(l_row)) * 0.693147180559945f;
        x.lse[b * x.lse_bstride + h * x.lse_hstride + q0 + row] =
            none ? neg_inf() : st[mt].m == neg_inf() ? __builtin_nanf("") : v;
      }
    }
  }
}

}  // namespace ra_gfx942

/* The six variants as named kernels: <rounding>_<layout>. 512 threads, exactly. */
#define RA_GFX942_KERNEL(NAME, R, L)                                                                 \
  extern "C" __global__ __attribute__((amdgpu_flat_work_group_size(512, 512))) void NAME(           \
      ra_gfx942::KernelArgs a) {                                                                      \
    ra_gfx942::attention_body<R, L>(a);                                                               \
  }

RA_GFX942_KERNEL(ra_attn_fwd_gfx942_rtne_packed, 0, ra_gfx942::kPacked)
RA_GFX942_KERNEL(ra_attn_fwd_gfx942_rtna_packed, 1, ra_gfx942::kPacked)
RA_GFX942_KERNEL(ra_attn_fwd_gfx942_rtz_packed, 2, ra_gfx942::kPacked)
RA_GFX942_KERNEL(ra_attn_fwd_gfx942_rtne_strided, 0, ra_gfx942::kStrided)
RA_GFX942_KERNEL(ra_attn_fwd_gfx942_rtna_strided, 1, ra_gfx942::kStrided)
RA_GFX942_KERNEL(ra_attn_fwd_gfx942_rtz_strided, 2, ra_gfx942::kStrided)

/* ABI v2's six variants (parts/plan.h launches them for a call with GQA, a mask, varlen or an LSE). */
#define RA_GFX942_V2_KERNEL(NAME, R, L)                                                              \
  extern "C" __global__ __attribute__((amdgpu_flat_work_group_size(512, 512))) void NAME(           \
      ra_gfx942::KernelArgsV2 a) {                                                                    \
    ra_gfx942::attention_v2_body<R, L>(a);                                                            \
  }
RA_GFX942_V2_KERNEL(ra_attn_v2_gfx942_rtne_packed, 0, ra_gfx942::kPacked)
RA_GFX942_V2_KERNEL(ra_attn_v2_gfx942_rtna_packed, 1, ra_gfx942::kPacked)
RA_GFX942_V2_KERNEL(ra_attn_v2_gfx942_rtz_packed, 2, ra_gfx942::kPacked)
RA_GFX942_V2_KERNEL(ra_attn_v2_gfx942_rtne_strided, 0, ra_gfx942::kStrided)
RA_GFX942_V2_KERNEL(ra_attn_v2_gfx942_rtna_strided, 1, ra_gfx942::kStrided)
RA_GFX942_V2_KERNEL(ra_attn_v2_gfx942_rtz_strided, 2, ra_gfx942::kStrided)

/* Issue 40's decode kernels (parts/plan.h launches them for a dense call of seqlen_q <= 32, a GQA
 * decode's view included): the keys spread over the block's waves, rounded, and its split parts. */
#define RA_GFX942_WAVES_KERNEL(NAME, R, L, SPLIT)                                                    \
  extern "C" __global__ __attribute__((amdgpu_flat_work_group_size(512, 512))) void NAME(           \
      ra_gfx942::KernelArgs a) {                                                                      \
    ra_gfx942::waves_body<R, L, SPLIT>(a);                                                            \
  }
RA_GFX942_WAVES_KERNEL(ra_attn_waves_gfx942_rtne_packed, 0, ra_gfx942::kPacked, false)
RA_GFX942_WAVES_KERNEL(ra_attn_waves_gfx942_rtna_packed, 1, ra_gfx942::kPacked, false)
RA_GFX942_WAVES_KERNEL(ra_attn_waves_gfx942_rtz_packed, 2, ra_gfx942::kPacked, false)
RA_GFX942_WAVES_KERNEL(ra_attn_waves_gfx942_rtne_strided, 0, ra_gfx942::kStrided, false)
RA_GFX942_WAVES_KERNEL(ra_attn_waves_gfx942_rtna_strided, 1, ra_gfx942::kStrided, false)
RA_GFX942_WAVES_KERNEL(ra_attn_waves_gfx942_rtz_strided, 2, ra_gfx942::kStrided, false)
RA_GFX942_WAVES_KERNEL(ra_attn_waves_split_gfx942_packed, 0, ra_gfx942::kPacked, true)
RA_GFX942_WAVES_KERNEL(ra_attn_waves_split_gfx942_strided, 0, ra_gfx942::kStrided, true)

/* Step 10's two extra launches: the split parts (no rounding: fp32 partials) and the merge per mode. */
#define RA_GFX942_SPLIT_KERNEL(NAME, L)                                                              \
  extern "C" __global__ __attribute__((amdgpu_flat_work_group_size(512, 512))) void NAME(           \
      ra_gfx942::KernelArgs a) {                                                                      \
    ra_gfx942::attention_body<0, L, true>(a);                                                         \
  }
#define RA_GFX942_MERGE_KERNEL(NAME, R, L)                                                           \
  extern "C" __global__ __attribute__((amdgpu_flat_work_group_size(512, 512))) void NAME(           \
      ra_gfx942::KernelArgs a) {                                                                      \
    ra_gfx942::merge_body<R, L>(a);                                                                   \
  }
RA_GFX942_SPLIT_KERNEL(ra_attn_split_gfx942_packed, ra_gfx942::kPacked)
RA_GFX942_SPLIT_KERNEL(ra_attn_split_gfx942_strided, ra_gfx942::kStrided)
RA_GFX942_MERGE_KERNEL(ra_attn_merge_gfx942_rtne_packed, 0, ra_gfx942::kPacked)
RA_GFX942_MERGE_KERNEL(ra_attn_merge_gfx942_rtna_packed, 1, ra_gfx942::kPacked)
RA_GFX942_MERGE_KERNEL(ra_attn_merge_gfx942_rtz_packed, 2, ra_gfx942::kPacked)
RA_GFX942_MERGE_KERNEL(ra_attn_merge_gfx942_rtne_strided, 0, ra_gfx942::kStrided)
RA_GFX942_MERGE_KERNEL(ra_attn_merge_gfx942_rtna_strided, 1, ra_gfx942::kStrided)
RA_GFX942_MERGE_KERNEL(ra_attn_merge_gfx942_rtz_strided, 2, ra_gfx942::kStrided)

/* The v2 kernels' tail split (parts/plan.h, gfx942_v2_split): the parts per layout, the merge (and
 * LSE) per mode and layout, on the v2 argument block. */
#define RA_GFX942_V2_SPLIT_KERNEL(NAME, L)                                                           \
  extern "C" __global__ __attribute__((amdgpu_flat_work_group_size(512, 512))) void NAME(           \
      ra_gfx942::KernelArgsV2 a) {                                                                    \
    ra_gfx942::attention_v2_body<0, L, true>(a);                                                      \
  }
#define RA_GFX942_V2_MERGE_KERNEL(NAME, R, L)                                                        \
  extern "C" __global__ __attribute__((amdgpu_flat_work_group_size(512, 512))) void NAME(           \
      ra_gfx942::KernelArgsV2 a) {                                                                    \
    ra_gfx942::merge_v2_body<R, L>(a);                                                                \
  }
RA_GFX942_V2_SPLIT_KERNEL(ra_attn_v2_split_gfx942_packed, ra_gfx942::kPacked)
RA_GFX942_V2_SPLIT_KERNEL(ra_attn_v2_split_gfx942_strided, ra_gfx942::kStrided)
RA_GFX942_V2_MERGE_KERNEL(ra_attn_v2_merge_gfx942_rtne_packed, 0, ra_gfx942::kPacked)
RA_GFX942_V2_MERGE_KERNEL(ra_attn_v2_merge_gfx942_rtna_packed, 1, ra_gfx942::kPacked)
RA_GFX942_V2_MERGE_KERNEL(ra_attn_v2_merge_gfx942_rtz_packed, 2, ra_gfx942::kPacked)
RA_GFX942_V2_MERGE_KERNEL(ra_attn_v2_merge_gfx942_rtne_strided, 0, ra_gfx942::kStrided)
RA_GFX942_V2_MERGE_KERNEL(ra_attn_v2_merge_gfx942_rtna_strided, 1, ra_gfx942::kStrided)
RA_GFX942_V2_MERGE_KERNEL(ra_attn_v2_merge_gfx942_rtz_strided, 2, ra_gfx942::kStrided)

#ifdef RA_HIP_NO_PK_F32
#pragma clang attribute pop
#endif

/* ------------------------------------------------------------------------------------------------
 * Host part (only with the real HIP runtime headers).
 * ---------------------------------------------------------------------------------------------- */
#if RA_HIP_HAVE_RUNTIME
#include <atomic>

#include "../common/validate.h"
#include "../include/regress_attn.h"
#include "parts/plan.h"

namespace ra_gfx942 {

template <int R, int L>
struct Launcher;
#define RA_GFX942_LAUNCHER(R, L, NAME)                                                               \
  template <>                                                                                        \
  struct Launcher<R, L> {                                                                            \
    static void launch(dim3 grid, hipStream_t stream, const KernelArgs& a) {                         \
      hipLaunchKernelGGL(NAME, grid, dim3(kThreads), 0, stream, a);                                  \
    }                                                                                                \
  };
RA_GFX942_LAUNCHER(0, kPacked, ra_attn_fwd_gfx942_rtne_packed)
RA_GFX942_LAUNCHER(1, kPacked, ra_attn_fwd_gfx942_rtna_packed)
RA_GFX942_LAUNCHER(2, kPacked, ra_attn_fwd_gfx942_rtz_packed)
RA_GFX942_LAUNCHER(0, kStrided, ra_attn_fwd_gfx942_rtne_strided)
RA_GFX942_LAUNCHER(1, kStrided, ra_attn_fwd_gfx942_rtna_strided)
RA_GFX942_LAUNCHER(2, kStrided, ra_attn_fwd_gfx942_rtz_strided)
#undef RA_GFX942_LAUNCHER

template <int R, int L>
struct V2Launcher;
#define RA_GFX942_V2_LAUNCHER(R, L, NAME)                                                            \
  template <>                                                                                        \
  struct V2Launcher<R, L> {                                                                          \
    static void launch(dim3 grid, hipStream_t stream, const KernelArgsV2& a) {                       \
      hipLaunchKernelGGL(NAME, grid, dim3(kThreads), 0, stream, a);                                  \
    }                                                                                                \
  };
RA_GFX942_V2_LAUNCHER(0, kPacked, ra_attn_v2_gfx942_rtne_packed)
RA_GFX942_V2_LAUNCHER(1, kPacked, ra_attn_v2_gfx942_rtna_packed)
RA_GFX942_V2_LAUNCHER(2, kPacked, ra_attn_v2_gfx942_rtz_packed)
RA_GFX942_V2_LAUNCHER(0, kStrided, ra_attn_v2_gfx942_rtne_strided)
RA_GFX942_V2_LAUNCHER(1, kStrided, ra_attn_v2_gfx942_rtna_strided)
RA_GFX942_V2_LAUNCHER(2, kStrided, ra_attn_v2_gfx942_rtz_strided)
#undef RA_GFX942_V2_LAUNCHER

template <int L>
struct SplitLauncher;
template <>
struct SplitLauncher<kPacked> {
  static void launch(dim3 grid, hipStream_t stream, const KernelArgs& a) {
    hipLaunchKernelGGL(ra_attn_split_gfx942_packed, grid, dim3(kThreads), 0, stream, a);
  }
};
template <>
struct SplitLauncher<kStrided> {
  static void launch(dim3 grid, hipStream_t stream, const KernelArgs& a) {
    hipLaunchKernelGGL(ra_attn_split_gfx942_strided, grid, dim3(kThreads), 0, stream, a);
  }
};
template <int L>
struct V2SplitLauncher;
template <>
struct V2SplitLauncher<kPacked> {
  static void launch(dim3 grid, hipStream_t stream, const KernelArgsV2& a) {
    hipLaunchKernelGGL(ra_attn_v2_split_gfx942_packed, grid, dim3(kThreads), 0, stream, a);
  }
};
template <>
struct V2SplitLauncher<kStrided> {
  static void launch(dim3 grid, hipStream_t stream, const KernelArgsV2& a) {
    hipLaunchKernelGGL(ra_attn_v2_split_gfx942_strided, grid, dim3(kThreads), 0, stream, a);
  }
};
template <int R, int L>
struct MergeLauncher;
#define RA_GFX942_MERGE_LAUNCHER(R, L, NAME)                                                         \
  template <>                                                                                        \
  struct MergeLauncher<R, L> {                                                                       \
    static void launch(dim3 grid, hipStream_t stream, const KernelArgs& a) {                         \
      hipLaunchKernelGGL(NAME, grid, dim3(kThreads), 0, stream, a);                                  \
    }                                                                                                \
  };
RA_GFX942_MERGE_LAUNCHER(0, kPacked, ra_attn_merge_gfx942_rtne_packed)
RA_GFX942_MERGE_LAUNCHER(1, kPacked, ra_attn_merge_gfx942_rtna_packed)
RA_GFX942_MERGE_LAUNCHER(2, kPacked, ra_attn_merge_gfx942_rtz_packed)
RA_GFX942_MERGE_LAUNCHER(0, kStrided, ra_attn_merge_gfx942_rtne_strided)
RA_GFX942_MERGE_LAUNCHER(1, kStrided, ra_attn_merge_gfx942_rtna_strided)
RA_GFX942_MERGE_LAUNCHER(2, kStrided, ra_attn_merge_gfx942_rtz_strided)
#undef RA_GFX942_MERGE_LAUNCHER
template <int R, int L>
struct V2MergeLauncher;
#define RA_GFX942_V2_MERGE_LAUNCHER(R, L, NAME)                                                      \
  template <>                                                                                        \
  struct V2MergeLauncher<R, L> {                                                                     \
    static void launch(dim3 grid, hipStream_t stream, const KernelArgsV2& a) {                       \
      hipLaunchKernelGGL(NAME, grid, dim3(kThreads), 0, stream, a);                                  \
    }                                                                                                \
  };
RA_GFX942_V2_MERGE_LAUNCHER(0, kPacked, ra_attn_v2_merge_gfx942_rtne_packed)
RA_GFX942_V2_MERGE_LAUNCHER(1, kPacked, ra_attn_v2_merge_gfx942_rtna_packed)
RA_GFX942_V2_MERGE_LAUNCHER(2, kPacked, ra_attn_v2_merge_gfx942_rtz_packed)
RA_GFX942_V2_MERGE_LAUNCHER(0, kStrided, ra_attn_v2_merge_gfx942_rtne_strided)
RA_GFX942_V2_MERGE_LAUNCHER(1, kStrided, ra_attn_v2_merge_gfx942_rtna_strided)
RA_GFX942_V2_MERGE_LAUNCHER(2, kStrided, ra_attn_v2_merge_gfx942_rtz_strided)
#undef RA_GFX942_V2_MERGE_LAUNCHER

/* Issue 40's decode kernels (parts/waves.h): a waves plan's dense role per (mode, layout), its split role
 * per layout. */
template <int R, int L>
struct WavesLauncher;
#define RA_GFX942_WAVES_LAUNCHER(R, L, NAME)                                                         \
  template <>                                                                                        \
  struct WavesLauncher<R, L> {                                                                       \
    static void launch(dim3 grid, hipStream_t stream, const KernelArgs& a) {                         \
      hipLaunchKernelGGL(NAME, grid, dim3(kThreads), 0, stream, a);                                  \
    }                                                                                                \
  };
RA_GFX942_WAVES_LAUNCHER(0, kPacked, ra_attn_waves_gfx942_rtne_packed)
RA_GFX942_WAVES_LAUNCHER(1, kPacked, ra_attn_waves_gfx942_rtna_packed)
RA_GFX942_WAVES_LAUNCHER(2, kPacked, ra_attn_waves_gfx942_rtz_packed)
RA_GFX942_WAVES_LAUNCHER(0, kStrided, ra_attn_waves_gfx942_rtne_strided)
RA_GFX942_WAVES_LAUNCHER(1, kStrided, ra_attn_waves_gfx942_rtna_strided)
RA_GFX942_WAVES_LAUNCHER(2, kStrided, ra_attn_waves_gfx942_rtz_strided)
#undef RA_GFX942_WAVES_LAUNCHER
template <int L>
struct WavesSplitLauncher;
template <>
struct WavesSplitLauncher<kPacked> {
  static void launch(dim3 grid, hipStream_t stream, const KernelArgs& a) {
    hipLaunchKernelGGL(ra_attn_waves_split_gfx942_packed, grid, dim3(kThreads), 0, stream, a);
  }
};
template <>
struct WavesSplitLauncher<kStrided> {
  static void launch(dim3 grid, hipStream_t stream, const KernelArgs& a) {
    hipLaunchKernelGGL(ra_attn_waves_split_gfx942_strided, grid, dim3(kThreads), 0, stream, a);
  }
};

/* Launch counter for the RA_INJECT_NONDET drill: launches are numbered from 1 per process. */
static std::atomic<unsigned long long> g_launch_count{0};

}  // namespace ra_gfx942

extern "C" ra_status ra_validate(const ra_attention_params* params, char* err, size_t err_len) {
  return ra_validate_params(params, err, err_len);
}

extern "C" ra_status ra_plan_launch(const ra_attention_params* params, const ra_device_facts* device,
                                    ra_launch_plan* plan, char* err, size_t err_len) {
  return ra_gfx942::plan_launch(params, device, plan, err, err_len);
}

/* Ask the planner (parts/plan.h) with the device's CU count, allocate its workspace, launch each of
 * its launches by role. */
extern "C" ra_status ra_attention_fwd(const ra_attention_params* call, char* err, size_t err_len) {
  using namespace ra_gfx942;
  const ra_status st = ra_validate(call, err, err_len);
  if (st != RA_OK) return st;
  /* the params the plan's kernels run (a GQA decode's dense view: parts/plan.h, call_view) */
  const ra_attention_params view = call_view(*call);
  const ra_attention_params* p = &view;
  int dev = 0, cus = 0;
  hipError_t e = hipGetDevice(&dev);
  if (e == hipSuccess) e = hipDeviceGetAttribute(&cus, hipDeviceAttributeMultiprocessorCount, dev);
  if (e != hipSuccess)
    return ra_fail(err, err_len, RA_ERR_DEVICE, "HIP device query failed: %s (hipError %d)", hipGetErrorString(e),
                   (int)e);
  const ra_device_facts facts = {cus, 0};
  ra_launch_plan plan;
  const ra_status ps = plan_launch(p, &facts, &plan, err, err_len);
  if (ps != RA_OK) return ps;

  KernelArgs a;
  a.q = p->q;
  a.k = p->k;
  a.v = p->v;
  a.o = p->o;
  for (int i = 0; i < 3; ++i) {
    a.q_stride[i] = p->q_stride[i];
    a.k_stride[i] = p->k_stride[i];
    a.v_stride[i] = p->v_stride[i];
    a.o_stride[i] = p->o_stride[i];
  }
  a.heads = (uint32_t)p->heads;
  a.seqlen_q = (uint32_t)p->seqlen_q;
  a.seqlen_k = (uint32_t)p->seqlen_k;
  a.scale_log2e = (float)((double)ra_effective_scale(p) * 1.4426950408889634);
  const unsigned long long launch_no = g_launch_count.fetch_add(1) + 1ull;
  a.flip_lsb = (RA_INJECT_NONDET && (launch_no & 1ull)) ? 1u : 0u;
  a.ws = nullptr;
  const hipStream_t stream = (hipStream_t)p->stream;
  /* the v2 fields (used by the v2 kernels only: runs_v2(plan.kind_id)) */
  KernelArgsV2 x;
  x.group = (uint32_t)(p->heads / p->heads_kv);
  x.mask = (uint32_t)p->mask;
  x.bh = (uint32_t)(p->batch * p->heads);
  x.reserved = 0u;
  x.cu_q = p->cu_seqlens_q;
  x.cu_k = p->cu_seqlens_k;
  x.lse = p->lse;
  x.lse_bstride = p->cu_seqlens_q ? 0u : (uint64_t)p->heads * (uint64_t)p->seqlen_q;
  x.lse_hstride = (uint64_t)p->seqlen_q;

  void* ws = nullptr;
  if (plan.workspace_bytes > 0) {
    const hipError_t me = hipMallocAsync(&ws, (size_t)plan.workspace_bytes, stream);
    if (me != hipSuccess)
      return ra_fail(err, err_len, RA_ERR_DEVICE, "HIP workspace allocation of %lld bytes failed: %s (hipError %d)",
                     (long long)plan.workspace_bytes, hipGetErrorString(me), (int)me);
    a.ws = (float*)ws;
  }
  ra_variant::dispatch(p->rounding, packed_layout(*p) ? kPacked : kStrided, [&](auto rc, auto lc) {
    constexpr int R = decltype(rc)::value;
    constexpr int L = decltype(lc)::value;
    ra_gfx942_launch l;
    for (int64_t i = 0; e == hipSuccess && launch_at(*p, plan, i, &l); ++i) {
      a.bh_offset = l.bh_offset;
      a.wg_end = l.wg_end;
      a.qblocks = l.qblocks;
      a.split_parts = l.split_parts;
      a.split_tiles = l.split_tiles;
      const dim3 grid(l.grid[0], l.grid[1], l.grid[2]);
      x.a = a;
      const bool v2 = runs_v2(plan.kind_id);
      switch (l.role) {
        case RA_GFX942_DENSE:
          if (v2)
            V2Launcher<R, L>::launch(grid, stream, x);
          else if (waves_plan(plan.kind_id))
            WavesLauncher<R, L>::launch(grid, stream, a);
          else
            Launcher<R, L>::launch(grid, stream, a);
          break;
        case RA_GFX942_SPLIT:
          if (v2)
            V2SplitLauncher<L>::launch(grid, stream, x);
          else if (waves_plan(plan.kind_id))
            WavesSplitLauncher<L>::launch(grid, stream, a);
          else
            SplitLauncher<L>::launch(grid, stream, a);
          break;
        default:
          if (v2)
            V2MergeLauncher<R, L>::launch(grid, stream, x);
          else
            MergeLauncher<R, L>::launch(grid, stream, a);
          break;
      }
      e = hipGetLastError();
    }
    return 0;
  });
  if (ws != nullptr) {
    const hipError_t fe = hipFreeAsync(ws, stream); /* stream-ordered: after the merge has read it */
    if (e == hipSuccess) e = fe;
  }
  if (e != hipSuccess)
    return ra_fail(err, err_len, RA_ERR_DEVICE, "HIP kernel launch failed: %s (hipError %d)", hipGetErrorString(e),
                   (int)e);
  return RA_OK;
}

extern "C" const char* ra_backend_name(void) { return "hip"; }

#define RA_GFX942_STR_(x) #x
#define RA_GFX942_STR(x) RA_GFX942_STR_(x)
extern "C" const char* ra_build_info(void) {
  return "{\"backend\":\"hip\",\"abi\":" RA_GFX942_STR(RA_ABI_VERSION) ",\"inject\":" RA_INJECT_INFO
         ",\"arch\":\"gfx942\",\"block_q\":256,\"block_k\":64,\"waves_per_block\":8"
         ",\"mfma\":\"v_mfma_f32_16x16x16_bf16\",\"design_step\":13" RA_HIP_FLAGS_INFO "}";
}
#endif /* RA_HIP_HAVE_RUNTIME */
