"""Shared pieces of the suites: seeded inputs, layouts, hashing, error capture (shapes and case
names are the catalogue's, regress/facts/cases.py).

Inputs are always drawn in the logical [B, H, S, D] order and then laid out, so a bshd case and a
bhsd case of the same shape and seed see the same values (and share one fp64 reference).
"""

from __future__ import annotations

import hashlib
import itertools
import math
import traceback
import zlib
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

import numpy as np
import torch

from regress.facts.cases import Shape
from regress.facts.results import LAYOUTS, ROUNDING_MODES, CaseResult, CaseSpec, Layout, Rounding, Status
from regress.kernel import RA_ERR_UNSUPPORTED, KernelError, reference
from regress.run.suites import rounding

if TYPE_CHECKING:
    from regress.run.suites.base import SuiteContext

T = TypeVar("T")

# ANCHORS.md "realistic" inputs: K rows with log-normal norms of this sigma.
K_NORM_SIGMA = 0.6

INPUT_KINDS: tuple[str, ...] = (
    "realistic",
    "nan_q",
    "nan_k",
    "nan_v",
    "posinf_q",
    "neginf_q",
    "posinf_k",
    "neginf_k",
    "posinf_v",
    "neginf_v",
    "extreme_logits",
    "rounding",
)
# Q scaled so logits reach the hundreds: softmax is then nearly one-hot and exp underflows.
EXTREME_LOGIT_FACTOR = 30.0


def as_layout(value: object) -> Layout:
    if value not in LAYOUTS:
        raise ValueError(f"layout {value!r} is not one of {', '.join(LAYOUTS)}")
    return value


def as_mode(value: object) -> Rounding:
    if value not in ROUNDING_MODES:
        raise ValueError(f"rounding mode {value!r} is not one of {', '.join(ROUNDING_MODES)}")
    return value


def spec_layout_mode(spec: CaseSpec) -> tuple[Layout, Rounding]:
    return as_layout(spec.params["layout"]), as_mode(spec.params["mode"])


def derive_seed(base: int, *parts: object) -> int:
    """A stable per-case seed (crc32, not hash(): that is salted per process)."""
    return (base * 1_000_003 + zlib.crc32(":".join(map(str, parts)).encode())) % (2**63)


# --- inputs -----------------------------------------------------------------------------------


def _generator(device: str, seed: int) -> torch.Generator:
    g = torch.Generator(device=device)
    g.manual_seed(seed)
    return g


def to_layout(x_bhsd: torch.Tensor, layout: str) -> torch.Tensor:
    """[B, H, S, D] -> the given layout, contiguous (the kernel reads strides, but tests the usual case)."""
    return x_bhsd.transpose(1, 2).contiguous() if layout == "bshd" else x_bhsd.contiguous()


def to_bhsd(x: torch.Tensor, layout: str) -> torch.Tensor:
    """A view in [B, H, S, D] order of a tensor in `layout`."""
    return x.transpose(1, 2) if layout == "bshd" else x


