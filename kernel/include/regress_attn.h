/*
 * regress_attn.h — the one C ABI shared by every backend (CPU golden model, CUDA sm_90, HIP gfx942).
 *
 *   O[b,h,i,:] = sum_j softmax_j(scale * Q[b,h,i,:] . K[b,h,j,:]) * V[b,h,j,:]
 *
 * Inputs and output are bf16 (raw 16-bit patterns), head_dim is 128, accumulation and softmax are
 * fp32, the output is rounded to bf16 by `rounding`. Every tensor is addressed through four element
 * strides in (batch, head, seq, dim) order, so BSHD and BHSD are both read in place; the dim stride
 * must be 1. Q and K/V may have different sequence lengths (cross-attention), each >= 1.
 *
 * ABI v2 (docs/serving.md) adds, as fields appended to the parameter block:
 *   heads_kv      grouped-query attention: query head h reads K/V head h / (heads / heads_kv)
 *                 (heads % heads_kv == 0; heads_kv == heads is plain multi-head, 1 is MQA)
 *   mask          none, causal aligned top-left (key j visible to query row i iff j <= i: SDPA's
 *                 is_causal) or bottom-right (j <= i + Sk - Sq: FlashAttention >= 2.1). A masked
 *                 key is not read: its K and V rows do not affect the output.
 *   cu_seqlens_*  variable length: `batch` sequences packed along the seq axis, sequence b's rows
 *                 [cu[b], cu[b+1]); seqlen_q/k are the packed totals; masks apply per sequence.
 *   lse           optional fp32 log-sum-exp of each query row's scaled scores.
 * A query row with no visible key (causal bottom-right with Sq > Sk, or a key length of 0) gives
 * output +0 and LSE -inf. Backends that lack a feature refuse it with RA_ERR_UNSUPPORTED.
 *
 * Every entry point returns RA_OK or an error code and writes a one-line message into `err`
 * (if non-null). Nothing is guessed: a bad argument is refused before any memory is touched.
 */
#ifndef REGRESS_ATTN_H
#define REGRESS_ATTN_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define RA_ABI_VERSION 2
#define RA_HEAD_DIM 128

/* AITER's how_v3_bf16_cvt numbering. */
typedef enum {
  RA_RTNE = 0, /* round to nearest, ties to even */
  RA_RTNA = 1, /* round to nearest, ties away from zero */
  RA_RTZ = 2   /* round toward zero (truncate) */
} ra_rounding;

typedef enum {
  RA_OK = 0,
  RA_ERR_NULL_POINTER = 1,
  RA_ERR_HEAD_DIM = 2,
  RA_ERR_SHAPE = 3,
  RA_ERR_STRIDE = 4,
  RA_ERR_ROUNDING = 5,
  RA_ERR_ALIGNMENT = 6,
  RA_ERR_DEVICE = 7,
  RA_ERR_ABI = 8,
  RA_ERR_UNSUPPORTED = 9, /* a valid feature this backend does not implement (yet) */
  RA_ERR_MASK = 10,       /* mask is not an ra_mask value */
  RA_ERR_SEQLENS = 11     /* cu_seqlens_q/k or max_seqlen_q/k inconsistent */
} ra_status;

/* Which keys a query row sees (per sequence in a varlen call). */
typedef enum {
  RA_MASK_NONE = 0,               /* every key */
  RA_MASK_CAUSAL_TOP_LEFT = 1,    /* key j visible to row i iff j <= i (SDPA is_causal) */
  RA_MASK_CAUSAL_BOTTOM_RIGHT = 2 /* j <= i + Sk - Sq (FlashAttention >= 2.1, causal_lower_right) */
} ra_mask;

