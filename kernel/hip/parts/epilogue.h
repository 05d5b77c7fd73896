/*
 * epilogue.h — finish the row sums, normalise, round to bf16 by the compile-time mode, apply the
 * fire-drill faults of kernel/common/inject.h, store 8 bytes (4 dims) per fragment.
 */
#ifndef RA_HIP_EPILOGUE_H
#define RA_HIP_EPILOGUE_H

#include "../../common/bf16.h"
#include "../../common/inject.h"
#include "dispatch.h"
#include "layout.h"
#include "mfma.h"

namespace ra_gfx942 {

template <int R>
__device__ __forceinline__ uint16_t round_bf16(float x) {
  static_assert(R >= 0 && R <= 2, "rounding mode is 0 (rtne), 1 (rtna) or 2 (rtz)");
  constexpr int kUsed = RA_INJECT_ROUNDING(R); /* R itself unless the mode-swap drill is built in */
  const uint16_t h = kUsed == 2 ? ra_f32_to_bf16_rtz(x) : kUsed == 1 ? ra_f32_to_bf16_rtna(x) : ra_f32_to_bf16_rtne(x);
  return ra_inject_ulp(h); /* identity unless built with RA_INJECT_ULP=N */
}

/* Row sum over the 4 lanes of a row: (own + xor16) + (xor32 pair). IEEE addition commutes, so all
 * four lanes get the same bits, in the same order on every launch. */
__device__ __forceinline__ float row_sum(float l, int lane) {
  l = l + lane_xor(l, lane, 16);
  return l + lane_xor(l, lane, 32);
}

template <int R, int L>
__device__ __forceinline__ void store_output(const f32x4 (&o)[kDTiles], float l_row, uint16_t* obase,
                                             int64_t seq_stride, uint32_t row, uint32_t seqlen_q, int g,
                                             bool flip_first) {
  if (row >= seqlen_q) return;
  uint16_t* dst = obase + row_offset<L>(row, seq_stride) + 4 * g;
#pragma unroll
  for (int dt = 0; dt < kDTiles; ++dt) {
    /* IEEE division: l_row == 0 (every score -Inf) gives 0/0 = NaN, as the reference does. */
    uint16_t h0 = round_bf16<R>(o[dt].x / l_row);
    const uint16_t h1 = round_bf16<R>(o[dt].y / l_row);
    const uint16_t h2 = round_bf16<R>(o[dt].z / l_row);
    const uint16_t h3 = round_bf16<R>(o[dt].w / l_row);
#if RA_INJECT_NONDET
    if (dt == 0 && flip_first) h0 ^= 1u; /* element (b0, h0, row 0, dim 0) on odd launches */
#else
    (void)flip_first;
#endif
    u32x2 packed = {(unsigned int)h0 | ((unsigned int)h1 << 16), (unsigned int)h2 | ((unsigned int)h3 << 16)};
    *reinterpret_cast<u32x2*>(dst + 16 * dt) = packed;
  }
}

}  // namespace ra_gfx942

#endif /* RA_HIP_EPILOGUE_H */