def make_inputs_bhsd(
    shape: Shape, *, seed: int, device: str, kind: str = "realistic"
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Seeded bf16 Q, K, V in [B, H, S, D] order.

    realistic (ANCHORS.md): Q, V ~ N(0, 1); K rows point in random directions with norms
    sqrt(D)·LogNormal(0, 0.6), so a typical K row is as long as a N(0, 1) row but a few are much
    longer, which gives the peaked softmax rows real models show. Edge kinds poison one element.
    rounding: Q = 0 and V from regress.run.suites.rounding, so every output is a known exact mean.
    """
    if kind not in INPUT_KINDS:
        raise ValueError(f"unknown input kind {kind!r}; known: {', '.join(INPUT_KINDS)}")
    g = _generator(device, seed)
    b, h, sq, sk, d, hk = shape.b, shape.h, shape.sq, shape.sk, shape.d, shape.heads_kv
    if shape.seqs is not None:
        b = 1  # packed sequences: one batch entry of the totals (make_inputs packs it)
    f32 = torch.float32
    q = torch.randn((b, h, sq, d), generator=g, device=device, dtype=f32)
    k = torch.randn((b, hk, sk, d), generator=g, device=device, dtype=f32)
    norms = torch.exp(K_NORM_SIGMA * torch.randn((b, hk, sk, 1), generator=g, device=device, dtype=f32))
    k = k * (norms * math.sqrt(d) / k.norm(dim=-1, keepdim=True).clamp_min(1e-30))
    v = torch.randn((b, hk, sk, d), generator=g, device=device, dtype=f32)
    if kind == "extreme_logits":
        q = q * EXTREME_LOGIT_FACTOR
    elif kind == rounding.INPUT:
        v_bits, _ = rounding.directed_v(b, h, sk, seed)
        bf = torch.from_numpy(v_bits.view(np.int16)).view(torch.bfloat16).to(device)
        return torch.zeros_like(q).to(torch.bfloat16), k.to(torch.bfloat16), bf
    elif kind != "realistic":
        what, target = kind.split("_")
        value = {"nan": math.nan, "posinf": math.inf, "neginf": -math.inf}[what]
        t = {"q": q, "k": k, "v": v}[target]
        # One poisoned element in batch 0, head 0: other heads keep checking finite outputs.
        row = min(3, t.shape[2] - 1)
        t[0, 0, row, 5] = value
    return q.to(torch.bfloat16), k.to(torch.bfloat16), v.to(torch.bfloat16)


def make_inputs(
    shape: Shape, layout: str, *, seed: int, device: str, kind: str = "realistic"
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Seeded bf16 Q, K, V in `layout` (see make_inputs_bhsd); a varlen shape's are packed
    [total, H, D] (its layout is bshd's with the batch folded into the sequence)."""
    q, k, v = make_inputs_bhsd(shape, seed=seed, device=device, kind=kind)
    if shape.seqs is not None:  # contiguous, as servers and FlashAttention's varlen API hold them
        return tuple(to_layout(t, "bshd")[0].contiguous() for t in (q, k, v))  # type: ignore[return-value]
    return to_layout(q, layout), to_layout(k, layout), to_layout(v, layout)


# --- the v2 axes of a call (mask, GQA, varlen) ------------------------------------------------


def is_v2(shape: Shape) -> bool:
    """A case that uses an ABI v2 axis (mask, fewer K/V heads, varlen): baselines that take dense
    equal-head calls only are not run on it."""
    return shape.mask != "none" or shape.seqs is not None or shape.heads_kv != shape.h


def call_kwargs(shape: Shape, device: str) -> dict[str, Any]:
    """Library.forward's v2 keywords for a case's shape: none for a dense unmasked case (the call
    is then exactly the v1 one), else the mask and, for varlen, cu_seqlens on the device."""
    kw: dict[str, Any] = {}
    if shape.mask != "none":
        kw["mask"] = shape.mask
    if shape.seqs is not None:
        cq = [0, *itertools.accumulate(a for a, _ in shape.seqs)]
        ck = [0, *itertools.accumulate(c for _, c in shape.seqs)]
        kw["cu_seqlens_q"] = torch.tensor(cq, dtype=torch.int32, device=device)
        kw["cu_seqlens_k"] = torch.tensor(ck, dtype=torch.int32, device=device)
        kw["max_seqlen_q"] = max(a for a, _ in shape.seqs)
        kw["max_seqlen_k"] = max(c for _, c in shape.seqs)
    return kw


def call_varlen_baseline(
    bl: Any,
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    kw: dict[str, Any],
    *,
    mask: str,
    scale: float | None = None,
) -> torch.Tensor:
    """A baseline's packed varlen call (Baseline.varlen) with call_kwargs' cu_seqlens and lengths."""
    return bl.varlen(  # type: ignore[no-any-return]
        q,
        k,
        v,
        kw["cu_seqlens_q"],
        kw["cu_seqlens_k"],
        kw["max_seqlen_q"],
        kw["max_seqlen_k"],
        scale=scale,
        mask=mask,
    )


def call_reference(
    shape: Shape, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, layout: Layout, scale: float
) -> tuple[np.ndarray, np.ndarray]:
    """The fp64 (ref, mag) of a case in [B, H, Sq, D] order; a varlen case's as [1, H, total, D]."""
    if shape.seqs is None:
        return reference.reference_attention(q, k, v, layout=layout, scale=scale, mask=shape.mask)  # type: ignore[arg-type]
    kw = call_kwargs(shape, "cpu")
    r = reference.reference_varlen(
        q,
        k,
        v,
        kw["cu_seqlens_q"],
        kw["cu_seqlens_k"],
        scale=scale,
        mask=shape.mask,  # type: ignore[arg-type]
    )
    return r.ref.transpose(1, 0, 2)[None], r.mag.transpose(1, 0, 2)[None]


def call_bits(out: torch.Tensor, shape: Shape, layout: Layout) -> np.ndarray:
    """A kernel output as [B, H, Sq, D] bit patterns (a varlen one as [1, H, total, D])."""
    if shape.seqs is not None:
        return reference.to_bhsd_bits(out[None], "bshd")
    return reference.to_bhsd_bits(out, layout)


def output_like(q: torch.Tensor) -> torch.Tensor:
    return torch.empty_like(q, memory_format=torch.contiguous_format)


# --- bits -------------------------------------------------------------------------------------


def bits(x: torch.Tensor) -> torch.Tensor:
    """The bf16 bit patterns as int16, same shape."""
    return x.contiguous().view(torch.int16)


def sha256_bits(x: torch.Tensor) -> str:
    return hashlib.sha256(bits(x).cpu().numpy().tobytes()).hexdigest()


def plan_metrics(ctx: SuiteContext, shape: Shape, layout: str, mode: str) -> dict[str, object]:
    """The plan kind and split counts of the launch the case times (regress.native.plan.summary), asked of
    the library under test; none for a backend without a planner. A changed plan then shows as such
    next to the timing it explains."""
    from regress.native.plan import summary

    plan = ctx.library.plan(
        shape.b, shape.h, shape.sq, shape.sk, layout=layout, rounding=mode, **plan_v2(shape)
    )
    return {} if plan is None else summary(plan)


def plan_v2(shape: Shape) -> dict[str, Any]:
    """regress.native.plan.shape_params' ABI v2 keywords for a case's shape (none for a dense one)."""
    kw: dict[str, Any] = {}
    if shape.hkv and shape.hkv != shape.h:
        kw["heads_kv"] = shape.hkv
    if shape.mask != "none":
        kw["mask"] = shape.mask
    if shape.seqs is not None:
        kw["max_seqlen"] = (max(a for a, _ in shape.seqs), max(c for _, c in shape.seqs))
    return kw


def for_device(ctx: SuiteContext, *, gpu: tuple[T, T], cpu: tuple[T, T]) -> T:
    """The (quick, full) choice of the context's device kind: every suite sizes its cases this way."""
    quick, full = gpu if ctx.is_gpu else cpu
    return quick if ctx.quick else full


# --- running ----------------------------------------------------------------------------------


def synchronize(device: str) -> None:
    if device != "cpu":
        torch.cuda.synchronize()


def guarded(spec: CaseSpec, body: Callable[[], CaseResult], device: str = "cpu") -> CaseResult:
    """Runs one case; any failure (kernel error, OOM, a bug) becomes status "error", never a raise,
    so one bad case cannot end a nightly run. A backend's RA_ERR_UNSUPPORTED (a v2 feature its
    kernels lack yet) is a skip with the backend's reason."""
    try:
        return body()
    except KernelError as exc:
        if exc.code != RA_ERR_UNSUPPORTED:
            return _error(spec, exc, device)
        # A valid case the backend's kernels do not implement yet (ABI v2 axes): a skip, not a failure.
        return CaseResult(case=spec, status="skip", message=str(exc))
    except Exception as exc:  # the nightly must go on; the message carries the cause
        return _error(spec, exc, device)


def _error(spec: CaseSpec, exc: Exception, device: str) -> CaseResult:
    if device != "cpu" and isinstance(exc, torch.OutOfMemoryError):
        torch.cuda.empty_cache()
    tb = traceback.extract_tb(exc.__traceback__)
    where = f" (at {tb[-1].filename.rsplit('/', 1)[-1]}:{tb[-1].lineno})" if tb else ""
    return CaseResult(case=spec, status="error", message=f"{type(exc).__name__}: {exc}{where}")


def worst(status_a: Status, status_b: Status) -> Status:
    order = {"pass": 0, "skip": 1, "fail": 2, "error": 3}
    return status_a if order[status_a] >= order[status_b] else status_b
