"""Performance: kernel and baselines timed interleaved, every sample stored.

Protocol per case: build several input sets (rotated so each iteration reads cold data on GPU:
together they exceed the L2 several times), warm up, then `iterations` rounds; each round times the
kernel and every baseline once on the same input set, alternating which goes first so neither
always runs after the other. GPU times are CUDA events around each call (device time, recorded
without synchronising in between). CPU times are the calling thread's CPU time, with our golden
model and torch each on one thread (`_one_thread`): a second thread, and wall time on a shared
machine, measured the scheduler, not the kernel.

A/B (`regress nightly --compare-build`; slowdown drills by default): a second build, the run's
option `ab_baseline` (regress.run.runner.CaseOptions), is timed against this run's own build in a phase
of its own after those rounds, the two alternating A B, B A, ... on the same inputs (samples
`ab:baseline:time_ms` and `ab:candidate:time_ms`, judged by `regress.detect.paired`). The first
phase is then the same in every run, A/B or not, so a drill night and a clean night share their
round structure.

Baselines that lack the case's rounding mode (SDPA is rtne only) are timed in a mode they have:
the mode changes one rounding in the epilogue, so the speed comparison still holds; the message
says so.
"""

from __future__ import annotations

import contextlib
import functools
import math
import os
from collections.abc import Callable, Iterator
from typing import Any

import torch

from regress.facts.cases import (
    VARLEN_CHUNK_GPU,
    VARLEN_DECODE_GPU,
    VARLEN_MIX_CPU,
    VARLEN_MIX_GPU,
    Shape,
    perf_case,
    prefill_seqs,
    spec_shape,
)
from regress.facts.metrics import timing_metrics
from regress.facts.phases import phase
from regress.facts.results import (
    AB_BASELINE_SAMPLE,
    AB_CANDIDATE_SAMPLE,
    AB_SWAP_METRIC,
    LAYOUTS,
    ROUNDING_MODES,
    CaseResult,
    CaseSpec,
)
from regress.kernel.baselines import varlen_baselines
from regress.machine.gpu_state import device_state
from regress.run.suites.base import SuiteContext
from regress.run.suites.common import (
    call_kwargs,
    call_varlen_baseline,
    derive_seed,
    for_device,
    guarded,
    is_v2,
    make_inputs,
    output_like,
    plan_metrics,
    spec_layout_mode,
)
from regress.run.suites.timing import both_listings_rounds, interleaved_rounds, working_baselines

NAME = "perf"

# CPU: the golden model runs at ~5 GFLOP/s on 2 cores, so "very long" is S = 1024 at B·H = 1
# (≈0.12 s a launch; 100 rounds × 6 mode/layout cases ≈ 75 s of the 5-minute budget).
CPU_SHAPES = [
    Shape(1, 1, 128, 128),
    Shape(1, 1, 256, 256),
    Shape(1, 1, 512, 512),
    Shape(1, 1, 1024, 1024),
    Shape(1, 2, 256, 77),
]
CPU_QUICK = [Shape(1, 1, 128, 128), Shape(1, 1, 256, 256), Shape(1, 1, 64, 77)]
# GPU: the H200 table of ANCHORS.md (same FLOPs per shape, S from 512 to 16k, plus the cross shape),
# MoonMath's shapes that fit a nightly (B, H, S) = (2,24,8192), (1,32,16384), and a very long
# S = 32,768. The longest MoonMath shapes (S = 32k at B·H = 48, S = 128k) cost ~8 min of device time
# at 100 iterations x 6 cases each, so they are opt-in: `regress nightly --long-shapes`.
GPU_SHAPES = [
    Shape(32, 16, 512, 512),
    Shape(16, 16, 1024, 1024),
    Shape(8, 16, 2048, 2048),
    Shape(4, 16, 4096, 4096),
    Shape(2, 16, 8192, 8192),
    Shape(1, 16, 16384, 16384),
    Shape(2, 40, 1024, 77),
    Shape(2, 24, 8192, 8192),
    Shape(1, 32, 16384, 16384),
    Shape(1, 16, 32768, 32768),
]
GPU_LONG_SHAPES = [Shape(2, 24, 32768, 32768), Shape(1, 16, 131072, 131072), Shape(1, 32, 32768, 32768)]
# GPU: the families real models run (issue 15), so the nightly measures what users would pick a
# kernel for. Odd lengths exercise partial query and key tiles.
GPU_MODEL_SHAPES = [
    Shape(8, 32, 2048, 2048),  # LLM prefill, 32 heads, 2k
    Shape(1, 64, 8192, 8192),  # LLM prefill, 64 heads, 8k
    # LLM prefill at 32k: (1,16,32768) above runs nightly; 32 heads at 32k (~70 s of device time on
    # one H200 for its 6 cases) is in the opt-in GPU_LONG_SHAPES.
    Shape(2, 24, 4096, 4096),  # diffusion self-attention, 24 heads, 4k
    Shape(1, 24, 16384, 16384),  # diffusion, 24 heads, 16k
    Shape(64, 16, 256, 256),  # many short sequences
    Shape(256, 32, 128, 128),  # many very short sequences
    Shape(2, 24, 4096, 77),  # cross-attention to a 77-token text encoder
    Shape(2, 24, 4096, 256),  # cross-attention to 256 keys
    Shape(2, 24, 4096, 1024),  # cross-attention to 1024 keys
    Shape(2, 32, 1531, 1531),  # odd lengths: partial query and key tiles
    Shape(1, 24, 4097, 4097),  # one row and one key past a tile boundary
    Shape(3, 40, 1000, 2049),  # odd, Sq != Sk
]

