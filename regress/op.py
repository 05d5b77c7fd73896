"""The kernel as a PyTorch operator: `torch.ops.regress.attention`.

An operator in the `regress` namespace over the same C ABI library that `regress.kernel` loads with
ctypes (docs/architecture.md, "A torch operator over a C ABI library"): the library is still built
by the vendor compiler alone, with no torch C++ headers, and the operator is registered from Python.

  CPU tensors   the golden model (libregress_attn_cpu.so)
  CUDA tensors  the CUDA kernel, or the HIP kernel on a ROCm build of torch
  fake tensors  shape and dtype only, so torch.compile(fullgraph=True) traces through the op

Two operators: `attention` (dense, SDPA's is_causal / enable_gqa semantics plus the causal alignment)
and `varlen_attention` (packed sequences, flash_attn_varlen_func's argument order; causal is
bottom-right as in FlashAttention >= 2.1). docs/serving.md has a worked example of each.

Registered with `torch.library.Library` (define + one Python kernel per dispatch key + a fake
kernel) rather than the `torch.library.custom_op` decorator: the decorator adds a Python autograd
wrapper that runs on every call (~30 µs of host time per call measured on CPU, against ~4 µs for
the plain registration). The op is forward-only: its autograd kernel (CPU and CUDA) lets the forward
run and gives the output a backward that raises, where torch's fallback would only warn and return
no gradient. Inputs that need no gradient go straight to the kernel below autograd.

The CUDA kernel launches on torch's current stream, allocates nothing but the output (through
torch's allocator) and does no host synchronisation, so a call can be captured in a CUDA graph.
Warm up once before capturing: the first call per device builds or loads the library and sets the
kernel's shared-memory attribute, which are host-side steps a capture must not see for the first
time.
"""

from __future__ import annotations

from typing import Any

import torch

from regress.loader import backend_for_device, default_library
from regress.results import LAYOUTS

SCHEMA = (
    "attention(Tensor q, Tensor k, Tensor v, str layout='bshd', str rounding='rtna', float? scale=None,"
    " bool is_causal=False, str causal_alignment='top_left', bool enable_gqa=False) -> Tensor"
)
# FlashAttention's flash_attn_varlen_func argument order (q, k, v, cu_seqlens_q, cu_seqlens_k,
# max_seqlen_q, max_seqlen_k, dropout_p, softmax_scale, causal); rounding is ours. Returns
# (out [total_q, H, D], softmax_lse [H, total_q] fp32). `causal` is bottom-right, as FlashAttention.
VARLEN_SCHEMA = (
    "varlen_attention(Tensor q, Tensor k, Tensor v, Tensor cu_seqlens_q, Tensor cu_seqlens_k,"
    " int max_seqlen_q, int max_seqlen_k, float dropout_p=0.0, float? softmax_scale=None,"
    " bool causal=False, str rounding='rtna') -> (Tensor, Tensor)"
)
ALIGNMENTS = {"top_left": "causal_top_left", "bottom_right": "causal_bottom_right"}

_LIB = torch.library.Library("regress", "DEF")  # kept referenced: the registrations live as long as it
_LIB.define(SCHEMA)
_LIB.define(VARLEN_SCHEMA)


def dense_mask(is_causal: bool, causal_alignment: str) -> str:
    """The kernel's mask for SDPA-style arguments: is_causal with SDPA's top-left alignment unless
    causal_alignment='bottom_right' (torch.nn.attention.bias.causal_lower_right)."""
    if causal_alignment not in ALIGNMENTS:
        raise ValueError(f"causal_alignment {causal_alignment!r} is not 'top_left' or 'bottom_right'")
    if not is_causal:
        if causal_alignment != "top_left":
            raise ValueError(f"causal_alignment={causal_alignment!r} needs is_causal=True")
        return "none"
    return ALIGNMENTS[causal_alignment]


def _heads(t: torch.Tensor, layout: str) -> int:
    return int(t.shape[2] if layout == "bshd" else t.shape[1])


def check_gqa(q: torch.Tensor, k: torch.Tensor, layout: str, enable_gqa: bool) -> None:
    """SDPA's rule: K/V with fewer heads than Q only with enable_gqa, and then a divisor of Q's."""
    if q.dim() != 4 or k.dim() != 4 or layout not in LAYOUTS:
        return  # the kernel's checks name these
    hq, hk = _heads(q, layout), _heads(k, layout)
    if hq == hk:
        return
    if not enable_gqa:
        raise ValueError(f"q has {hq} heads and k {hk}: pass enable_gqa=True for grouped-query attention")
    if hk < 1 or hq % hk:
        raise ValueError(f"enable_gqa: q's {hq} heads are not a multiple of k's {hk}")


def _attention_impl(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    layout: str = "bshd",
    rounding: str = "rtna",
    scale: float | None = None,
    is_causal: bool = False,
    causal_alignment: str = "top_left",
    enable_gqa: bool = False,
) -> torch.Tensor:
    """O = softmax(scale · Q Kᵀ + mask) V with this project's kernel for q's device; see
    regress.kernel.attention for the arguments. The output is a new tensor of q's shape."""
    mask = dense_mask(is_causal, causal_alignment)
    check_gqa(q, k, layout, enable_gqa)
    lib = default_library(backend_for_device(q.device))
    return lib.forward(q, k, v, layout=layout, rounding=rounding, scale=scale, mask=mask)  # type: ignore[arg-type]


