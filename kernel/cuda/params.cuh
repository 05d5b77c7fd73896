/*
 * params.cuh — the one plain struct between the host side (attention_sm90.cu) and the device
 * code, and the two compile-time switches (rounding mode, layout) every kernel is templated on.
 */
#pragma once
#include <cuda.h> /* CUtensorMap (a 128-byte opaque struct); no libcuda link needed for the type */
#include <stdint.h>

#include "../common/variant.h"
#include "flags.h"

namespace ra_cuda {

constexpr int kHeadDim = 128;

/* kPacked (every seq stride 128: compile-time row stride) or kStrided: the one enum, shared with
 * the HIP backend (../common/variant.h). */
using ra_variant::Layout;

/* One tile of a varlen launch, as the pre-pass lists it (seqlen.cuh): sequence b's query block m,
 * its packed rows, lengths, and key blocks to run. */
struct alignas(16) VarTile {
  int q0, len_q, k0, len_k;
  int m, nb, b, unused;
};

struct FwdParams {
  /* TMA descriptors, used only by the sm_90a path: (d, seq, head, batch) boxes of 64 x 128 x 1 x 1
   * for the loads, 64 x 16 x 1 x 1 (one warp's rows) for the output's stores. */
  CUtensorMap tma_q;
  CUtensorMap tma_k;
  CUtensorMap tma_v;
  CUtensorMap tma_o;
  const uint16_t* q;
  const uint16_t* k;
  const uint16_t* v;
  uint16_t* o;
  int64_t q_stride[3]; /* batch, head, seq (dim stride is 1) */
  int64_t k_stride[3];
  int64_t v_stride[3];
  int64_t o_stride[3];
  int batch;
  int heads;
  int seqlen_q;
  int seqlen_k;
  int num_m_blocks; /* ceil(seqlen_q / block_m) */
  int num_n_blocks; /* ceil(seqlen_k / block_n) */
  int num_tiles;    /* batch * heads * num_m_blocks * num_splits */
  /* Split over keys (split.cuh): each (batch, head, query block) is num_splits tiles, tile j taking
   * key blocks [j * split_blocks, min((j + 1) * split_blocks, num_n_blocks)); with num_splits > 1
   * tiles write fp32 partials and attn_merge_splits rounds them. 1: no split, O written directly. */
  int num_splits;
  int split_blocks;
  float* part_o;  /* [split][batch * heads][seqlen_q][128]: unnormalised O of the split's keys */
  float* part_ml; /* [split][batch * heads][seqlen_q][2]: raw row max, row sum of the split's keys */
  int* part_cnt;  /* [batch * heads][num_m_blocks][2 warpgroups]: splits done (0 between launches) */
  /* RA_CUDA_DYN_SCHED (tile_scheduler.cuh): [0] tiles handed out past the first grid, [1] CTAs
   * done; 0 between launches (the last CTA resets both). nullptr: the static order. */
  int* tile_counter;
  int merge_in_kernel; /* 1: the last split's warpgroup merges (few rows); 0: attn_merge_splits does */
  float scale_log2; /* softmax scale * log2(e) */
  int nondet_flip;  /* RA_INJECT_NONDET: flip bit 0 of O[0,0,0,0] on this launch */
  /* RA_CUDA_TAIL_SPLIT (attention_sm90.cu's tail_split_plan; only its own kernel reads them): work
   * items [0, tail_first) are whole tiles, as unsplit; item tail_first + j * tail_splits + i is part
   * i of tail tile j (tile tail_first + j), key blocks [i * tail_blocks, min((i + 1) * tail_blocks,
   * num_n_blocks)); its fp32 partials go to part_o / part_ml laid out [j][i][128 rows], and part_cnt
   * holds [j][2 warpgroups] (split.cuh's tail_merge_if_last). */
  int tail_first;
  int tail_splits;
  int tail_blocks;
};

/* ABI v2 (issue 40): the v2 kernels' parameters (mainloop_v2.cuh), the dense ones' and their own. A
 * struct of its own, not fields appended to FwdParams: a dense kernel cannot name a v2 field, and its
 * parameter block is the 880 bytes it was before ABI v2 (byte for byte 4cc9352's kernels; the appended
 * fields made it 1008). docs/perf-notes.md, "Issue 40 close". */
struct FwdParamsV2 : FwdParams {
  int heads_kv;
  int kv_group;          /* heads / heads_kv: query head h reads K/V head h / kv_group */
  int mask_bottom_right; /* causal kernels: 1 bottom-right (offset len_k - len_q), 0 top-left */
  int pack_log2_rows;    /* pack GQA (pack_gqa.cuh): log2 R, query rows of each of the kv_group heads of a tile */
  int head_groups;       /* a tile's head index: query heads, or K/V heads where packed */
  int v2_m_blocks;       /* fixed lengths: query blocks per (batch, head index) */
  int v2_tiles;          /* fixed lengths: tiles of the launch */
  int l2_section;        /* fixed lengths: (batch, head index) pairs a scheduling section holds */
  int max_seqlen_q;      /* varlen: ABI's bound on a sequence's query rows */
  int max_seqlen_k;
  const int* cu_seqlens_q; /* varlen: int32 [batch + 1] on the device */
  const int* cu_seqlens_k;
  float* lse;              /* optional fp32 log-sum-exp: ((b * heads + h) * seqlen_q + q0 + i) */
  VarTile* var_tiles;       /* varlen: the tiles the pre-pass listed, heaviest first (seqlen.cuh) */
  int* var_count;            /* varlen: how many it listed */
};

template <Layout L>
__device__ __forceinline__ int64_t seq_stride(const int64_t (&s)[3]) {
  return L == Layout::kPacked ? (int64_t)kHeadDim : s[2];
}

}  // namespace ra_cuda