# GPU: the shapes where the H200 kernel trailed cuDNN before issue 26 (decode, short queries, two
# square sizes), so a regression in them is caught: decode (Sq = 1) reads all of K and V for one
# query row (memory-bound; the grid has as many tiles as batch x heads), short queries (Sq = 16,
# 64) likewise with one query tile, and the square families 4608 (diffusion) and 2048 (prefill).
GPU_DECODE_SHAPES = [
    Shape(8, 32, 1, 4096),
    Shape(32, 32, 1, 8192),
    Shape(16, 32, 1, 2048),
    Shape(1, 32, 1, 8192),  # decode at batch 1: 32 tiles, which the CUDA kernel splits over keys
    Shape(4, 32, 16, 8192),  # short query: speculative verification, 16 draft tokens
    Shape(4, 32, 64, 8192),  # short query: 64 rows, one query tile
    Shape(1, 24, 4608, 4608),  # diffusion, 24 heads, 4608 tokens (72 x 64 latents)
    Shape(16, 32, 2048, 2048),  # prefill, 32 heads, 2k, a full batch
]


GPU_QUICK = [Shape(16, 16, 1024, 1024), Shape(2, 16, 8192, 8192), Shape(2, 40, 1024, 77)]

# Input rotation: inputs of all sets together at least this many times the L2.
L2_FACTOR = 4
MAX_SETS = 16


# The floor on rounds: what the paired A/B test needs (20 ABBA blocks on the CPU: its smallest
# two-sided p is then 2e-6) and what the rank test of two nights needs.
CPU_MIN_ROUNDS = {True: 40, False: 100}  # by ctx.quick
GPU_MIN_ROUNDS = {True: 40, False: 100}


def default_iterations(ctx: SuiteContext) -> int:
    if ctx.iterations is not None:
        return max(1, ctx.iterations)
    return (GPU_MIN_ROUNDS if ctx.is_gpu else CPU_MIN_ROUNDS)[ctx.quick]


# CPU: time each case for at least this long, whatever the iteration count. A case of 30 rounds at
# 0.15 ms spans 5 ms, and one scheduler hiccup on a shared 2-core runner then shifts every sample
# (seen: a clean-vs-clean gate flagging +14.6 %). The rounds follow from the shape's FLOPs at a
# stated single-thread rate, not from a warm-up round (one preempted warm-up once gave a case 5
# rounds and its twin 770), so two runs of one case always have the same round structure. GPU
# timings are device events after a spin, which host bursts do not move: the GPU keeps its count.
CPU_MIN_WINDOW_S = {True: 0.1, False: 0.25}  # by ctx.quick; thread CPU time needs no longer window
CPU_NOMINAL_FLOPS = 2.2e10  # the golden model on one thread of this 2-core VM (measured 22-25 GFLOP/s)
MAX_ITERATIONS = 2000