def _varlen_impl(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    cu_seqlens_q: torch.Tensor,
    cu_seqlens_k: torch.Tensor,
    max_seqlen_q: int,
    max_seqlen_k: int,
    dropout_p: float = 0.0,
    softmax_scale: float | None = None,
    causal: bool = False,
    rounding: str = "rtna",
) -> tuple[torch.Tensor, torch.Tensor]:
    """Packed sequences as flash_attn_varlen_func: (out, softmax_lse)."""
    if dropout_p != 0.0:
        raise ValueError(f"dropout_p={dropout_p}: the kernel has no dropout (inference only), pass 0.0")
    lse = torch.empty(
        (q.shape[1], q.shape[0]) if q.dim() == 3 else (0,), dtype=torch.float32, device=q.device
    )
    lib = default_library(backend_for_device(q.device))
    out = lib.forward(
        q,
        k,
        v,
        rounding=rounding,  # type: ignore[arg-type]
        scale=softmax_scale,
        mask="causal_bottom_right" if causal else "none",
        cu_seqlens_q=cu_seqlens_q,
        cu_seqlens_k=cu_seqlens_k,
        max_seqlen_q=max_seqlen_q,
        max_seqlen_k=max_seqlen_k,
        lse=lse,
    )
    return out, lse


for _key in ("CPU", "CUDA"):
    _LIB.impl("attention", _attention_impl, _key)
    _LIB.impl("varlen_attention", _varlen_impl, _key)


def backward_error(name: str) -> str:
    return (
        f"regress::{name} has no backward: the kernel is forward-only. Run it under torch.no_grad() "
        "or torch.inference_mode(), or detach its inputs"
    )


BACKWARD_ERROR = backward_error("attention")


class _ForwardOnly(torch.autograd.Function):
    """An op's forward, with a backward that refuses."""

    @staticmethod
    def forward(  # type: ignore[override]
        ctx: Any, name: str, keyset: torch._C.DispatchKeySet, *args: Any
    ) -> Any:
        ctx.op_name = name
        return _redispatch(name, keyset, *args)

    @staticmethod
    def backward(ctx: Any, *grads: torch.Tensor) -> None:  # type: ignore[override]
        raise RuntimeError(backward_error(ctx.op_name))


def _redispatch(name: str, keyset: torch._C.DispatchKeySet, *args: Any) -> Any:
    after = keyset & torch._C._after_autograd_keyset
    return getattr(torch.ops.regress, name).default.redispatch(after, *args)


def _needs_grad(*ts: torch.Tensor) -> bool:
    return torch.is_grad_enabled() and any(t.requires_grad for t in ts)


def _attention_autograd(
    keyset: torch._C.DispatchKeySet,
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    *args: Any,
) -> torch.Tensor:
    if _needs_grad(q, k, v):
        return _ForwardOnly.apply("attention", keyset, q, k, v, *args)  # type: ignore[no-any-return]
    return _redispatch("attention", keyset, q, k, v, *args)  # type: ignore[no-any-return]


def _varlen_autograd(
    keyset: torch._C.DispatchKeySet,
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    *args: Any,
) -> tuple[torch.Tensor, torch.Tensor]:
    if _needs_grad(q, k, v):
        return _ForwardOnly.apply("varlen_attention", keyset, q, k, v, *args)  # type: ignore[no-any-return]
    return _redispatch("varlen_attention", keyset, q, k, v, *args)  # type: ignore[no-any-return]


for _key in ("AutogradCPU", "AutogradCUDA"):
    _LIB.impl("attention", _attention_autograd, _key, with_keyset=True)
    _LIB.impl("varlen_attention", _varlen_autograd, _key, with_keyset=True)


def _check_bf16(**ts: torch.Tensor) -> None:
    for name, t in ts.items():
        torch._check(
            t.dtype == torch.bfloat16, lambda name=name, t=t: f"{name} has dtype {t.dtype}, expected bfloat16"
        )


@torch.library.register_fake("regress::attention", lib=_LIB)
def _attention_fake(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    layout: str = "bshd",
    rounding: str = "rtna",
    scale: float | None = None,
    is_causal: bool = False,
    causal_alignment: str = "top_left",
    enable_gqa: bool = False,
) -> torch.Tensor:
    # The checks that decide the output's shape; everything else the real kernel checks at run time.
    torch._check(layout in LAYOUTS, lambda: f"layout {layout!r} is not 'bshd' or 'bhsd'")
    torch._check(q.dim() == 4, lambda: f"q must be 4-D ([B,S,H,D] or [B,H,S,D]), got {tuple(q.shape)}")
    dense_mask(is_causal, causal_alignment)
    _check_bf16(q=q, k=k, v=v)
    return q.new_empty(q.shape)


@torch.library.register_fake("regress::varlen_attention", lib=_LIB)
def _varlen_fake(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    cu_seqlens_q: torch.Tensor,
    cu_seqlens_k: torch.Tensor,
    max_seqlen_q: int,
    max_seqlen_k: int,
    dropout_p: float = 0.0,
    softmax_scale: float | None = None,
    causal: bool = False,
    rounding: str = "rtna",
) -> tuple[torch.Tensor, torch.Tensor]:
    torch._check(q.dim() == 3, lambda: f"q must be 3-D ([total, H, D]), got {tuple(q.shape)}")
    _check_bf16(q=q, k=k, v=v)
    return q.new_empty(q.shape), q.new_empty((q.shape[1], q.shape[0]), dtype=torch.float32)


attention_op = torch.ops.regress.attention.default
"""The operator overload: attention_op(q, k, v, layout, rounding, scale, is_causal, causal_alignment,
enable_gqa)."""
varlen_attention_op = torch.ops.regress.varlen_attention.default
"""The varlen overload: varlen_attention_op(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q,
max_seqlen_k, dropout_p, softmax_scale, causal, rounding) -> (out, softmax_lse)."""
