/*
 * epilogue.cuh — O = acc / l, rounded to bf16 by the compile-time mode, fire-drill faults applied
 * (inject.h), stored straight from registers (4 bytes per thread per 8-column tile; rows past
 * seqlen_q are skipped, so nothing is written out of range).
 */
#pragma once
#include "../common/bf16.h"
#include "../common/inject.h"
#include "params.cuh"

namespace ra_cuda {

template <int kRound>
__device__ __forceinline__ uint16_t round_out(float x) {
  uint16_t h = kRound == 2 ? ra_f32_to_bf16_rtz(x) : kRound == 1 ? ra_f32_to_bf16_rtna(x) : ra_f32_to_bf16_rtne(x);
  return ra_inject_ulp(h);
}

/* acc: NT tiles in the accumulator layout (see softmax.cuh); l: this thread's partial row sums.
 * out0/out1: the rows r and r + 8 of O (nullptr when past seqlen_q). flip0: apply the NONDET drill
 * to column 0 of out0. */
template <int NT, int kRound>
__device__ __forceinline__ void store_rows(const float (&acc)[NT * 4], const float (&l_part)[2], uint16_t* out0,
                                           uint16_t* out1, int qc, bool flip0) {
  float inv[2];
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    float l = l_part[r];
    l += __shfl_xor_sync(0xffffffffu, l, 1);
    l += __shfl_xor_sync(0xffffffffu, l, 2);
    /* l = 0 only for an all -Inf row: 1/0 = Inf and 0 * Inf = NaN, the reference's 0/0. */
    inv[r] = 1.0f / l;
  }
#pragma unroll
  for (int i = 0; i < NT; ++i) {
    if (out0) {
      uint32_t lo = round_out<kRound>(acc[4 * i + 0] * inv[0]);
      const uint32_t hi = round_out<kRound>(acc[4 * i + 1] * inv[0]);
      if (RA_INJECT_NONDET && flip0 && i == 0 && qc == 0) lo ^= 1u;
      *reinterpret_cast<uint32_t*>(out0 + 8 * i + qc) = lo | (hi << 16);
    }
    if (out1) {
      const uint32_t lo = round_out<kRound>(acc[4 * i + 2] * inv[1]);
      const uint32_t hi = round_out<kRound>(acc[4 * i + 3] * inv[1]);
      *reinterpret_cast<uint32_t*>(out1 + 8 * i + qc) = lo | (hi << 16);
    }
  }
}

}  // namespace ra_cuda