def timed_iterations(ctx: SuiteContext, iters: int, shape: Shape) -> int:
    """`iters`, raised on the CPU so the timed rounds span about CPU_MIN_WINDOW_S."""
    if ctx.is_gpu:
        return iters
    call_s = shape.flops / CPU_NOMINAL_FLOPS
    return max(iters, min(MAX_ITERATIONS, math.ceil(CPU_MIN_WINDOW_S[ctx.quick] / call_s)))


# The A/B phase on the CPU gets twice the rounds (at most AB_MAX_ITERATIONS, never fewer than the
# first phase): a loaded 2-core VM scatters the paired blocks of a 1.5 ms case enough that 20
# blocks left its MDE at 15 %; the phase costs about 6 s of CPU time per quick night.
AB_CPU_FACTOR = 2
AB_MAX_ITERATIONS = 1000


def ab_iterations(ctx: SuiteContext, iters: int) -> int:
    return iters if ctx.is_gpu else max(iters, min(AB_MAX_ITERATIONS, AB_CPU_FACTOR * iters))


@contextlib.contextmanager
def _one_thread(ctx: SuiteContext) -> Iterator[None]:
    """CPU: our golden model and torch's SDPA control on one thread each while timing. Torch's
    worker sets its own thread count (overriding OMP_NUM_THREADS), and its OpenMP threads spin after
    each call and steal the core our second thread needs (45 % of our calls slow under default
    threading, 10 % with torch on one thread); the worker also sets OMP_WAIT_POLICY=passive."""
    if ctx.is_gpu:
        yield
        return
    before_env, before_torch = os.environ.get("REGRESS_CPU_THREADS"), torch.get_num_threads()
    os.environ["REGRESS_CPU_THREADS"] = "1"  # the kernel reads it at each call
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(before_torch)
        if before_env is None:
            os.environ.pop("REGRESS_CPU_THREADS", None)
        else:
            os.environ["REGRESS_CPU_THREADS"] = before_env


# Untimed rounds before a GPU case's timed ones, by ctx.quick (benchmarks/h200/h200_ceiling.py times its
# ceilings in the same round structure).
GPU_WARMUP_ROUNDS = {True: 3, False: 10}


def warmup_iterations(ctx: SuiteContext) -> int:
    if ctx.is_gpu:
        return GPU_WARMUP_ROUNDS[ctx.quick]
    return 1 if ctx.quick else 2


