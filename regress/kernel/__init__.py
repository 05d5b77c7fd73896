"""The public entry point: `attention()`, with its back-out switch to the vendor baseline.

The C ABI mirror and the checks are regress.facts.abi, loading libraries regress.kernel.loader, the
torch operator regress.kernel.op; the names a caller of a built library needs are re-exported here
as the package's API.
"""

from __future__ import annotations

import os
import warnings
from typing import Any, Literal

import torch

from regress.facts.abi import RA_ERR_UNSUPPORTED, KernelError, Library
from regress.facts.results import Layout, Rounding
from regress.kernel.loader import KernelLibrary, default_library, load_library

__all__ = [
    "RA_ERR_UNSUPPORTED",
    "KernelError",
    "KernelLibrary",
    "Library",
    "attention",
    "attention_varlen",
    "default_library",
    "load_library",
]


def attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    *,
    layout: Layout = "bshd",
    rounding: Rounding = "rtna",
    scale: float | None = None,
    use: Literal["kernel", "baseline"] | None = None,
    is_causal: bool = False,
    causal_alignment: Literal["top_left", "bottom_right"] = "top_left",
    enable_gqa: bool = False,
) -> torch.Tensor:
    """Attention forward, O = softmax(scale · Q Kᵀ + mask) V, bf16, head_dim 128, output in q's layout.

    q is [B,Sq,H,D] (layout "bshd") or [B,H,Sq,D] ("bhsd"); k, v the same with Sk. `scale` defaults to
    1/sqrt(128). `rounding` picks the fp32 -> bf16 rounding of the output: "rtne", "rtna" or "rtz".
    is_causal and enable_gqa as SDPA's: is_causal masks key j from query row i unless j <= i (top
    left; causal_alignment="bottom_right" aligns the diagonal to the last key, j <= i + Sk - Sq, as
    torch.nn.attention.bias.causal_lower_right and FlashAttention); enable_gqa lets k, v have a divisor
    of q's heads (query head h reads K/V head h // (H / H_kv)). A row with no visible key gives 0.

    Which implementation runs:
      * use="kernel": this project's kernel for q's device (CPU golden model on CPU tensors, the
        CUDA or HIP kernel on GPU tensors), built on first use by regress.native.build.build_kernel, called
        through the operator torch.ops.regress.attention (regress.kernel.op), so torch.compile traces it
        without a graph break and a CUDA call can be captured in a CUDA graph. Forward only:
        inputs that require grad (with grad mode on) are refused.
      * use="baseline": the vendor baseline for q's device (regress.kernel.baselines): SDPA on CPU and
        NVIDIA, AITER on ROCm. SDPA rounds with rtne only; asking it for another mode warns.
      * use=None (default): the kernel, unless the environment variable REGRESS_ATTENTION=baseline
        is set. That variable is the back-out switch: when a nightly goes red, set it and callers get
        the baseline without a code change.
    """
    if use is None:
        env = os.environ.get("REGRESS_ATTENTION")  # read per call, so only when set is it parsed
        use = "baseline" if env and env.strip().lower() == "baseline" else "kernel"
    if use == "baseline":
        if is_causal or enable_gqa:
            raise ValueError(
                "the baseline back-out path runs dense attention only: is_causal and enable_gqa need "
                "use='kernel'"
            )
        return _baseline_attention(q, k, v, layout=layout, rounding=rounding, scale=scale)
    if use != "kernel":
        raise ValueError(f"use={use!r}: expected 'kernel', 'baseline' or None")
    if torch.is_grad_enabled() and (q.requires_grad or k.requires_grad or v.requires_grad):
        # The operator has no backward; torch's fallback would only warn and drop the gradient.
        raise ValueError(
            "the kernel is forward-only (no backward): call it under torch.no_grad() or "
            "torch.inference_mode(), or pass tensors that do not require grad"
        )
    op = _OPS[0] if _OPS else _ops()[0]
    try:
        return op(q, k, v, layout, rounding, scale, is_causal, causal_alignment, enable_gqa)  # type: ignore[no-any-return]
    except RuntimeError as exc:
        raise _kernel_error(exc) from None


def attention_varlen(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    cu_seqlens_q: torch.Tensor,
    cu_seqlens_k: torch.Tensor,
    max_seqlen_q: int,
    max_seqlen_k: int,
    *,
    softmax_scale: float | None = None,
    causal: bool = False,
    rounding: Rounding = "rtna",
    return_lse: bool = False,
) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
    """Packed variable-length attention with flash_attn_varlen_func's arguments: q [total_q, H, D],
    k, v [total_k, H_kv, D] (H_kv divides H), cu_seqlens_q/k int32 [B + 1] on q's device (sequence b
    is rows cu[b] .. cu[b+1]-1; lengths 0 and 1 allowed), max_seqlen_q/k bounds on the lengths.
    `causal` is bottom-right per sequence, as FlashAttention >= 2.1. Returns out [total_q, H, D], and
    with return_lse=True also the fp32 log-sum-exp [H, total_q] (-inf for a row with no visible key).
    Forward only, through torch.ops.regress.varlen_attention."""
    if torch.is_grad_enabled() and (q.requires_grad or k.requires_grad or v.requires_grad):
        raise ValueError(
            "the kernel is forward-only (no backward): call it under torch.no_grad() or "
            "torch.inference_mode(), or pass tensors that do not require grad"
        )
    op = _OPS[1] if _OPS else _ops()[1]
    try:
        out, lse = op(
            q,
            k,
            v,
            cu_seqlens_q,
            cu_seqlens_k,
            max_seqlen_q,
            max_seqlen_k,
            0.0,
            softmax_scale,
            causal,
            rounding,
        )
    except RuntimeError as exc:
        raise _kernel_error(exc) from None
    return (out, lse) if return_lse else out


# The two operators, imported on the first call (importing regress.kernel.op loads, or first builds, the
# C++ operator library; the suites import this module without needing it).
_OPS: list[Any] = []


def _ops() -> list[Any]:
    from regress.kernel.op import attention_op, varlen_attention_op

    _OPS[:] = [attention_op, varlen_attention_op]
    return _OPS


def _kernel_error(exc: RuntimeError) -> RuntimeError:
    """A refusal of the C++ kernels as the KernelError the Python path raises; other errors as they are."""
    from regress.kernel.op import kernel_error

    return kernel_error(exc) or exc


def _baseline_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    *,
    layout: Layout,
    rounding: Rounding,
    scale: float | None,
) -> torch.Tensor:
    from regress.kernel.baselines import available_baselines

    found = available_baselines(str(q.device.type))
    if not found:
        raise RuntimeError(f"no baseline attention kernel is available on {q.device}")
    b, h, sq, _ = q.shape if layout == "bhsd" else (q.shape[0], q.shape[2], q.shape[1], q.shape[3])
    sk = k.shape[2] if layout == "bhsd" else k.shape[1]
    fits = [bl for bl in found if bl.supports_shape(b, h, sq, sk)] or found
    chosen = next((bl for bl in fits if bl.supports(rounding)), None)
    if chosen is None:
        chosen = fits[0]
        warnings.warn(
            f"baseline {chosen.name} cannot round with {rounding}; it rounds with rtne", stacklevel=3
        )
        rounding = "rtne"
    return chosen(q, k, v, layout=layout, rounding=rounding, scale=scale)
