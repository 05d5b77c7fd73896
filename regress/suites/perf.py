"""Performance: kernel and baselines timed interleaved, every sample stored.

Protocol per case: build several input sets (rotated so each iteration reads cold data on GPU:
together they exceed the L2 several times), warm up, then `iterations` rounds; each round times the
kernel and every baseline once on the same input set, alternating which goes first so neither
always runs after the other. GPU times are CUDA events around each call (device time, recorded
without synchronising in between); CPU times are perf_counter_ns.

Baselines that lack the case's rounding mode (SDPA is rtne only) are timed in a mode they have:
the mode changes one rounding in the epilogue, so the speed comparison still holds; the message
says so.
"""

from __future__ import annotations

import functools
import math
import os
import time
from collections.abc import Callable
from typing import Any

import torch

from regress.gpu_state import device_state
from regress.metrics import timing_metrics
from regress.phases import phase
from regress.results import LAYOUTS, ROUNDING_MODES, CaseResult, CaseSpec
from regress.suites.base import SuiteContext
from regress.suites.common import (
    Shape,
    derive_seed,
    for_device,
    guarded,
    make_inputs,
    make_spec,
    output_like,
    spec_layout_mode,
    spec_shape,
    synchronize,
)
from regress.suites.timing import Timer, working_baselines

NAME = "perf"

# A slowdown drill names the clean build of the same kernel here (regress/nightly.py); the suite then
# times it interleaved with the drill, so the drill's cost is measured in the same rounds, per case.
DRILL_CONTROL_ENV = "REGRESS_DRILL_CONTROL_LIB"
DRILL_CONTROL_SAMPLE = "drill_control:time_ms"

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
# at 100 iterations x 6 cases each, so they are opt-in: REGRESS_PERF_LONG=1.
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


def _long_shapes() -> bool:
    return os.environ.get("REGRESS_PERF_LONG", "") not in ("", "0")


GPU_QUICK = [Shape(16, 16, 1024, 1024), Shape(2, 16, 8192, 8192), Shape(2, 40, 1024, 77)]

# Input rotation: inputs of all sets together at least this many times the L2.
L2_FACTOR = 4
MAX_SETS = 16


def default_iterations(ctx: SuiteContext) -> int:
    if ctx.iterations is not None:
        return max(1, ctx.iterations)
    if ctx.is_gpu:
        return 20 if ctx.quick else 100
    return 5 if ctx.quick else 100


# CPU: time each case for at least this long, whatever the iteration count. A case of 30 rounds at
# 0.15 ms spans 5 ms, and one scheduler hiccup on a shared 2-core runner then shifts every sample
# (seen: a clean-vs-clean gate flagging +14.6 %). GPU timings are device events after a spin, which
# host bursts do not move, so the GPU keeps its fixed count.
CPU_MIN_WINDOW_S = {True: 0.1, False: 0.5}  # by ctx.quick
MAX_ITERATIONS = 5000


def timed_iterations(ctx: SuiteContext, iters: int, round_s: float) -> int:
    """`iters`, raised on the CPU so the timed rounds span at least CPU_MIN_WINDOW_S."""
    if ctx.is_gpu or round_s <= 0:
        return iters
    return max(iters, min(MAX_ITERATIONS, math.ceil(CPU_MIN_WINDOW_S[ctx.quick] / round_s)))


def warmup_iterations(ctx: SuiteContext) -> int:
    if ctx.is_gpu:
        return 3 if ctx.quick else 10
    return 1 if ctx.quick else 2