def input_sets(ctx: SuiteContext, shape: Shape) -> int:
    if not ctx.is_gpu:
        return 2 if ctx.quick else 3
    set_bytes = shape.min_bytes  # q, k, v and out
    l2 = int(getattr(torch.cuda.get_device_properties(torch.cuda.current_device()), "L2_cache_size", 0))
    l2 = l2 or 64 << 20
    n = max(2, math.ceil(L2_FACTOR * l2 / set_bytes))
    free, _ = torch.cuda.mem_get_info()
    fit = max(1, int(0.5 * free // set_bytes))
    return max(1, min(n, MAX_SETS, fit))


def _baseline_mode(bl: Any, mode: str) -> str:
    return mode if bl.supports(mode) else ("rtne" if bl.supports("rtne") else bl.modes[0])


# ABI v2's families (issue 40), bshd, every mode. TFLOP/s count the unmasked work only (Shape.flops).
# On a backend whose kernels lack the feature they skip (RA_ERR_UNSUPPORTED). The baselines time the
# same calls: SDPA (cuDNN, FlashAttention-2) with is_causal / causal_lower_right / enable_gqa, and for
# the packed varlen batches FlashAttention-2's varlen path (regress.kernel.baselines.varlen_baselines).
V2_CPU_QUICK = [
    Shape(1, 4, 192, 192, hkv=1, mask="causal_top_left"),
    Shape.varlen(2, prefill_seqs([1, 7, 40, 200]), hkv=1, mask="causal_bottom_right"),
]
V2_CPU = [
    *V2_CPU_QUICK,
    Shape(1, 4, 512, 512, hkv=2, mask="causal_top_left"),
    Shape(1, 4, 256, 256, hkv=1),
    Shape(4, 8, 1, 1024, hkv=2, mask="causal_bottom_right"),
    Shape.varlen(2, VARLEN_MIX_CPU, hkv=1, mask="causal_bottom_right"),
]
V2_GPU_QUICK = [
    Shape(2, 32, 8192, 8192, hkv=8, mask="causal_top_left"),
    Shape.varlen(32, VARLEN_MIX_GPU, hkv=8, mask="causal_bottom_right"),
]
V2_GPU = [
    *(Shape(16 // (s // 2048), 32, s, s, hkv=8, mask="causal_top_left") for s in (2048, 4096, 8192, 16384)),
    Shape(2, 32, 8192, 8192, mask="causal_top_left"),  # causal multi-head at 8k (no K/V sharing)
    Shape(4, 32, 4096, 4096, hkv=8),  # non-causal GQA 32/8 at 4k
    Shape(4, 32, 2048, 4096, hkv=8, mask="causal_bottom_right"),  # chunked prefill against a cache
    Shape(16, 32, 1, 8192, hkv=8, mask="causal_bottom_right"),  # decode, GQA, 8k cache
    # packed batches against FlashAttention-2's varlen path: prefill (causal and not), a decode step
    # of 64 sequences, a chunked-prefill step (regress.facts.cases' serving mixes)
    Shape.varlen(32, VARLEN_MIX_GPU, hkv=8, mask="causal_bottom_right"),
    Shape.varlen(32, VARLEN_MIX_GPU, hkv=8),
    Shape.varlen(32, VARLEN_DECODE_GPU, hkv=8, mask="causal_bottom_right"),
    Shape.varlen(32, VARLEN_CHUNK_GPU, hkv=8, mask="causal_bottom_right"),
]


def tflops(shape: Shape, ms: float) -> float:
    return shape.flops / (ms * 1e-3) / 1e12 if ms > 0 else math.nan


class PerfSuite:
    name = NAME

    def cases(self, ctx: SuiteContext) -> list[CaseSpec]:
        gpu_full = (
            GPU_SHAPES + GPU_MODEL_SHAPES + GPU_DECODE_SHAPES + (GPU_LONG_SHAPES if ctx.long_shapes else [])
        )
        shapes = for_device(ctx, gpu=(GPU_QUICK, gpu_full), cpu=(CPU_QUICK, CPU_SHAPES))
        v2 = for_device(ctx, gpu=(V2_GPU_QUICK, V2_GPU), cpu=(V2_CPU_QUICK, V2_CPU))
        return [
            perf_case(shape, layout, mode)
            for shape in shapes
            for layout in LAYOUTS
            for mode in ROUNDING_MODES
        ] + [perf_case(shape, "bshd", mode) for shape in v2 for mode in ROUNDING_MODES]

    def run_case(self, ctx: SuiteContext, spec: CaseSpec) -> CaseResult:
        def timed() -> CaseResult:
            with _one_thread(ctx):
                return self._run(ctx, spec)

        return guarded(spec, timed, ctx.device)

    def _run(self, ctx: SuiteContext, spec: CaseSpec) -> CaseResult:
        shape = spec_shape(spec)
        layout, mode = spec_layout_mode(spec)
        iters, warm, n_sets = default_iterations(ctx), warmup_iterations(ctx), input_sets(ctx, shape)
        with phase("inputs"):
            sets = [
                make_inputs(
                    shape, layout, seed=derive_seed(ctx.seed, NAME, shape.dims(), i), device=ctx.device
                )
                for i in range(n_sets)
            ]
        outs = [output_like(s[0]) for s in sets]
        notes: list[str] = []
        runners: list[tuple[str, Callable[[int], object]]] = []

        kw = call_kwargs(shape, ctx.device)

        def kernel(i: int) -> object:
            q, k, v = sets[i % n_sets]
            return ctx.library.forward(q, k, v, layout=layout, rounding=mode, out=outs[i % n_sets], **kw)

        runners.append(("time_ms", kernel))
        requested = int((ctx.library.build_info().get("inject") or {}).get("slowdown_pct", 0) or 0)
        other = _ab_baseline(ctx)
        varlen = shape.seqs is not None
        if is_v2(shape):
            kernel(0)  # a backend without the feature refuses here: the case skips (guarded)
        # masked and GQA calls go to the baselines that take them (SDPA's is_causal, causal_lower_right,
        # enable_gqa); a packed varlen batch to FlashAttention-2's varlen path on the same tensors
        baselines = (varlen_baselines(ctx.device) if ctx.baselines else []) if varlen else ctx.baselines
        if varlen and ctx.baselines and not baselines:
            notes.append("baselines not timed: none takes a packed varlen batch on this device")
        for bl in baselines:
            bmode = _baseline_mode(bl, mode)
            if bmode != mode:
                notes.append(f"{bl.name} timed at {bmode} (it has no {mode})")

            def baseline(i: int, bl: Any = bl, bmode: str = bmode) -> object:
                q, k, v = sets[i % n_sets]
                if varlen:
                    return call_varlen_baseline(bl, q, k, v, kw, mask=shape.mask)
                return bl(q, k, v, layout=layout, rounding=bmode, mask=shape.mask)

            runners.append((f"baseline:{bl.name}:time_ms", baseline))

        probes = [(key, functools.partial(fn, 0)) for key, fn in runners]
        kept = working_baselines(probes, ctx.device, notes)
        runners = [(key, fn) for key, fn in runners if key in kept]
        before = device_state(ctx.device)
        iters = timed_iterations(ctx, iters, shape)
        swap_at = 0  # where the A/B arms' second listing begins (no A/B: none)
        with phase("timing"):  # kernel and baselines interleaved: one phase, not separable
            # CPU: each call's thread CPU time (one thread, _one_thread), which a neighbour cannot stretch.
            samples = interleaved_rounds(ctx.device, runners, warm, iters, thread_clock=True)
            if other is not None:

                def baseline_build(i: int, lib: Any = other) -> object:
                    q, k, v = sets[i % n_sets]
                    return lib.forward(q, k, v, layout=layout, rounding=mode, out=outs[i % n_sets], **kw)

                arms = [(AB_CANDIDATE_SAMPLE, kernel), (AB_BASELINE_SAMPLE, baseline_build)]
                ab_rounds = ab_iterations(ctx, iters)
                ab_samples, swap_at = both_listings_rounds(
                    ctx.device, arms, warm, ab_rounds, thread_clock=True
                )
                samples.update(ab_samples)
        after = device_state(ctx.device)

        metrics: dict[str, Any] = {
            **timing_metrics(samples, "tflops", functools.partial(tflops, shape)),
            "iterations": iters,
            "warmup": warm,
            "input_sets": n_sets,
            **(
                {
                    "ab_baseline": ctx.ab_label or "a second build",
                    "ab_rounds": ab_iterations(ctx, iters),
                    AB_SWAP_METRIC: swap_at,
                }
                if other
                else {}
            ),
            **drill_cost(samples, requested, swap_at),
            **plan_metrics(ctx, shape, layout, mode),
        }
        return CaseResult(
            case=spec,
            status="pass",
            metrics=metrics,
            samples=samples,
            message="; ".join(notes),
            device={"before": before, "after": after},
        )


def _ab_baseline(ctx: SuiteContext) -> Any:
    """The context's A/B baseline build, loaded; None when there is none."""
    if not ctx.ab_baseline:
        return None
    from regress.kernel import load_library

    return load_library(ctx.ab_baseline)


def drill_cost(samples: dict[str, list[float]], requested: int, swap_at: int = 0) -> dict[str, Any]:
    """The drill's measured cost: the drill build's time over the clean build's, both timed in the
    same rounds of the A/B phase, by the statistic the A/B verdict judges (`regress.detect.paired`:
    the median over ABBA blocks, with two listings the mean of their medians). Paired blocks, not
    the two builds' separate minima or quartiles: a preempted round slows both arms of its block, so
    it cancels in the ratio instead of deciding it (on the loaded 2-core runner the quartile ratio
    of one 10 % drill case read +178 %)."""
    from regress.detect.paired import listing_location, listing_logs

    halves = listing_logs(
        samples.get(AB_BASELINE_SAMPLE, []), samples.get(AB_CANDIDATE_SAMPLE, []), 2, swap_at
    )
    d = [x for h in halves for x in h]
    if not requested or not d:
        return {}
    return {
        "drill_requested_pct": requested,
        # The median the A/B verdict takes (detect.paired); an upper median here read another block.
        "drill_measured_pct": math.expm1(listing_location(halves)[0]) * 100.0,
        "drill_rounds": 2 * len(d),
    }
