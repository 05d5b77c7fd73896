"""The kernel as a PyTorch operator: `torch.ops.regress.attention` and `.varlen_attention`.

Operators in the `regress` namespace over the same C ABI library that `regress.kernel` loads with
ctypes (docs/architecture.md, "A torch operator over a C ABI library"): the kernel libraries are
still built by the vendor compiler alone, with no torch C++ headers.

  CPU tensors   the golden model (libregress_attn_cpu.so)
  CUDA tensors  the CUDA kernel, or the HIP kernel on a ROCm build of torch
  fake tensors  shape and dtype only, so torch.compile(fullgraph=True) traces through the op

Two operators: `attention` (dense, SDPA's is_causal / enable_gqa semantics plus the causal alignment)
and `varlen_attention` (packed sequences, flash_attn_varlen_func's argument order; causal is
bottom-right as in FlashAttention >= 2.1). docs/serving.md has a worked example of each.

The schemas and the fake kernels are defined here. The CPU, CUDA and autograd kernels are C++
(kernel/torch/regress_op.cpp, built and loaded by regress.kernel.op_native; issue 40): behind torch's
dispatcher, Python kernels that only allocate the output already cost more host time than SDPA's
whole call on small shapes (docs/perf-notes.md, "The torch operator's host cost"). Where the C++
library cannot be built or loaded (no C++ compiler, a torch without headers) the same kernels in
Python below are registered instead, with a warning that says why: the same library runs the same
bits either way, only the host time differs.
REGRESS_OP=python asks for the Python kernels, REGRESS_OP=native refuses to fall back.
`IMPLEMENTATION` says which ones this process runs. `python_ops()` registers the Python kernels under
a second namespace (`regress_python`), so tests and benchmarks hold the two side by side.

The Python kernels are registered with `torch.library.Library` (define + one Python kernel per
dispatch key + a fake kernel) rather than the `torch.library.custom_op` decorator, whose Python
autograd wrapper costs ~30 µs of host time per call. Both implementations are forward-only: their
autograd kernel (CPU and CUDA) lets the forward run and gives the output a backward that raises,
where torch's fallback would only warn and return no gradient. Inputs that need no gradient go
straight to the kernel below autograd.

The CUDA kernel launches on torch's current stream, allocates nothing but the output (through
torch's allocator) and does no host synchronisation, so a call can be captured in a CUDA graph.
Warm up once before capturing: the first call per device builds or loads the library and sets the
kernel's shared-memory attribute, which are host-side steps a capture must not see for the first
time.
"""

from __future__ import annotations

import os
import re
import warnings
from typing import Any

import torch

from regress.facts.abi import KernelError
from regress.facts.results import LAYOUTS
from regress.kernel.loader import backend_for_device, default_library

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
NAMESPACE = "regress"
PYTHON_NAMESPACE = "regress_python"  # python_ops(): the Python kernels beside the C++ ones
IMPLEMENTATIONS = ("native", "python")
OP_ENV = "REGRESS_OP"  # "python": the Python kernels; "native": the C++ ones or an error; unset: auto


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


# How the C++ kernels end a refusal of the kernel library (regress_op.cpp `launch`): torch turns C++
# errors into RuntimeError, so the ra_status travels in the text and kernel_error reads it back.
_REFUSAL = re.compile(r"(.*) \[ra_status (\d+)\]", re.S)


def kernel_error(exc: RuntimeError) -> KernelError | None:
    """The KernelError that a RuntimeError of the C++ kernels stands for (the library refused the
    call: same text as the Python path's KernelError, same code), None for any other error."""
    m = _REFUSAL.fullmatch(str(exc))
    return None if m is None else KernelError(m.group(1), int(m.group(2)))


def backward_error(op: str) -> str:
    """The refusal of a backward through `op` ("regress::attention"); regress_op.cpp says the same."""
    return (
        f"{op} has no backward: the kernel is forward-only. Run it under torch.no_grad() "
        "or torch.inference_mode(), or detach its inputs"
    )


class _ForwardOnly(torch.autograd.Function):
    """An op's forward, with a backward that refuses."""

    @staticmethod
    def forward(ctx: Any, op: torch._ops.OpOverload, keyset: torch._C.DispatchKeySet, *args: Any) -> Any:
        ctx.op_name = op._schema.name
        return _redispatch(op, keyset, *args)

    @staticmethod
    def backward(ctx: Any, *grads: torch.Tensor) -> None:
        raise RuntimeError(backward_error(ctx.op_name))


def _redispatch(op: torch._ops.OpOverload, keyset: torch._C.DispatchKeySet, *args: Any) -> Any:
    return op.redispatch(keyset & torch._C._after_autograd_keyset, *args)