def input_sets(ctx: SuiteContext, shape: Shape) -> int:
    if not ctx.is_gpu:
        return 2 if ctx.quick else 3
    set_bytes = 2 * shape.d * shape.b * shape.h * (2 * shape.sq + 2 * shape.sk)  # q, k, v and out
    l2 = int(getattr(torch.cuda.get_device_properties(torch.cuda.current_device()), "L2_cache_size", 0))
    l2 = l2 or 64 << 20
    n = max(2, math.ceil(L2_FACTOR * l2 / set_bytes))
    free, _ = torch.cuda.mem_get_info()
    fit = max(1, int(0.5 * free // set_bytes))
    return max(1, min(n, MAX_SETS, fit))


def _baseline_mode(bl: Any, mode: str) -> str:
    return mode if bl.supports(mode) else ("rtne" if bl.supports("rtne") else bl.modes[0])


def tflops(shape: Shape, ms: float) -> float:
    return shape.flops / (ms * 1e-3) / 1e12 if ms > 0 else math.nan


class PerfSuite:
    name = NAME

    def cases(self, ctx: SuiteContext) -> list[CaseSpec]:
        gpu_full = (
            GPU_SHAPES + GPU_MODEL_SHAPES + GPU_DECODE_SHAPES + (GPU_LONG_SHAPES if _long_shapes() else [])
        )
        shapes = for_device(ctx, gpu=(GPU_QUICK, gpu_full), cpu=(CPU_QUICK, CPU_SHAPES))
        return [
            make_spec(NAME, shape, layout, mode)
            for shape in shapes
            for layout in LAYOUTS
            for mode in ROUNDING_MODES
        ]

    def run_case(self, ctx: SuiteContext, spec: CaseSpec) -> CaseResult:
        return guarded(spec, lambda: self._run(ctx, spec), ctx.device)

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

        def kernel(i: int) -> object:
            q, k, v = sets[i % n_sets]
            return ctx.library.forward(q, k, v, layout=layout, rounding=mode, out=outs[i % n_sets])

        runners.append(("time_ms", kernel))
        requested, control = _drill_control(ctx)
        if control is not None:

            def clean(i: int, lib: Any = control) -> object:
                q, k, v = sets[i % n_sets]
                return lib.forward(q, k, v, layout=layout, rounding=mode, out=outs[i % n_sets])

            runners.append((DRILL_CONTROL_SAMPLE, clean))
        for bl in ctx.baselines:
            bmode = _baseline_mode(bl, mode)
            if bmode != mode:
                notes.append(f"{bl.name} timed at {bmode} (it has no {mode})")

            def baseline(i: int, bl: Any = bl, bmode: str = bmode) -> object:
                q, k, v = sets[i % n_sets]
                return bl(q, k, v, layout=layout, rounding=bmode)

            runners.append((f"baseline:{bl.name}:time_ms", baseline))

        probes = [(key, functools.partial(fn, 0)) for key, fn in runners]
        kept = working_baselines(probes, ctx.device, notes)
        runners = [(key, fn) for key, fn in runners if key in kept]
        before = device_state(ctx.device)
        with phase("timing"):  # kernel and baselines interleaved: one phase, not separable
            warm_start = time.perf_counter()
            for i in range(warm):
                for _, fn in runners:
                    fn(i)
            synchronize(ctx.device)
            iters = timed_iterations(ctx, iters, (time.perf_counter() - warm_start) / max(1, warm))

            timer = Timer(ctx.is_gpu)
            for i in range(iters):
                order = runners if i % 2 == 0 else runners[::-1]
                timer.prime()
                for key, fn in order:
                    timer.time(key, functools.partial(fn, i))
            samples = timer.samples()
        after = device_state(ctx.device)

        metrics: dict[str, Any] = {
            **timing_metrics(samples, "tflops", functools.partial(tflops, shape)),
            "iterations": iters,
            "warmup": warm,
            "input_sets": n_sets,
            **drill_cost(samples, requested),
        }
        return CaseResult(
            case=spec,
            status="pass",
            metrics=metrics,
            samples=samples,
            message="; ".join(notes),
            device={"before": before, "after": after},
        )


def _drill_control(ctx: SuiteContext) -> tuple[int, Any]:
    """(requested slowdown %, the clean library) for a slowdown drill with a control; (0, None) else."""
    requested = int((ctx.library.build_info().get("inject") or {}).get("slowdown_pct", 0) or 0)
    path = os.environ.get(DRILL_CONTROL_ENV)
    if not requested or not path:
        return requested, None
    from regress.kernel import load_library

    return requested, load_library(path)


def drill_cost(samples: dict[str, list[float]], requested: int) -> dict[str, Any]:
    """The drill's measured cost: the ratio of the fastest drill call to the fastest clean call,
    timed in the same interleaved rounds. The minimum, not the gate's lower quartile: on the loaded
    2-core runner more than a quarter of a 1.6 ms call's rounds can be preempted (measured: 6-10 ms
    calls beside 1.6 ms), which moved the quartile ratio of a 10 % drill to +178 % on one case while
    the ratio of minima stayed at +9 % (18 cases, 60 rounds: geomean +9.6 %); noise only adds time,
    so each minimum is its build's least-disturbed call."""
    drill, clean = samples.get("time_ms", []), samples.get(DRILL_CONTROL_SAMPLE, [])
    if not requested or not drill or not clean or min(clean) <= 0:
        return {}
    return {
        "drill_requested_pct": requested,
        "drill_measured_pct": (min(drill) / min(clean) - 1.0) * 100.0,
        "drill_rounds": min(len(drill), len(clean)),
    }
