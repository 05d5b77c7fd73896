/*
 * mainloop_sm80.cuh — the fallback path: FlashAttention-2 style with mma.sync m16n8k16.
 *
 * Taken when a TMA descriptor cannot describe the tensors (cuTensorMapEncodeTiled refuses the
 * strides, e.g. a zero batch stride) or when built with -DRA_CUDA_FORCE_MMA_SYNC=1 (to test it).
 * 4 warps, 64 query rows per CTA (16 per warp), key blocks of 64, K/V double-buffered through
 * cp.async (zero-filled past seqlen_k, nothing read out of range), ldmatrix from an XOR-swizzled
 * layout (16-byte chunk c of row r lives at chunk c ^ (r & 7): conflict-free for ldmatrix).
 *
 *   gmem --cp.async--> smem K/V [2 stages] --ldmatrix--> mma.sync S = Q K^T (Q held in registers)
 *        --softmax (registers)--> P bf16 --mma.sync--> O += P V --epilogue--> gmem
 */
#pragma once
#include "drill.cuh"
#include "epilogue.cuh"
#include "params.cuh"
#include "ptx.cuh"
#include "smem.h"
#include "softmax.cuh"

namespace ra_cuda {
namespace sm80 {

/* kBlockM, kBlockN, kThreads and Smem: smem.h (the planner reads them too) */

__device__ __forceinline__ int swz(int row, int chunk) { return row * 128 + ((chunk ^ (row & 7)) << 3); }

/* rows [row0, row0 + R) of one (batch, head) into a swizzled tile; rows >= seqlen become zeros. */
template <int R>
__device__ __forceinline__ void load_tile(uint16_t* dst, const uint16_t* base, int64_t stride, int row0, int seqlen,
                                          int tid) {
#pragma unroll
  for (int i = tid; i < R * 16; i += kThreads) {
    const int r = i >> 4;
    const int c = i & 15;
    const bool valid = row0 + r < seqlen;
    const uint16_t* src = valid ? base + (int64_t)(row0 + r) * stride + c * 8 : base;
    cp_async_16(dst + swz(r, c), src, valid);
  }
}

template <int kRound, Layout L>
__device__ __forceinline__ void run(const FwdParams& p, Smem& sm) {
  const long long tile_start = inject_clock(); /* fire drill: this CTA's own time (inject.h) */
  const int tid = threadIdx.x;
  const int warp = tid >> 5;
  const int lane = tid & 31;
  const int qc = 2 * (lane & 3);
  const int mblk = blockIdx.x;
  const int b = blockIdx.y / p.heads;
  const int h = blockIdx.y - b * p.heads;
  const uint16_t* qb = p.q + (int64_t)b * p.q_stride[0] + (int64_t)h * p.q_stride[1];
  const uint16_t* kb = p.k + (int64_t)b * p.k_stride[0] + (int64_t)h * p.k_stride[1];
  const uint16_t* vb = p.v + (int64_t)b * p.v_stride[0] + (int64_t)h * p.v_stride[1];
  const int64_t qs = seq_stride<L>(p.q_stride), ks = seq_stride<L>(p.k_stride), vs = seq_stride<L>(p.v_stride);
  const int nb = (p.seqlen_k + kBlockN - 1) / kBlockN;
  const int last_valid = p.seqlen_k - (nb - 1) * kBlockN;

  load_tile<kBlockM>(sm.q, qb, qs, mblk * kBlockM, p.seqlen_q, tid);
  load_tile<kBlockN>(sm.k[0], kb, ks, 0, p.seqlen_k, tid);
  load_tile<kBlockN>(sm.v[0], vb, vs, 0, p.seqlen_k, tid);
  cp_async_commit();

  uint32_t qf[8][4];
  float o[64];
#pragma unroll
  for (int i = 0; i < 64; ++i) o[i] = 0.f;
  OnlineSoftmax<8> sfm;
  sfm.init();
  const int l8 = lane & 7;
  const int mi = lane >> 3;

  for (int n = 0; n < nb; ++n) {
    const int st = n & 1;
    if (n + 1 < nb) {
      load_tile<kBlockN>(sm.k[st ^ 1], kb, ks, (n + 1) * kBlockN, p.seqlen_k, tid);
      load_tile<kBlockN>(sm.v[st ^ 1], vb, vs, (n + 1) * kBlockN, p.seqlen_k, tid);
      cp_async_commit();
      cp_async_wait<1>();
    } else {
      cp_async_wait<0>();
    }
    __syncthreads();
    if (n == 0) {
#pragma unroll
      for (int kk = 0; kk < 8; ++kk)
        ldmatrix_x4(qf[kk], sm.q + swz(warp * 16 + (mi & 1) * 8 + l8, 2 * kk + (mi >> 1)));
    }

    float s[32];
#pragma unroll
    for (int i = 0; i < 32; ++i) s[i] = 0.f;
#pragma unroll
    for (int kk = 0; kk < 8; ++kk) {
#pragma unroll
      for (int np = 0; np < 4; ++np) {
        uint32_t kf[4];
        ldmatrix_x4(kf, sm.k[st] + swz(np * 16 + (mi >> 1) * 8 + l8, 2 * kk + (mi & 1)));
        mma_m16n8k16(*reinterpret_cast<float(*)[4]>(&s[8 * np]), qf[kk], kf[0], kf[1]);
        mma_m16n8k16(*reinterpret_cast<float(*)[4]>(&s[8 * np + 4]), qf[kk], kf[2], kf[3]);
      }
    }

    float corr[2];
    const bool mask = (n == nb - 1) && last_valid < kBlockN;
    if (n == 0) {
      if (mask)
        sfm.template step<true, true>(s, p.scale_log2, last_valid, qc, corr);
      else
        sfm.template step<true, false>(s, p.scale_log2, kBlockN, qc, corr);
    } else {
      if (mask)
        sfm.template step<false, true>(s, p.scale_log2, last_valid, qc, corr);
      else
        sfm.template step<false, false>(s, p.scale_log2, kBlockN, qc, corr);
      rescale_rows<16>(o, corr);
    }

#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const uint32_t pa[4] = {pack_bf16x2(s[8 * j + 0], s[8 * j + 1]), pack_bf16x2(s[8 * j + 2], s[8 * j + 3]),
                              pack_bf16x2(s[8 * j + 4], s[8 * j + 5]), pack_bf16x2(s[8 * j + 6], s[8 * j + 7])};
#pragma unroll
      for (int dp = 0; dp < 8; ++dp) {
        uint32_t vf[4];
        ldmatrix_x4_trans(vf, sm.v[st] + swz(16 * j + (mi & 1) * 8 + l8, 2 * dp + (mi >> 1)));
        mma_m16n8k16(*reinterpret_cast<float(*)[4]>(&o[8 * dp]), pa, vf[0], vf[1]);
        mma_m16n8k16(*reinterpret_cast<float(*)[4]>(&o[8 * dp + 4]), pa, vf[2], vf[3]);
      }
    }
    __syncthreads();
  }

  const int row0 = mblk * kBlockM + warp * 16 + (lane >> 2);
  const int row1 = row0 + 8;
  uint16_t* obase = p.o + (int64_t)b * p.o_stride[0] + (int64_t)h * p.o_stride[1];
  const int64_t os = seq_stride<L>(p.o_stride);
  uint16_t* out0 = row0 < p.seqlen_q ? obase + (int64_t)row0 * os : nullptr;
  uint16_t* out1 = row1 < p.seqlen_q ? obase + (int64_t)row1 * os : nullptr;
  const bool flip0 = p.nondet_flip && row0 == 0 && b == 0 && h == 0;
  store_rows<16, kRound>(o, sfm.l, out0, out1, qc, flip0);
  inject_spin(tile_start);
}

}  // namespace sm80
}  // namespace ra_cuda
