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

#define RA_ABI_VERSION 1
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
  RA_ERR_ABI = 8
} ra_status;

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
} ra_attention_params;

/* Runs the forward pass. Asynchronous on GPU backends (ordered on `stream`). */
ra_status ra_attention_fwd(const ra_attention_params* params, char* err, size_t err_len);

/* Checks the parameters only (shared by all backends; see kernel/common/validate.h). */
ra_status ra_validate(const ra_attention_params* params, char* err, size_t err_len);

/* "cpu", "cuda" or "hip". */
const char* ra_backend_name(void);

/* Build facts compiled in: flags, injected fault (for fire drills), ABI version, as JSON. */
const char* ra_build_info(void);

#ifdef __cplusplus
}
#endif

#endif /* REGRESS_ATTN_H */
