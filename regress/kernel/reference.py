"""The fp64 attention reference and the torch side of the bit patterns: what the ULP suite and the
tests compare a kernel's bf16 output against. The rounding and ULP measures themselves are torch-free
in regress/facts/numerics.py (docs/numerics.md is the contract)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from regress.facts.results import Layout, Mask

# Reference chunks hold at most this many fp64 score elements (64 MiB).
_CHUNK_ELEMS = 1 << 23


def tensor_bits(t: torch.Tensor) -> np.ndarray:
    """A torch bfloat16 tensor's bit patterns as a numpy uint16 array (same shape)."""
    if t.dtype != torch.bfloat16:
        raise TypeError(f"expected a bfloat16 tensor, got {t.dtype}")
    return t.detach().cpu().contiguous().view(torch.int16).numpy().view(np.uint16)


def _to_bhsd(t: torch.Tensor, layout: Layout) -> torch.Tensor:
    if layout == "bshd":
        return t.transpose(1, 2)
    if layout == "bhsd":
        return t
    raise ValueError(f"layout {layout!r} is not 'bshd' or 'bhsd'")


def _ieee_matmul(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """a @ b by broadcast multiply and sum: every product is formed, so 0 * Inf = NaN is honoured
    (a BLAS may skip zero terms). Only used when an operand is non-finite."""
    rows = max(1, _CHUNK_ELEMS // max(1, a.shape[-1] * b.shape[-1]))
    parts = [
        (a[..., i : i + rows, :, None] * b[..., None, :, :]).sum(-2) for i in range(0, a.shape[-2], rows)
    ]
    return torch.cat(parts, dim=-2)


def _mm(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    if bool(torch.isfinite(a).all()) and bool(torch.isfinite(b).all()):
        return a @ b
    return _ieee_matmul(a, b)


@dataclass(frozen=True)
class Reference:
    """The fp64 reference of one call: ref = P·V and mag = P·|V| in the output's row order (dense
    [B,H,Sq,D]; varlen [total_q,H,D]), and lse = log Σ exp(scaled scores) (dense [B,H,Sq]; varlen
    [H,total_q]). Rows with no visible key: ref = mag = 0, lse = -inf."""

    ref: np.ndarray
    mag: np.ndarray
    lse: np.ndarray


def visible_keys(mask: Mask, sq: int, sk: int) -> np.ndarray:
    """Per query row of a sequence, how many keys it sees (a prefix [0, n) of the keys): the one
    statement of the masks' alignment on the Python side (kernel/cpu/attention_cpu.cpp's
    visible_keys is the C one)."""
    i = np.arange(sq, dtype=np.int64)
    if mask == "none":
        return np.full(sq, sk, dtype=np.int64)
    if mask == "causal_top_left":
        return np.minimum(i + 1, sk)
    if mask == "causal_bottom_right":
        return np.clip(i + 1 + sk - sq, 0, sk)
    raise ValueError(f"mask {mask!r} is not one of none, causal_top_left, causal_bottom_right")


def _head_rows(
    qq: torch.Tensor, kk: torch.Tensor, vv: torch.Tensor, n: np.ndarray, s: float
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """One head's rows (qq [rows, D]) against its keys: row r sees keys [0, n[r])."""
    rows, d = qq.shape
    sk = kk.shape[0]
    ref = np.zeros((rows, d), dtype=np.float64)
    mag = np.zeros((rows, d), dtype=np.float64)
    lse = np.full(rows, -np.inf, dtype=np.float64)
    live = n > 0
    if sk == 0 or not live.any():
        return ref, mag, lse
    scores = _mm(qq, kk.T.contiguous()) * s
    masked = bool((n < sk).any())
    if masked:
        cols = torch.arange(sk, device=qq.device)
        hidden = cols[None, :] >= torch.as_tensor(n, device=qq.device)[:, None]
        scores = scores.masked_fill(hidden, -torch.inf)  # a masked key's score (even NaN) is not read
    m = scores.amax(dim=-1, keepdim=True)  # amax propagates NaN
    e = torch.exp(scores - m)
    tot = e.sum(dim=-1, keepdim=True)
    p = e / tot
    if masked and not bool(torch.isfinite(vv).all()):
        # A masked key's V is not read either: 0 · Inf would be NaN, so each row takes its prefix.
        for r in np.nonzero(live)[0]:
            pr, vr = p[r : r + 1, : n[r]], vv[: n[r]]
            ref[r] = _mm(pr, vr).cpu().numpy()[0]
            mag[r] = _mm(pr, vr.abs()).cpu().numpy()[0]
    else:
        if masked:
            p = p.masked_fill(hidden, 0.0)
        ref[:] = _mm(p, vv).cpu().numpy()
        mag[:] = _mm(p, vv.abs()).cpu().numpy()
    lse[:] = (m + torch.log(tot)).squeeze(-1).cpu().numpy()
    ref[~live] = 0.0
    mag[~live] = 0.0
    lse[~live] = -np.inf
    return ref, mag, lse


def reference_full(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    *,
    layout: Layout,
    scale: float | None = None,
    mask: Mask = "none",
) -> Reference:
    """The exact reference in fp64 of a dense call, with its mask and grouped-query heads (k, v may
    have a divisor of q's heads: query head h reads K/V head h // (H / H_kv)).

    P = softmax(scale · Q Kᵀ) computed naively (max, exp, sum, divide) so that NaN and Inf follow
    IEEE rules: a NaN anywhere in a row's visible scores or an all -inf row gives NaN; masked keys
    are not read. Chunked over heads and query rows to bound memory. Computed on the inputs' device:
    on a GPU the fp64 matmuls take milliseconds instead of seconds of shared CPU cores (fp64 is exact
    enough either way: the result is rounded once to bf16, and IEEE fp64 arithmetic is the same on
    both).
    """
    dev = q.device
    qh, kh, vh = (_to_bhsd(t, layout) for t in (q, k, v))
    b, h, sq, d = qh.shape
    hk, sk = kh.shape[1], kh.shape[2]
    if hk < 1 or h % hk:
        raise ValueError(f"k has {hk} heads, which do not divide q's {h}")
    group = h // hk
    s = (1.0 / d**0.5) if scale is None else float(scale)
    n_all = visible_keys(mask, sq, sk)
    ref = np.empty((b, h, sq, d), dtype=np.float64)
    mag = np.empty((b, h, sq, d), dtype=np.float64)
    lse = np.empty((b, h, sq), dtype=np.float64)
    rows = max(1, _CHUNK_ELEMS // max(1, sk))
    for bi in range(b):
        for hi in range(h):
            kk = kh[bi, hi // group].detach().to(dev, torch.float64)
            vv = vh[bi, hi // group].detach().to(dev, torch.float64)
            for r0 in range(0, sq, rows):
                qq = qh[bi, hi, r0 : r0 + rows].detach().to(dev, torch.float64)
                r1 = r0 + qq.shape[0]
                out = _head_rows(qq, kk, vv, n_all[r0:r1], s)
                ref[bi, hi, r0:r1], mag[bi, hi, r0:r1], lse[bi, hi, r0:r1] = out
    return Reference(ref, mag, lse)


def reference_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    *,
    layout: Layout,
    scale: float | None = None,
    mask: Mask = "none",
) -> tuple[np.ndarray, np.ndarray]:
    """The exact reference in fp64: (ref = P·V, mag = P·|V|), both [B,H,Sq,D] numpy float64 (see
    reference_full, which also gives the log-sum-exp)."""
    r = reference_full(q, k, v, layout=layout, scale=scale, mask=mask)
    return r.ref, r.mag


def reference_varlen(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    cu_seqlens_q: torch.Tensor | list[int],
    cu_seqlens_k: torch.Tensor | list[int],
    *,
    scale: float | None = None,
    mask: Mask = "none",
) -> Reference:
    """The fp64 reference of a varlen call: q, k, v packed [total, H, D]; sequence b is rows
    cu[b] .. cu[b+1]-1, masks per sequence. ref, mag [total_q, H, D]; lse [H, total_q]."""
    cq = [int(x) for x in cu_seqlens_q]
    ck = [int(x) for x in cu_seqlens_k]
    total_q, h, d = q.shape
    ref = np.zeros((total_q, h, d), dtype=np.float64)
    mag = np.zeros((total_q, h, d), dtype=np.float64)
    lse = np.full((h, total_q), -np.inf, dtype=np.float64)
    for bi in range(len(cq) - 1):
        q0, q1, k0, k1 = cq[bi], cq[bi + 1], ck[bi], ck[bi + 1]
        if q1 == q0:
            continue
        r = reference_full(
            q[None, q0:q1], k[None, k0:k1], v[None, k0:k1], layout="bshd", scale=scale, mask=mask
        )
        ref[q0:q1] = r.ref[0].transpose(1, 0, 2)
        mag[q0:q1] = r.mag[0].transpose(1, 0, 2)
        lse[:, q0:q1] = r.lse[0]
    return Reference(ref, mag, lse)


def to_bhsd_bits(o: torch.Tensor, layout: Layout) -> np.ndarray:
    """A kernel output (in its layout) as [B,H,Sq,D] bf16 bit patterns, ready to compare with the
    reference."""
    return tensor_bits(_to_bhsd(o, layout))
