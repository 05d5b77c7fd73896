/*
 * dispatch.h — the kernel's argument block and the one switch that turns runtime flags into
 * compile-time constants.
 *
 * KernelArgs is the only thing the host passes to the device (by value, in the kernarg segment).
 * dispatch_variant() maps (rounding mode, layout) to template constants exactly once; the host part
 * calls it with a generic lambda and the lambda instantiates the matching kernel. The six variants
 * are also named extern "C" kernels (attention_gfx942.hip), so profilers and the compile test see
 * one readable symbol per variant.
 */
#ifndef RA_HIP_DISPATCH_H
#define RA_HIP_DISPATCH_H

#include <stdint.h>

#include "steps.h"

namespace ra_gfx942 {

/* Layout classes. kPacked: Q, K, V and O all have seq stride 128 (BHSD, rows back to back), so row
 * offsets are compile-time multiples of 256 bytes. kStrided: any other valid strides (BSHD included),
 * rows addressed through the runtime seq stride. Both read tensors in place. */
enum Layout : int { kPacked = 0, kStrided = 1 };

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
};

/* Ablation step 5 (docs/hip-gfx942.md, "Design steps"): tiles wholly below seqlen_k copy without
 * per-load bounds tests (TileCopy::load_full) and skip the key mask's compares (flag: steps.h). */

/* Element offset of sequence row `row` (head_dim 128 is also the packed seq stride). */
template <int L>
__device__ __forceinline__ int64_t row_offset(uint32_t row, int64_t seq_stride) {
  return L == kPacked ? (int64_t)row * 128 : (int64_t)row * seq_stride;
}

template <int V>
struct IntC {
  static constexpr int value = V;
};

/* The one switch helper: f(IntC<rounding>, IntC<layout>). rounding is already validated (0..2). */
template <class F>
inline auto dispatch_variant(int rounding, int layout, F&& f) -> decltype(f(IntC<0>{}, IntC<0>{})) {
  if (layout == kPacked) {
    switch (rounding) {
      case 1: return f(IntC<1>{}, IntC<kPacked>{});
      case 2: return f(IntC<2>{}, IntC<kPacked>{});
      default: return f(IntC<0>{}, IntC<kPacked>{});
    }
  }
  switch (rounding) {
    case 1: return f(IntC<1>{}, IntC<kStrided>{});
    case 2: return f(IntC<2>{}, IntC<kStrided>{});
    default: return f(IntC<0>{}, IntC<kStrided>{});
  }
}

}  // namespace ra_gfx942

#endif /* RA_HIP_DISPATCH_H */
