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
  /* First, before any v2 field is read: a v1 caller's block is shorter. */
  if (p->abi_version != RA_ABI_VERSION)
    return ra_fail(err, err_len, RA_ERR_ABI,
                   "abi_version %u, this library implements %d (v2 appended heads_kv, mask, cu_seqlens_q/k, "
                   "max_seqlen_q/k and lse to ra_attention_params: rebuild the caller against regress_attn.h)",
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
  if (p->heads_kv < 1 || p->heads_kv > p->heads || p->heads % p->heads_kv != 0)
    return ra_fail(err, err_len, RA_ERR_SHAPE,
                   "heads_kv %lld: must be >= 1 and divide heads %lld (query head h reads K/V head h / (heads / "
                   "heads_kv))",
                   (long long)p->heads_kv, (long long)p->heads);
  if (p->mask < RA_MASK_NONE || p->mask > RA_MASK_CAUSAL_BOTTOM_RIGHT)
    return ra_fail(err, err_len, RA_ERR_MASK,
                   "mask %d is not 0 (none), 1 (causal top-left) or 2 (causal bottom-right)", (int)p->mask);
  if (p->reserved != 0)
    return ra_fail(err, err_len, RA_ERR_ABI, "reserved is %d, must be 0", (int)p->reserved);
  if ((p->cu_seqlens_q == NULL) != (p->cu_seqlens_k == NULL))
    return ra_fail(err, err_len, RA_ERR_SEQLENS, "%s is null but %s is not: give both (varlen) or neither",
                   p->cu_seqlens_q ? "cu_seqlens_k" : "cu_seqlens_q", p->cu_seqlens_q ? "cu_seqlens_q" : "cu_seqlens_k");
  if (p->cu_seqlens_q) {
    if (((uintptr_t)p->cu_seqlens_q) % 4 != 0 || ((uintptr_t)p->cu_seqlens_k) % 4 != 0)
      return ra_fail(err, err_len, RA_ERR_ALIGNMENT, "%s is not 4-byte aligned (int32 entries)",
                     ((uintptr_t)p->cu_seqlens_q) % 4 ? "cu_seqlens_q" : "cu_seqlens_k");
    if (p->max_seqlen_q < 0 || p->max_seqlen_q > p->seqlen_q || p->max_seqlen_k < 0 || p->max_seqlen_k > p->seqlen_k)
      return ra_fail(err, err_len, RA_ERR_SEQLENS,
                     "max_seqlen_q %lld / max_seqlen_k %lld: each must be in [0, packed total] (seqlen_q %lld, "
                     "seqlen_k %lld)",
                     (long long)p->max_seqlen_q, (long long)p->max_seqlen_k, (long long)p->seqlen_q,
                     (long long)p->seqlen_k);
    const int64_t* st[4] = {p->q_stride, p->k_stride, p->v_stride, p->o_stride};
    const char* names[4] = {"q", "k", "v", "o"};
    for (int i = 0; i < 4; ++i)
      if (st[i][0] != 0)
        return ra_fail(err, err_len, RA_ERR_STRIDE,
                       "%s_stride[0] = %lld: must be 0 with cu_seqlens (packed rows, no batch stride)", names[i],
                       (long long)st[i][0]);
  } else if (p->max_seqlen_q != 0 || p->max_seqlen_k != 0) {
    return ra_fail(err, err_len, RA_ERR_SEQLENS,
                   "max_seqlen_q %lld / max_seqlen_k %lld given without cu_seqlens_q/k: must be 0 in a dense call",
                   (long long)p->max_seqlen_q, (long long)p->max_seqlen_k);
  }
  if (p->lse && ((uintptr_t)p->lse) % 4 != 0)
    return ra_fail(err, err_len, RA_ERR_ALIGNMENT, "lse is not 4-byte aligned (address %p)", (void*)p->lse);
  ra_status s;
  if ((s = ra_check_tensor("q", p->q, p->q_stride, p->seqlen_q, p->heads, err, err_len)) != RA_OK) return s;
  if ((s = ra_check_tensor("k", p->k, p->k_stride, p->seqlen_k, p->heads_kv, err, err_len)) != RA_OK) return s;
  if ((s = ra_check_tensor("v", p->v, p->v_stride, p->seqlen_k, p->heads_kv, err, err_len)) != RA_OK) return s;
  if ((s = ra_check_tensor("o", p->o, p->o_stride, p->seqlen_q, p->heads, err, err_len)) != RA_OK) return s;
  return RA_OK;
}

/* The contents of cu_seqlens_q/k, for a backend whose pointers are host memory (the CPU backend;
 * a GPU backend checks them on the device): cu[0] = 0, non-decreasing, cu[batch] = the packed total,
 * every length <= its max_seqlen. Call after ra_validate_params. */
static inline ra_status ra_check_seqlens_host(const ra_attention_params* p, char* err, size_t err_len) {
  if (!p->cu_seqlens_q) return RA_OK;
  const int32_t* cu[2] = {p->cu_seqlens_q, p->cu_seqlens_k};
  const char* names[2] = {"cu_seqlens_q", "cu_seqlens_k"};
  const int64_t total[2] = {p->seqlen_q, p->seqlen_k};
  const int64_t maxlen[2] = {p->max_seqlen_q, p->max_seqlen_k};
  for (int t = 0; t < 2; ++t) {
    if (cu[t][0] != 0)
      return ra_fail(err, err_len, RA_ERR_SEQLENS, "%s[0] = %d, must be 0", names[t], (int)cu[t][0]);
    for (int64_t b = 0; b < p->batch; ++b) {
      const int64_t len = (int64_t)cu[t][b + 1] - (int64_t)cu[t][b];
      if (len < 0)
        return ra_fail(err, err_len, RA_ERR_SEQLENS, "%s decreases at entry %lld (%d -> %d)", names[t],
                       (long long)(b + 1), (int)cu[t][b], (int)cu[t][b + 1]);
      if (len > maxlen[t])
        return ra_fail(err, err_len, RA_ERR_SEQLENS, "sequence %lld has length %lld > max_seqlen_%c %lld",
                       (long long)b, (long long)len, t ? 'k' : 'q', (long long)maxlen[t]);
    }
    if ((int64_t)cu[t][p->batch] != total[t])
      return ra_fail(err, err_len, RA_ERR_SEQLENS, "%s[batch=%lld] = %d, must equal the packed total %lld",
                     names[t], (long long)p->batch, (int)cu[t][p->batch], (long long)total[t]);
  }
  return RA_OK;
}

/* 1/sqrt(128) unless the caller gave a positive finite scale. */
static inline float ra_effective_scale(const ra_attention_params* p) {
  float s = p->scale;
  return (s > 0.0f && s < 3.0e38f) ? s : 0.08838834764831845f;
}

#endif /* REGRESS_VALIDATE_H */
