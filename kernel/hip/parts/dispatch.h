/*
 * dispatch.h — the kernel's argument block and the one switch that turns runtime flags into
 * compile-time constants.
 *
 * KernelArgs is the only thing the host passes to the device (by value, in the kernarg segment).
 * ra_variant::dispatch() (../../common/variant.h, shared with the CUDA backend) maps (rounding
 * mode, layout) to template constants exactly once; the host part calls it with a generic lambda
 * and the lambda instantiates the matching kernel. The six variants
 * are also named extern "C" kernels (attention_gfx942.hip), so profilers and the compile test see
 * one readable symbol per variant.
 */
#ifndef RA_HIP_DISPATCH_H
#define RA_HIP_DISPATCH_H

#include <stdint.h>

#include "../../common/variant.h"

namespace ra_gfx942 {

/* Layout classes kPacked (BHSD, seq stride 128) and kStrided: the one enum, in variant.h. */
using ra_variant::kPacked;
using ra_variant::kStrided;
using ra_variant::Layout;

struct KernelArgs {
  const uint16_t* q;
  const uint16_t* k;
  const uint16_t* v;
  uint16_t* o;
  int64_t q_stride[3]; /* batch, head, seq (elements; the dim stride is 1) */
  int64_t k_stride[3];
  int64_t v_stride[3];
  int64_t o_stride[3];
  uint32_t heads;
  uint32_t seqlen_q;
  uint32_t seqlen_k;
  uint32_t bh_offset;  /* first (batch*heads + head) of this launch: grid.y is capped at 65535 */
  float scale_log2e;   /* softmax scale * log2(e): p = exp2((s - m) * scale_log2e) */
  uint32_t flip_lsb;   /* fire drill RA_INJECT_NONDET: 1 on odd-numbered launches */
  /* Tail KV-split (step 10; the planner, plan.h, sets these): the q-blocks of a call are numbered
   * lin = (batch*heads + head) * qblocks + qblock. The dense launch computes lin < wg_end; the split
   * launch (grid split_parts x tail) computes key tiles [p*split_tiles, (p+1)*split_tiles) of
   * q-block wg_end + y into fp32 partials at ws; the merge launch combines the parts of each. */
  uint32_t wg_end;      /* dense launch: workgroups at or past it return at once (UINT32_MAX: none) */
  uint32_t qblocks;     /* ceil(seqlen_q / 256) */
  uint32_t split_parts; /* key parts per tail q-block */
  uint32_t split_tiles; /* key tiles per part (the last part may have fewer) */
  float* ws;            /* partials: per (tail q-block, part, row) kSplitRecord floats */
};

/* ABI v2's kernels (issue 40: GQA, causal masks, varlen, LSE): the dense block above, then the v2
 * fields. A separate block so the dense kernels' argument block, and their code, stay as they were.
 * Sequence b of a call: rows [cu_q[b], cu_q[b+1]) of Q/O and [cu_k[b], cu_k[b+1]) of K/V (varlen),
 * else rows [0, seqlen_q) and [0, seqlen_k) of batch entry b; query row i of it sees the keys
 * [0, clamp(i + 1 + off, 0, len_k)), off = len_k (no mask), 0 (top-left), len_k - len_q (bottom-right). */
constexpr uint32_t kMaskTopLeft = 1;     /* RA_MASK_CAUSAL_TOP_LEFT (regress_attn.h) */
constexpr uint32_t kMaskBottomRight = 2; /* RA_MASK_CAUSAL_BOTTOM_RIGHT */
struct KernelArgsV2 {
  KernelArgs a;        /* seqlen_q/k: the packed totals in varlen; wg_end UINT32_MAX, no split */
  uint32_t group;      /* heads / heads_kv: query head h reads K/V head h / group */
  uint32_t mask;       /* ra_mask */
  uint32_t bh;         /* batch * heads: the workgroups are dealt out q-block by q-block (heaviest first) */
  uint32_t reserved;   /* 0 */
  const int32_t* cu_q; /* varlen: batch + 1 offsets (device memory), else null */
  const int32_t* cu_k;
  float* lse;              /* null: not written; else row i of (b, h) at lse[b lse_bstride + h lse_hstride + q0 + i] */
  uint64_t lse_bstride;    /* dense heads * seqlen_q, varlen 0 */
  uint64_t lse_hstride;    /* seqlen_q (varlen: the packed total) */
};

/* Step 5 (docs/hip-gfx942.md, "Design steps"): tiles wholly below seqlen_k copy without per-load
 * bounds tests (TileCopy::load_full) and skip the key mask's compares. */

/* Element offset of sequence row `row` (head_dim 128 is also the packed seq stride). */
template <int L>
__device__ __forceinline__ int64_t row_offset(uint32_t row, int64_t seq_stride) {
  return L == kPacked ? (int64_t)row * 128 : (int64_t)row * seq_stride;
}

}  // namespace ra_gfx942

#endif /* RA_HIP_DISPATCH_H */
