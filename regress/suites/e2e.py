"""End-to-end: a real attention layer (Q/K/V projections, attention, output projection, all bf16)
at video-diffusion shapes, with the kernel and with the baseline as its attention, timed
interleaved. Shows whether a kernel gain survives next to the matmuls around it.

GPU shapes follow Wan2.1 text-to-video: 1.3B (12 heads) and 14B (40 heads) at head_dim 128, S = 32,760
video tokens at 480p (21 latent frames × 30 × 52) and 4,680 for a short low-resolution clip, plus the
cross-attention to 512 text tokens.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from typing import Any

import torch
from torch import nn

from regress.cases import E2E_GPU_CASES, E2E_LAYOUT, HEAD_DIM, Shape, e2e_case, spec_shape
from regress.gpu_state import device_state
from regress.metrics import timing_metrics
from regress.phases import phase
from regress.results import ROUNDING_MODES, CaseResult, CaseSpec, Layout
from regress.suites.base import SuiteContext
from regress.suites.common import as_mode, derive_seed, for_device, guarded, plan_metrics
from regress.suites.timing import interleaved_rounds, working_baselines

NAME = "e2e"
LAYOUT: Layout = E2E_LAYOUT

# (shape, layer kind); Sk = Sq for self-attention, 512 text tokens for cross-attention. The GPU
# table is the catalogue's, which the demo also writes.
GPU_CASES = E2E_GPU_CASES
GPU_QUICK = [(Shape(2, 12, 4680, 4680), "self"), (Shape(1, 12, 4680, 512), "cross")]
CPU_CASES = [
    (Shape(1, 2, 256, 256), "self"),
    (Shape(2, 2, 128, 128), "self"),
    (Shape(1, 2, 256, 77), "cross"),
]
CPU_QUICK = [(Shape(1, 2, 128, 128), "self"), (Shape(1, 2, 128, 77), "cross")]

AttentionFn = Callable[[torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor]


class AttentionLayer(nn.Module):
    """x -> Wq x, Wk c, Wv c -> attention -> Wo: a DiT block's attention without its norms."""

    def __init__(
        self, heads: int, *, device: str, generator: torch.Generator, head_dim: int = HEAD_DIM
    ) -> None:
        super().__init__()
        self.heads, self.head_dim = heads, head_dim
        dim = heads * head_dim
        kw: dict[str, Any] = {"dtype": torch.bfloat16, "device": device}
        self.q, self.k, self.v, self.o = (nn.Linear(dim, dim, **kw) for _ in range(4))
        with torch.no_grad():
            for lin in (self.q, self.k, self.v, self.o):
                w = torch.randn(lin.weight.shape, generator=generator, device=device) / math.sqrt(dim)
                lin.weight.copy_(w)
                lin.bias.zero_()

    def forward(self, x: torch.Tensor, context: torch.Tensor, attention: AttentionFn) -> torch.Tensor:
        b, s, dim = x.shape
        sk = context.shape[1]
        q = self.q(x).view(b, s, self.heads, self.head_dim)
        k = self.k(context).view(b, sk, self.heads, self.head_dim)
        v = self.v(context).view(b, sk, self.heads, self.head_dim)
        return self.o(attention(q, k, v).reshape(b, s, dim))


def default_iterations(ctx: SuiteContext) -> int:
    if ctx.iterations is not None:
        return max(1, ctx.iterations)
    if ctx.is_gpu:
        return 10 if ctx.quick else 30
    return 3 if ctx.quick else 20


class E2eSuite:
    name = NAME

    def cases(self, ctx: SuiteContext) -> list[CaseSpec]:
        table = for_device(ctx, gpu=(GPU_QUICK, GPU_CASES), cpu=(CPU_QUICK, CPU_CASES))
        # All modes only where it is cheap enough to matter: the mode changes one epilogue rounding.
        modes = ROUNDING_MODES if ctx.is_gpu and not ctx.quick else ("rtne",)
        return [e2e_case(shape, kind, mode) for shape, kind in table for mode in modes]

    def run_case(self, ctx: SuiteContext, spec: CaseSpec) -> CaseResult:
        return guarded(spec, lambda: self._run(ctx, spec), ctx.device)

    def _run(self, ctx: SuiteContext, spec: CaseSpec) -> CaseResult:
        shape = spec_shape(spec)
        mode = as_mode(spec.params["mode"])
        kind = str(spec.params.get("layer", "self"))
        seed = derive_seed(ctx.seed, NAME, shape.dims(), kind)
        with phase("inputs"):
            g = torch.Generator(device=ctx.device)
            g.manual_seed(seed)
            layer = AttentionLayer(shape.h, device=ctx.device, generator=g, head_dim=shape.d)
            dim = shape.h * shape.d
            x = torch.randn((shape.b, shape.sq, dim), generator=g, device=ctx.device).to(torch.bfloat16)
            context = (
                x
                if kind == "self"
                else (
                    torch.randn((shape.b, shape.sk, dim), generator=g, device=ctx.device).to(torch.bfloat16)
                )
            )

        def kernel_attn(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
            return ctx.library.forward(q, k, v, layout=LAYOUT, rounding=mode)

        variants: list[tuple[str, AttentionFn]] = [("time_ms", kernel_attn)]
        notes: list[str] = []
        for bl in ctx.baselines:
            bmode = mode if bl.supports(mode) else "rtne"
            if not bl.supports(bmode):
                continue
            if bmode != mode:
                notes.append(f"{bl.name} at {bmode}")

            def base_attn(
                q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, bl: Any = bl, bmode: str = bmode
            ) -> torch.Tensor:
                return bl(q, k, v, layout=LAYOUT, rounding=bmode)

            variants.append((f"baseline:{bl.name}:time_ms", base_attn))

        iters = default_iterations(ctx)
        warm = 2 if ctx.is_gpu else 1
        with torch.inference_mode():
            probes = [(key, functools.partial(layer, x, context, fn)) for key, fn in variants]
            kept = working_baselines(probes, ctx.device, notes)
        variants = [(key, fn) for key, fn in variants if key in kept]
        before = device_state(ctx.device)
        # The layer times one input (x, context) every round: the round index goes unused.
        runners = [(key, lambda _i, fn=fn: layer(x, context, fn)) for key, fn in variants]
        with torch.inference_mode(), phase("timing"):  # kernel and baselines interleaved
            samples = interleaved_rounds(ctx.device, runners, warm, iters)
        after = device_state(ctx.device)

        tokens = shape.b * shape.sq
        metrics: dict[str, Any] = {
            **timing_metrics(
                samples, "tokens_per_s", lambda ms: tokens / (ms * 1e-3) if ms > 0 else math.nan
            ),
            "iterations": iters,
            **plan_metrics(ctx, shape, LAYOUT, mode),
        }
        return CaseResult(
            case=spec,
            status="pass",
            metrics=metrics,
            samples=samples,
            message="; ".join(notes),
            device={"before": before, "after": after},
        )