def _needs_grad(*ts: torch.Tensor) -> bool:
    return torch.is_grad_enabled() and any(t.requires_grad for t in ts)


def _autograd_kernel(op: torch._ops.OpOverload) -> Any:
    """The Python autograd kernel of `op`: forward-only (see the module doc)."""

    def kernel(
        keyset: torch._C.DispatchKeySet, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, *args: Any
    ) -> Any:
        if _needs_grad(q, k, v):
            # torch leaves Function.apply unannotated (untyped_calls_exclude matches the subclass, not torch)
            return _ForwardOnly.apply(op, keyset, q, k, v, *args)  # type: ignore[no-untyped-call]
        return _redispatch(op, keyset, q, k, v, *args)

    return kernel


def _register_python_kernels(lib: torch.library.Library) -> None:
    """The Python CPU, CUDA and autograd kernels of both ops of `lib`'s namespace."""
    ops = getattr(torch.ops, lib.ns)
    for key in ("CPU", "CUDA"):
        lib.impl("attention", _attention_impl, key)
        lib.impl("varlen_attention", _varlen_impl, key)
    for key in ("AutogradCPU", "AutogradCUDA"):
        lib.impl("attention", _autograd_kernel(ops.attention.default), key, with_keyset=True)
        lib.impl("varlen_attention", _autograd_kernel(ops.varlen_attention.default), key, with_keyset=True)


def _check_bf16(**ts: torch.Tensor) -> None:
    for name, t in ts.items():
        torch._check(
            t.dtype == torch.bfloat16, lambda name=name, t=t: f"{name} has dtype {t.dtype}, expected bfloat16"
        )


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


def _define(ns: str) -> torch.library.Library:
    """Both schemas and their fake kernels in namespace `ns` (kept referenced by the caller: the
    registrations live as long as the Library)."""
    lib = torch.library.Library(ns, "DEF")
    lib.define(SCHEMA)
    lib.define(VARLEN_SCHEMA)
    torch.library.register_fake(f"{ns}::attention", _attention_fake, lib=lib)
    torch.library.register_fake(f"{ns}::varlen_attention", _varlen_fake, lib=lib)
    return lib


def _choose_kernels(lib: torch.library.Library) -> tuple[str, str]:
    """Register the C++ kernels, or the Python ones where they cannot be had: (implementation, why)."""
    from regress.kernel import op_native

    want = os.environ.get(OP_ENV, "").strip().lower()
    if want not in ("", *IMPLEMENTATIONS):
        raise ValueError(f"{OP_ENV}={want!r}: expected 'native', 'python' or unset")
    if want == "python":
        _register_python_kernels(lib)
        return "python", f"{OP_ENV}=python"
    try:
        info = op_native.load()
    except op_native.NativeOpUnavailable as exc:
        if want == "native":
            raise
        warnings.warn(
            "regress: torch.ops.regress runs its Python kernels (the same kernel library and bits, "
            f"more host time per call; set {OP_ENV}=python to choose them quietly): {exc}",
            RuntimeWarning,
            stacklevel=2,
        )
        _register_python_kernels(lib)
        return "python", str(exc)
    return "native", f"{info['path']} (torch {info['torch']}, ABI v{info['abi']})"


_LIB = _define(NAMESPACE)
IMPLEMENTATION, IMPLEMENTATION_REASON = _choose_kernels(_LIB)
"""Which kernels torch.ops.regress.* run in this process ("native": C++, "python"), and why
(the library's path, or the reason the C++ one could not be had)."""

attention_op = torch.ops.regress.attention.default
"""The operator overload: attention_op(q, k, v, layout, rounding, scale, is_causal, causal_alignment,
enable_gqa)."""
varlen_attention_op = torch.ops.regress.varlen_attention.default
"""The varlen overload: varlen_attention_op(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q,
max_seqlen_k, dropout_p, softmax_scale, causal, rounding) -> (out, softmax_lse)."""

_PYTHON_LIB: list[torch.library.Library] = []


def python_ops() -> tuple[torch._ops.OpOverload, torch._ops.OpOverload]:
    """(attention, varlen_attention) with the Python kernels, as torch.ops.regress_python.*, whichever
    kernels torch.ops.regress runs: the two implementations side by side in one process (tests
    hold them to the same bits and errors; benchmarks/h200/op_host.py times both)."""
    if not _PYTHON_LIB:
        lib = _define(PYTHON_NAMESPACE)
        _register_python_kernels(lib)
        _PYTHON_LIB.append(lib)
    ops = getattr(torch.ops, PYTHON_NAMESPACE)
    return ops.attention.default, ops.varlen_attention.default
