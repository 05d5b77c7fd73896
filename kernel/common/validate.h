/*
 * validate.h — the argument checks every backend runs before touching memory.
 * Header-only so that the CPU, CUDA and HIP libraries refuse exactly the same inputs.
 */
#ifndef REGRESS_VALIDATE_H
#define REGRESS_VALIDATE_H

#include <stdio.h>
#include <stdarg.h>
#include "../include/regress_attn.h"

static inline ra_status ra_fail(char* err, size_t err_len, ra_status code, const char* fmt, ...) {
  if (err && err_len) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, err_len, fmt, ap);
    va_end(ap);
  }
  return code;
}

static inline ra_status ra_check_tensor(const char* name, const void* ptr, const int64_t stride[4],
                                        int64_t seqlen, int64_t heads, char* err, size_t err_len) {
  if (!ptr) return ra_fail(err, err_len, RA_ERR_NULL_POINTER, "%s is a null pointer", name);
  if (((uintptr_t)ptr) % 16 != 0)
    return ra_fail(err, err_len, RA_ERR_ALIGNMENT, "%s is not 16-byte aligned (address %p)", name, ptr);
  if (stride[3] != 1)
    return ra_fail(err, err_len, RA_ERR_STRIDE, "%s dim stride is %lld, must be 1 (head_dim contiguous)",
                   name, (long long)stride[3]);
  for (int i = 0; i < 3; ++i) {
    if (stride[i] < 0)
      return ra_fail(err, err_len, RA_ERR_STRIDE, "%s stride[%d] is negative (%lld)", name, i,
                     (long long)stride[i]);
    if (stride[i] % 8 != 0)
      return ra_fail(err, err_len, RA_ERR_STRIDE,
                     "%s stride[%d] = %lld is not a multiple of 8 elements (16-byte rows required)", name, i,
                     (long long)stride[i]);
  }
  /* Rows must not overlap: the seq and head strides must each span a full row of 128. */
  if ((seqlen > 1 && stride[2] < RA_HEAD_DIM) || (heads > 1 && stride[1] < RA_HEAD_DIM))
    return ra_fail(err, err_len, RA_ERR_STRIDE, "%s strides (head %lld, seq %lld) overlap rows of %d elements",
                   name, (long long)stride[1], (long long)stride[2], RA_HEAD_DIM);
  return RA_OK;
}

static inline ra_status ra_validate_params(const ra_attention_params* p, char* err, size_t err_len) {
  if (!p) return ra_fail(err, err_len, RA_ERR_NULL_POINTER, "params is a null pointer");
  if (p->abi_version != RA_ABI_VERSION)
    return ra_fail(err, err_len, RA_ERR_ABI, "abi_version %u, this library implements %d",
                   (unsigned)p->abi_version, RA_ABI_VERSION);
  if (p->head_dim != RA_HEAD_DIM)
    return ra_fail(err, err_len, RA_ERR_HEAD_DIM, "head_dim %lld is not supported (only %d)",
                   (long long)p->head_dim, RA_HEAD_DIM);
  if (p->batch < 1 || p->heads < 1 || p->seqlen_q < 1 || p->seqlen_k < 1)
    return ra_fail(err, err_len, RA_ERR_SHAPE, "shape B=%lld H=%lld Sq=%lld Sk=%lld: every size must be >= 1",
                   (long long)p->batch, (long long)p->heads, (long long)p->seqlen_q, (long long)p->seqlen_k);
  /* Each size, and batch x heads, must fit the backends' int indexing. Each size is bounded before
   * the product is taken, so the product cannot wrap (B = H = 2^32 used to pass as 0). */
  const long long kMaxIndex = 2147483647LL;
  if (p->batch > kMaxIndex || p->heads > kMaxIndex || p->seqlen_q > kMaxIndex || p->seqlen_k > kMaxIndex ||
      p->batch * p->heads > kMaxIndex)
    return ra_fail(err, err_len, RA_ERR_SHAPE,
                   "shape B=%lld H=%lld Sq=%lld Sk=%lld too large: each size and B*H must be < 2^31 (32-bit "
                   "grid indexing)",
                   (long long)p->batch, (long long)p->heads, (long long)p->seqlen_q, (long long)p->seqlen_k);
  if (p->rounding < RA_RTNE || p->rounding > RA_RTZ)
    return ra_fail(err, err_len, RA_ERR_ROUNDING, "rounding mode %d is not 0 (rtne), 1 (rtna) or 2 (rtz)",
                   (int)p->rounding);
  ra_status s;
  if ((s = ra_check_tensor("q", p->q, p->q_stride, p->seqlen_q, p->heads, err, err_len)) != RA_OK) return s;
  if ((s = ra_check_tensor("k", p->k, p->k_stride, p->seqlen_k, p->heads, err, err_len)) != RA_OK) return s;
  if ((s = ra_check_tensor("v", p->v, p->v_stride, p->seqlen_k, p->heads, err, err_len)) != RA_OK) return s;
  if ((s = ra_check_tensor("o", p->o, p->o_stride, p->seqlen_q, p->heads, err, err_len)) != RA_OK) return s;
  return RA_OK;
}

/* 1/sqrt(128) unless the caller gave a positive finite scale. */
static inline float ra_effective_scale(const ra_attention_params* p) {
  float s = p->scale;
  return (s > 0.0f && s < 3.0e38f) ? s : 0.08838834764831845f;
}

#endif /* REGRESS_VALIDATE_H */