/* The only interface between host code and any backend. All strides are in elements. */
typedef struct {
  uint32_t abi_version; /* must be RA_ABI_VERSION */
  const uint16_t* q;    /* bf16 bits, [B, H, Sq, D] through q_stride */
  const uint16_t* k;    /* bf16 bits, [B, H, Sk, D] through k_stride */
  const uint16_t* v;    /* bf16 bits, [B, H, Sk, D] through v_stride */
  uint16_t* o;          /* bf16 bits, [B, H, Sq, D] through o_stride */
  int64_t batch;
  int64_t heads;
  int64_t seqlen_q;
  int64_t seqlen_k;
  int64_t head_dim;    /* must be RA_HEAD_DIM */
  int64_t q_stride[4]; /* (batch, head, seq, dim) */
  int64_t k_stride[4];
  int64_t v_stride[4];
  int64_t o_stride[4];
  float scale;     /* softmax scale; <= 0 or NaN means 1/sqrt(head_dim) */
  int32_t rounding; /* ra_rounding */
  void* stream;     /* cudaStream_t / hipStream_t; ignored by the CPU backend */
  /* ---- ABI v2: appended, the fields above keep their offsets ---- */
  int64_t heads_kv; /* K/V heads: >= 1, heads % heads_kv == 0; k and v are [B, heads_kv, Sk, D] */
  int32_t mask;     /* ra_mask */
  int32_t reserved; /* must be 0 */
  /* Variable length: both null (dense) or both set. Set: int32[batch + 1], cu[0] = 0, non-decreasing,
   * cu[batch] = seqlen_q (resp. seqlen_k); device pointers on GPU backends. Q/O rows of sequence b
   * are rows cu_seqlens_q[b] .. cu_seqlens_q[b+1]-1 of a packed [total, H, D] tensor addressed with
   * stride[0] = 0 (the batch stride is unused); lengths 0 and 1 are allowed. */
  const int32_t* cu_seqlens_q;
  const int32_t* cu_seqlens_k;
  int64_t max_seqlen_q; /* varlen: >= every q length, <= seqlen_q; dense: must be 0 */
  int64_t max_seqlen_k; /* varlen: >= every k length, <= seqlen_k; dense: must be 0 */
  /* Optional (null: not written). fp32, 4-byte aligned, contiguous: dense [B, H, Sq] at
   * (b*H + h)*Sq + i; varlen [H, total_q] at h*seqlen_q + cu_seqlens_q[b] + i (FlashAttention's). */
  float* lse;
} ra_attention_params;

/* Runs the forward pass. Asynchronous on GPU backends (ordered on `stream`). */
ra_status ra_attention_fwd(const ra_attention_params* params, char* err, size_t err_len);

/* Checks the parameters only (shared by all backends; see kernel/common/validate.h). */
ra_status ra_validate(const ra_attention_params* params, char* err, size_t err_len);

/* ---- The launch plan: which kernels run for a shape (issue 37) ----
 * Each GPU backend has one pure host planner (no device calls, buildable host-only with the system
 * C++ compiler); its launch code, the emulator, the benchmarks and the service all ask it, so the
 * rule that picks a kernel exists once. Device facts are passed in, never probed by the planner. */
#define RA_PLAN_KIND_LEN 32

typedef struct {
  int32_t compute_units;       /* SMs (CUDA) or CUs (HIP) of the device that will run the launch */
  int64_t max_workspace_bytes; /* the most scratch the launch may allocate; <= 0: the backend's default */
} ra_device_facts;

typedef enum {
  RA_MERGE_NONE = 0,   /* no key split: the kernel rounds its own output */
  RA_MERGE_KERNEL = 1, /* the last part of each split tile merges inside the kernel */
  RA_MERGE_LAUNCH = 2  /* a separate merge launch rounds the partials */
} ra_merge;

typedef struct {
  char kind[RA_PLAN_KIND_LEN]; /* the kernel that runs, a stable name ("sm90_main", "gfx942_tail_split", ...) */
  int32_t kind_id;             /* the backend's enum value of `kind` */
  int32_t threads;             /* per block (CUDA) or workgroup (HIP) */
  int64_t grid[3];             /* blocks or workgroups launched, x y z */
  int64_t tiles;               /* (batch, head, query block) tiles of the unsplit launch */
  int32_t block_q;             /* query rows per tile */
  int32_t block_k;             /* keys per key block */
  int32_t key_blocks;          /* key blocks per tile */
  int32_t splits;              /* key splits of every tile (1: none) */
  int64_t split_tiles;         /* tiles cut by the tail split (0: none) */
  int32_t tail_splits;         /* parts per tail tile (0: no tail split) */
  int32_t blocks_per_split;    /* key blocks per part (split or tail split); the last may have fewer */
  int32_t merge;               /* ra_merge */
  int32_t dynamic_scheduler;   /* 1: CTAs take tiles from a counter instead of a static order */
  int64_t shared_bytes;        /* dynamic shared memory (LDS) per block */
  int64_t workspace_bytes;     /* scratch the launch allocates (partials, counters) */
} ra_launch_plan;

/* The plan for `params` on a device with `device`'s facts: validates `params` exactly as
 * ra_attention_fwd does, touches no memory behind its pointers and no device. */
ra_status ra_plan_launch(const ra_attention_params* params, const ra_device_facts* device, ra_launch_plan* plan,
                         char* err, size_t err_len);

/* "cpu", "cuda" or "hip". */
const char* ra_backend_name(void);

/* Build facts compiled in: flags, injected fault (for fire drills), ABI version, as JSON. */
const char* ra_build_info(void);

#ifdef __cplusplus
}
#endif

#endif /* REGRESS_ATTN_H */
