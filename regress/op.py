"""The kernel as a PyTorch operator: `torch.ops.regress.attention`.

An operator in the `regress` namespace over the same C ABI library that `regress.kernel` loads with
ctypes (docs/architecture.md, "A torch operator over a C ABI library"): the library is still built
by the vendor compiler alone, with no torch C++ headers, and the operator is registered from Python.

  CPU tensors   the golden model (libregress_attn_cpu.so)
  CUDA tensors  the CUDA kernel, or the HIP kernel on a ROCm build of torch
  fake tensors  shape and dtype only, so torch.compile(fullgraph=True) traces through the op

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

import torch

from regress.loader import backend_for_device, default_library
from regress.results import LAYOUTS

SCHEMA = (
    "attention(Tensor q, Tensor k, Tensor v, str layout='bshd', str rounding='rtna', float? scale=None)"
    " -> Tensor"
)

_LIB = torch.library.Library("regress", "DEF")  # kept referenced: the registrations live as long as it
_LIB.define(SCHEMA)


def _attention_impl(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    layout: str = "bshd",
    rounding: str = "rtna",
    scale: float | None = None,
) -> torch.Tensor:
    """O = softmax(scale · Q Kᵀ) V with this project's kernel for q's device; see
    regress.kernel.attention for the arguments. The output is a new tensor of q's shape."""
    lib = default_library(backend_for_device(q.device))
    return lib.forward(q, k, v, layout=layout, rounding=rounding, scale=scale)  # type: ignore[arg-type]


for _key in ("CPU", "CUDA"):
    _LIB.impl("attention", _attention_impl, _key)

BACKWARD_ERROR = (
    "regress::attention has no backward: the kernel is forward-only. Run it under torch.no_grad() "
    "or torch.inference_mode(), or detach its inputs"
)


class _ForwardOnly(torch.autograd.Function):
    """The op's forward, with a backward that refuses."""

    @staticmethod
    def forward(  # type: ignore[override]
        ctx: object,
        keyset: torch._C.DispatchKeySet,
        q: torch.Tensor,
        k: torch.Tensor,
        v: torch.Tensor,
        layout: str,
        rounding: str,
        scale: float | None,
    ) -> torch.Tensor:
        return _redispatch(keyset, q, k, v, layout, rounding, scale)

    @staticmethod
    def backward(ctx: object, *grads: torch.Tensor) -> None:  # type: ignore[override]
        raise RuntimeError(BACKWARD_ERROR)


def _redispatch(
    keyset: torch._C.DispatchKeySet,
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    layout: str,
    rounding: str,
    scale: float | None,
) -> torch.Tensor:
    after = keyset & torch._C._after_autograd_keyset
    return torch.ops.regress.attention.default.redispatch(after, q, k, v, layout, rounding, scale)  # type: ignore[no-any-return]


def _attention_autograd(
    keyset: torch._C.DispatchKeySet,
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    layout: str = "bshd",
    rounding: str = "rtna",
    scale: float | None = None,
) -> torch.Tensor:
    if torch.is_grad_enabled() and (q.requires_grad or k.requires_grad or v.requires_grad):
        return _ForwardOnly.apply(keyset, q, k, v, layout, rounding, scale)  # type: ignore[no-any-return]
    return _redispatch(keyset, q, k, v, layout, rounding, scale)


for _key in ("AutogradCPU", "AutogradCUDA"):
    _LIB.impl("attention", _attention_autograd, _key, with_keyset=True)


@torch.library.register_fake("regress::attention", lib=_LIB)
def _attention_fake(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    layout: str = "bshd",
    rounding: str = "rtna",
    scale: float | None = None,
) -> torch.Tensor:
    # The checks that decide the output's shape; everything else the real kernel checks at run time.
    torch._check(layout in LAYOUTS, lambda: f"layout {layout!r} is not 'bshd' or 'bhsd'")
    torch._check(q.dim() == 4, lambda: f"q must be 4-D ([B,S,H,D] or [B,H,S,D]), got {tuple(q.shape)}")
    for name, t in (("q", q), ("k", k), ("v", v)):
        torch._check(
            t.dtype == torch.bfloat16, lambda name=name, t=t: f"{name} has dtype {t.dtype}, expected bfloat16"
        )
    return q.new_empty(q.shape)


attention_op = torch.ops.regress.attention.default
"""The operator overload: attention_op(q, k, v, layout, rounding, scale)."""
