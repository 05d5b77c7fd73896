/*
 * gqa_rows.h — a grouped-query call whose query heads of one K/V head can be addressed as rows of
 * one dense head, seen as that dense call (issue 40: decode's GQA lever).
 *
 * Query head h reads K/V head h / g (g = heads / heads_kv). In a decode call (seqlen_q = 1) the g
 * query heads of K/V head j are g rows with the head stride between them, so the call is the same
 * arithmetic as a dense (heads_kv = heads) call of heads_kv heads, g query rows each, query row r of
 * head j at the query head j g + r's row:
 *   view.heads = heads_kv, view.seqlen_q = g, q/o seq stride = the head stride, head stride = g x it.
 * The same holds for any seqlen_q where a query row's next row is g heads on (seq stride = g x head
 * stride: BSHD with heads_kv = 1, MQA): row s g + r is query row s of head j g + r. Every output row
 * sees the same keys as before, so the dense kernels (and their split over keys, which the v2 kernels
 * lack) compute it: one key tile feeds g heads' rows instead of being read once per head, and a
 * decode of one sequence becomes a split that fills the machine.
 *
 * Only where no mask tells the rows apart: mask none, or causal bottom-right with seqlen_q = 1 (the one
 * row sees every key: j <= 0 + Sk - 1). Not with varlen (lengths are in device memory) or an LSE (the
 * dense kernels write none). The view is validated as any call is; a view that would be refused is
 * not taken. Pure host C.
 */
#ifndef REGRESS_GQA_ROWS_H
#define REGRESS_GQA_ROWS_H

#include <stdint.h>

#include "validate.h"

/* 1 and *view filled where `p` (a valid call) can run as a dense call; 0 and *view untouched otherwise. */
static inline int ra_gqa_rows_view(const ra_attention_params* p, ra_attention_params* view) {
  if (p->heads_kv >= p->heads || p->cu_seqlens_q != NULL || p->lse != NULL) return 0;
  const int64_t g = p->heads / p->heads_kv;
  const int decode = p->seqlen_q == 1;
  if (!(p->mask == RA_MASK_NONE || (decode && p->mask == RA_MASK_CAUSAL_BOTTOM_RIGHT))) return 0;
  if (p->q_stride[1] > INT64_MAX / g || p->o_stride[1] > INT64_MAX / g) return 0;
  if (!decode && (p->q_stride[2] != g * p->q_stride[1] || p->o_stride[2] != g * p->o_stride[1])) return 0;
  ra_attention_params v = *p;
  v.heads = p->heads_kv;
  v.seqlen_q = p->seqlen_q * g;
  v.mask = RA_MASK_NONE;
  v.q_stride[1] = g * p->q_stride[1];
  v.q_stride[2] = p->q_stride[1];
  v.o_stride[1] = g * p->o_stride[1];
  v.o_stride[2] = p->o_stride[1];
  if (ra_validate_params(&v, NULL, 0) != RA_OK) return 0;
  *view = v;
  return 1;
}

#endif /* REGRESS_GQA_ROWS_H */
