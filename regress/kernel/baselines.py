"""Baseline attention kernels behind one interface, for comparison and as the back-out path.

Every baseline takes q, k, v in the kernel's layouts ([B,S,H,D] "bshd" or [B,H,S,D] "bhsd", bf16,
head_dim 128) and returns the output in q's layout (a view where the library's native layout
differs; no copies of the inputs).

  sdpa_cpu    torch SDPA on CPU                      rtne (torch rounds its fp32 result to nearest even)
  sdpa_flash  torch SDPA, FlashAttention-2 backend   NVIDIA, rtne
  sdpa_cudnn  torch SDPA, cuDNN backend              NVIDIA, rtne
  aiter       aiter.flash_attn_func (fmha v3)        ROCm, rtne / rtna / rtz via how_v3_bf16_cvt
  fa2_varlen  FlashAttention-2's varlen path         NVIDIA, rtne; packed varlen calls only
              (aten::_flash_attention_forward)        (varlen_baselines, not available_baselines)

SDPA takes ABI v2's masks and grouped-query heads in its own spelling (is_causal, causal_lower_right,
enable_gqa); cuDNN and FlashAttention-2 both run them on the GPU.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Callable, Iterator
from typing import Any

import torch

from regress.facts.backends import torch_gpu_backend
from regress.facts.results import LAYOUTS, ROUNDING_CODE, ROUNDING_MODES, Layout


class Baseline:
    """One baseline kernel: a name, a device type, the rounding modes it implements, and a call."""

    def __init__(self, name: str, device: str, modes: tuple[str, ...]) -> None:
        self.name = name
        self.device = device
        self.modes = modes

    def __repr__(self) -> str:
        return f"Baseline({self.name!r}, device={self.device!r})"

    def supports(self, rounding: str) -> bool:
        return rounding in self.modes

    def supports_shape(self, batch: int, heads: int, seqlen_q: int, seqlen_k: int) -> bool:
        """Whether this baseline runs the shape the way its rounding modes promise. Callers skip
        the comparison (not fail the case) where it does not."""
        return True

    def version(self) -> str:
        return torch.__version__

    def __call__(
        self,
        q: torch.Tensor,
        k: torch.Tensor,
        v: torch.Tensor,
        *,
        layout: Layout = "bshd",
        rounding: str = "rtne",
        scale: float | None = None,
        mask: str = "none",
    ) -> torch.Tensor:
        if not self.supports(rounding):
            raise ValueError(f"baseline {self.name} does not implement rounding {rounding!r}")
        if layout not in LAYOUTS:
            raise ValueError(f"layout {layout!r} is not 'bshd' or 'bhsd'")
        if mask != "none" or _to_bhsd(k, layout).shape[1] != _to_bhsd(q, layout).shape[1]:
            # Causal masks and grouped-query heads (ABI v2): only baselines that take them.
            if not self.takes_masks:
                raise ValueError(f"baseline {self.name} takes dense equal-head calls only (mask {mask!r})")
            return self._run_masked(q, k, v, layout, scale, mask)
        return self._run(q, k, v, layout, rounding, scale)

    takes_masks = False
    takes_varlen = False

    def varlen(
        self,
        q: torch.Tensor,
        k: torch.Tensor,
        v: torch.Tensor,
        cu_seqlens_q: torch.Tensor,
        cu_seqlens_k: torch.Tensor,
        max_seqlen_q: int,
        max_seqlen_k: int,
        *,
        scale: float | None = None,
        mask: str = "none",
    ) -> torch.Tensor:
        """A packed varlen call ([total, H, D] tensors, FlashAttention's arguments); only baselines
        with takes_varlen (varlen_baselines) have one."""
        raise ValueError(f"baseline {self.name} takes no packed varlen call")

    def _run_masked(
        self,
        q: torch.Tensor,
        k: torch.Tensor,
        v: torch.Tensor,
        layout: Layout,
        scale: float | None,
        mask: str,
    ) -> torch.Tensor:
        raise NotImplementedError

    def _run(
        self,
        q: torch.Tensor,
        k: torch.Tensor,
        v: torch.Tensor,
        layout: Layout,
        rounding: str,
        scale: float | None,
    ) -> torch.Tensor:
        raise NotImplementedError


def _to_bhsd(t: torch.Tensor, layout: Layout) -> torch.Tensor:
    return t.transpose(1, 2) if layout == "bshd" else t


def _to_bshd(t: torch.Tensor, layout: Layout) -> torch.Tensor:
    return t.transpose(1, 2) if layout == "bhsd" else t


class SdpaBaseline(Baseline):
    """torch.nn.functional.scaled_dot_product_attention, optionally pinned to one SDPA backend."""

    def __init__(self, name: str, device: str, backend: Any | None) -> None:
        super().__init__(name, device, ("rtne",))
        self._backend = backend

    def supports_shape(self, batch: int, heads: int, seqlen_q: int, seqlen_k: int) -> bool:
        from torch.nn.attention import SDPBackend

        # cuDNN SDPA refuses a key/value length of 1 ("No available kernel"; measured on the H200).
        return not (self._backend == SDPBackend.CUDNN_ATTENTION and seqlen_k < 2)

    def _context(self) -> contextlib.AbstractContextManager[Any]:
        if self._backend is None:
            return contextlib.nullcontext()
        from torch.nn.attention import sdpa_kernel

        return sdpa_kernel([self._backend])

    def _run(
        self,
        q: torch.Tensor,
        k: torch.Tensor,
        v: torch.Tensor,
        layout: Layout,
        rounding: str,
        scale: float | None,
    ) -> torch.Tensor:
        with self._context():
            o = torch.nn.functional.scaled_dot_product_attention(
                _to_bhsd(q, layout), _to_bhsd(k, layout), _to_bhsd(v, layout), scale=scale
            )
        return o.transpose(1, 2) if layout == "bshd" else o

    takes_masks = True

    def _run_masked(
        self,
        q: torch.Tensor,
        k: torch.Tensor,
        v: torch.Tensor,
        layout: Layout,
        scale: float | None,
        mask: str,
    ) -> torch.Tensor:
        """SDPA's own spelling of the masks: is_causal (top-left), causal_lower_right (bottom-right),
        enable_gqa for fewer K/V heads."""
        qh, kh, vh = _to_bhsd(q, layout), _to_bhsd(k, layout), _to_bhsd(v, layout)
        kw: dict[str, Any] = {"scale": scale, "enable_gqa": kh.shape[1] != qh.shape[1]}
        if mask == "causal_top_left":
            kw["is_causal"] = True
        elif mask == "causal_bottom_right" and qh.shape[2] == 1:
            pass  # one query row aligned bottom-right sees every key: the unmasked call, SDPA's cheapest
        elif mask == "causal_bottom_right":
            from torch.nn.attention.bias import causal_lower_right

            kw["attn_mask"] = causal_lower_right(qh.shape[2], kh.shape[2])
        elif mask != "none":
            raise ValueError(f"mask {mask!r} is not one of none, causal_top_left, causal_bottom_right")
        with self._context():
            o = torch.nn.functional.scaled_dot_product_attention(qh, kh, vh, **kw)
        return o.transpose(1, 2) if layout == "bshd" else o


class AiterBaseline(Baseline):
    """AMD AITER fmha v3 forward; BSHD-shaped, so BHSD goes in as a strided view."""

    def __init__(self) -> None:
        super().__init__("aiter", "cuda", ROUNDING_MODES)
        import aiter  # noqa: F401 — probe only; imported again where used

    def supports_shape(self, batch: int, heads: int, seqlen_q: int, seqlen_k: int) -> bool:
        # Only the v3 assembly path (seqlen_q > 128) implements how_v3_bf16_cvt; shorter queries go
        # down another path whose rounding is not the one asked for.
        return seqlen_q > 128

    def version(self) -> str:
        import aiter

        return str(getattr(aiter, "__version__", "unknown"))

    def _run(
        self,
        q: torch.Tensor,
        k: torch.Tensor,
        v: torch.Tensor,
        layout: Layout,
        rounding: str,
        scale: float | None,
    ) -> torch.Tensor:
        import aiter

        kwargs: dict[str, Any] = {"causal": False, "how_v3_bf16_cvt": ROUNDING_CODE[rounding]}
        if scale is not None:
            kwargs["softmax_scale"] = scale
        got = aiter.flash_attn_func(_to_bshd(q, layout), _to_bshd(k, layout), _to_bshd(v, layout), **kwargs)
        # some versions also return the log-sum-exp (aiter has no type information)
        o: torch.Tensor = got[0] if isinstance(got, tuple) else got
        return o.transpose(1, 2) if layout == "bhsd" else o


class FlashVarlenBaseline(Baseline):
    """FlashAttention-2's varlen path as torch ships it (aten::_flash_attention_forward with
    cu_seqlens): packed q [total_q, H, D], k and v [total_k, H_kv, D] (grouped-query heads native),
    causal aligned bottom-right per sequence (FlashAttention >= 2.1). Takes varlen calls only."""

    def __init__(self) -> None:
        super().__init__("fa2_varlen", "cuda", ("rtne",))

    def _run(
        self,
        q: torch.Tensor,
        k: torch.Tensor,
        v: torch.Tensor,
        layout: Layout,
        rounding: str,
        scale: float | None,
    ) -> torch.Tensor:
        raise ValueError("fa2_varlen takes packed varlen calls only (Baseline.varlen)")

    takes_varlen = True

    def varlen(
        self,
        q: torch.Tensor,
        k: torch.Tensor,
        v: torch.Tensor,
        cu_seqlens_q: torch.Tensor,
        cu_seqlens_k: torch.Tensor,
        max_seqlen_q: int,
        max_seqlen_k: int,
        *,
        scale: float | None = None,
        mask: str = "none",
    ) -> torch.Tensor:
        if mask == "causal_top_left":
            raise ValueError("fa2_varlen aligns causal masks bottom-right (FlashAttention >= 2.1) only")
        out = torch.ops.aten._flash_attention_forward(
            q,
            k,
            v,
            cu_seqlens_q,
            cu_seqlens_k,
            max_seqlen_q,
            max_seqlen_k,
            0.0,
            mask != "none",
            False,
            scale=scale,
        )
        return out[0]  # type: ignore[no-any-return]


@functools.cache
def varlen_baselines(device: str) -> list[Baseline]:
    """The baselines that take a packed varlen call on this device type (FlashAttention-2's varlen
    path on NVIDIA), each probed with a tiny causal call of three sequences."""
    if device.split(":")[0] != "cuda" or torch_gpu_backend() != "cuda":
        return []
    found: list[Baseline] = []
    try:
        bl = FlashVarlenBaseline()
        g = torch.Generator(device="cpu").manual_seed(0)
        q, k, v = (torch.randn((10, 4, 128), generator=g).to("cuda", torch.bfloat16) for _ in range(3))
        cu = torch.tensor([0, 1, 4, 10], dtype=torch.int32, device="cuda")
        o = bl.varlen(
            q, k[:, :2].contiguous(), v[:, :2].contiguous(), cu, cu, 6, 6, mask="causal_bottom_right"
        )
        if o.shape == q.shape and bool(torch.isfinite(o.float()).all()):
            found.append(bl)
    except Exception:  # no flash kernel in this torch build, or it refuses the call
        pass
    return found


def _candidates(device: str) -> Iterator[Callable[[], Baseline]]:
    if device == "cpu":
        yield lambda: SdpaBaseline("sdpa_cpu", "cpu", None)
        return
    gpu = torch_gpu_backend()
    if device != "cuda" or gpu is None:
        return
    if gpu == "hip":
        yield AiterBaseline
        return
    from torch.nn.attention import SDPBackend

    yield lambda: SdpaBaseline("sdpa_flash", "cuda", SDPBackend.FLASH_ATTENTION)
    yield lambda: SdpaBaseline("sdpa_cudnn", "cuda", SDPBackend.CUDNN_ATTENTION)


def _runs(bl: Baseline) -> bool:
    """A tiny call in both layouts; a baseline that imports but cannot run is not available."""
    dev = torch.device(bl.device)
    g = torch.Generator(device="cpu").manual_seed(0)
    shape = (1, 130, 2, 128)  # > 128 rows so AITER takes its v3 path
    q, k, v = (torch.randn(shape, generator=g).to(dev, torch.bfloat16) for _ in range(3))
    mode = bl.modes[0]
    for layout, args in (("bshd", (q, k, v)), ("bhsd", tuple(t.transpose(1, 2) for t in (q, k, v)))):
        o = bl(*args, layout=layout, rounding=mode)  # type: ignore[arg-type]
        if o.shape != args[0].shape or not torch.isfinite(o.float()).all():
            return False
    return True


@functools.cache
def available_baselines(device: str) -> list[Baseline]:
    """The baselines that import and run on this device type ("cpu" or "cuda"), best first."""
    found: list[Baseline] = []
    for make in _candidates(device.split(":")[0]):
        try:
            bl = make()
            if _runs(bl):
                found.append(bl)
        except Exception:  # an unavailable backend raises anything from ImportError to RuntimeError
            continue
    return found
