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
from typing import TYPE_CHECKING, Any

import torch
from torch import nn

from regress.facts.cases import (
    E2E_GPU_CASES,
    E2E_LAYOUT,
    HEAD_DIM,
    LLAMA3_8B_HEADS,
    LLAMA3_8B_KV_HEADS,
    Shape,
    e2e_case,
    spec_shape,
)
from regress.facts.metrics import timing_metrics
from regress.facts.phases import phase
from regress.facts.results import ROUNDING_MODES, CaseResult, CaseSpec, Layout
from regress.machine.gpu_state import device_state
from regress.run.suites.base import SuiteContext
from regress.run.suites.common import as_mode, call_kwargs, derive_seed, for_device, guarded, plan_metrics
from regress.run.suites.timing import interleaved_rounds, working_baselines

if TYPE_CHECKING:
    from regress.kernel.baselines import Baseline

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
# A Llama-3-8B attention layer (32 query heads, 8 K/V heads, head_dim 128): causal prefill at 2k and
# 8k, and one decode step of 16 sequences against an 8k K/V cache. On the CPU the same structure
# (groups of 4 query heads per K/V head, causal) at a size CI can run.
LLAMA_GPU = [
    (Shape(4, LLAMA3_8B_HEADS, 2048, 2048, hkv=LLAMA3_8B_KV_HEADS, mask="causal_top_left"), "prefill"),
    (Shape(1, LLAMA3_8B_HEADS, 8192, 8192, hkv=LLAMA3_8B_KV_HEADS, mask="causal_top_left"), "prefill"),
    (Shape(16, LLAMA3_8B_HEADS, 1, 8192, hkv=LLAMA3_8B_KV_HEADS, mask="causal_bottom_right"), "decode"),
]
LLAMA_CPU_QUICK = [
    (Shape(1, 8, 128, 128, hkv=2, mask="causal_top_left"), "prefill"),
    (Shape(4, 8, 1, 512, hkv=2, mask="causal_bottom_right"), "decode"),
]
LLAMA_CPU = [(Shape(1, 8, 512, 512, hkv=2, mask="causal_top_left"), "prefill"), *LLAMA_CPU_QUICK]

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
        out: torch.Tensor = self.o(attention(q, k, v).reshape(b, s, dim))
        return out


class GqaLayer(nn.Module):
    """A decoder's attention without its norms and rotary embedding: Wq x, Wk x, Wv x with fewer K/V
    heads (grouped-query), causal attention, Wo. `decode` attends one new token per sequence to a
    K/V cache passed in as `context` ([B, cache, 2, H_kv, D]: already projected, as a server keeps
    it), so the step's projections are of the one token only."""

    def __init__(
        self, heads: int, kv_heads: int, *, device: str, generator: torch.Generator, head_dim: int = HEAD_DIM
    ) -> None:
        super().__init__()
        self.heads, self.kv_heads, self.head_dim = heads, kv_heads, head_dim
        dim, kv_dim = heads * head_dim, kv_heads * head_dim
        kw: dict[str, Any] = {"dtype": torch.bfloat16, "device": device, "bias": False}
        self.q, self.o = nn.Linear(dim, dim, **kw), nn.Linear(dim, dim, **kw)
        self.k, self.v = nn.Linear(dim, kv_dim, **kw), nn.Linear(dim, kv_dim, **kw)
        with torch.no_grad():
            for lin in (self.q, self.k, self.v, self.o):
                lin.weight.copy_(
                    torch.randn(lin.weight.shape, generator=generator, device=device) / math.sqrt(dim)
                )

    def forward(self, x: torch.Tensor, context: torch.Tensor, attention: AttentionFn) -> torch.Tensor:
        b, s, dim = x.shape
        q = self.q(x).view(b, s, self.heads, self.head_dim)
        if context is x:  # prefill: the sequence's own keys
            k = self.k(x).view(b, s, self.kv_heads, self.head_dim)
            v = self.v(x).view(b, s, self.kv_heads, self.head_dim)
        else:  # decode: the new token's K/V would be appended; the cache holds them already
            _ = (self.k(x), self.v(x))  # the step's own projections, timed
            k, v = context[:, :, 0], context[:, :, 1]
        out: torch.Tensor = self.o(attention(q, k, v).reshape(b, s, dim))
        return out


def default_iterations(ctx: SuiteContext) -> int:
    if ctx.iterations is not None:
        return max(1, ctx.iterations)
    if ctx.is_gpu:
        return 10 if ctx.quick else 30
    return 3 if ctx.quick else 20


class E2eSuite:
    name = NAME

    def cases(self, ctx: SuiteContext) -> list[CaseSpec]:
        table = for_device(
            ctx,
            gpu=(GPU_QUICK + LLAMA_GPU[::2], GPU_CASES + LLAMA_GPU),
            cpu=(CPU_QUICK + LLAMA_CPU_QUICK, CPU_CASES + LLAMA_CPU),
        )
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
            dim = shape.h * shape.d
            layer: nn.Module
            if kind in ("prefill", "decode"):
                layer = GqaLayer(shape.h, shape.heads_kv, device=ctx.device, generator=g, head_dim=shape.d)
            else:
                layer = AttentionLayer(shape.h, device=ctx.device, generator=g, head_dim=shape.d)
            x = torch.randn((shape.b, shape.sq, dim), generator=g, device=ctx.device).to(torch.bfloat16)
            if kind in ("self", "prefill"):
                context = x
            elif kind == "decode":
                cache = (shape.b, shape.sk, 2, shape.heads_kv, shape.d)
                context = torch.randn(cache, generator=g, device=ctx.device).to(torch.bfloat16)
            else:
                context = torch.randn((shape.b, shape.sk, dim), generator=g, device=ctx.device).to(
                    torch.bfloat16
                )
        kw = call_kwargs(shape, ctx.device)

        def kernel_attn(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
            return ctx.library.forward(q, k, v, layout=LAYOUT, rounding=mode, **kw)

        variants: list[tuple[str, AttentionFn]] = [("time_ms", kernel_attn)]
        notes: list[str] = []
        for bl in ctx.baselines:  # the masked GQA layers go to the baselines that take them
            bmode = mode if bl.supports(mode) else "rtne"
            if not bl.supports(bmode):
                continue
            if bmode != mode:
                notes.append(f"{bl.name} at {bmode}")

            def base_attn(
                q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, bl: Baseline = bl, bmode: str = bmode
            ) -> torch.Tensor:
                return bl(q, k, v, layout=LAYOUT, rounding=bmode, mask=shape.mask)

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
