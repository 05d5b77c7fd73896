"""The fp64 attention reference and the torch side of the bit patterns: what the ULP suite and the
tests compare a kernel's bf16 output against. The rounding and ULP measures themselves are torch-free
in regress/numerics.py (docs/numerics.md is the contract)."""

from __future__ import annotations

import numpy as np
import torch

from .results import Layout

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


def reference_attention(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, *, layout: Layout, scale: float | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """The exact reference in fp64: (ref = P·V, mag = P·|V|), both [B,H,Sq,D] numpy float64.

    P = softmax(scale · Q Kᵀ) computed naively (max, exp, sum, divide) so that NaN and Inf follow
    IEEE rules: a NaN anywhere in a row's scores or an all -inf row gives NaN. Chunked over heads and
    query rows to bound memory. Computed on the inputs' device: on a GPU the fp64 matmuls take
    milliseconds instead of seconds of shared CPU cores (fp64 is exact enough either way: the result
    is rounded once to bf16, and IEEE fp64 arithmetic is the same on both).
    """
    dev = q.device
    qh, kh, vh = (_to_bhsd(t, layout) for t in (q, k, v))
    b, h, sq, d = qh.shape
    sk = kh.shape[2]
    s = (1.0 / d**0.5) if scale is None else float(scale)
    ref = np.empty((b, h, sq, d), dtype=np.float64)
    mag = np.empty((b, h, sq, d), dtype=np.float64)
    rows = max(1, _CHUNK_ELEMS // sk)
    for bi in range(b):
        for hi in range(h):
            kk = kh[bi, hi].detach().to(dev, torch.float64)
            vv = vh[bi, hi].detach().to(dev, torch.float64)
            kt = kk.T.contiguous()
            for r0 in range(0, sq, rows):
                qq = qh[bi, hi, r0 : r0 + rows].detach().to(dev, torch.float64)
                scores = _mm(qq, kt) * s
                m = scores.amax(dim=-1, keepdim=True)  # amax propagates NaN
                e = torch.exp(scores - m)
                p = e / e.sum(dim=-1, keepdim=True)
                ref[bi, hi, r0 : r0 + rows] = _mm(p, vv).cpu().numpy()
                mag[bi, hi, r0 : r0 + rows] = _mm(p, vv.abs()).cpu().numpy()
    return ref, mag


def to_bhsd_bits(o: torch.Tensor, layout: Layout) -> np.ndarray:
    """A kernel output (in its layout) as [B,H,Sq,D] bf16 bit patterns, ready to compare with the
    reference."""
    return tensor_bits(_to_bhsd(o, layout))
