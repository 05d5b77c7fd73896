"""The suites against the real CPU golden model: clean builds pass, fire-drill builds fail."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Callable

import pytest
import torch

from regress.facts.cases import Shape, make_spec
from regress.facts.results import CaseResult, CaseSpec
from regress.kernel import KernelLibrary
from regress.kernel.baselines import Baseline
from regress.run.suites import SUITES, SuiteContext, geomean_speedups, get_suite, run_suite
from regress.run.suites.common import derive_seed, make_inputs, sha256_bits

MakeCtx = Callable[..., SuiteContext]


def _run(ctx: SuiteContext, suite: str, specs: list[CaseSpec] | None = None) -> list[CaseResult]:
    s = get_suite(suite)
    return [s.run_case(ctx, spec) for spec in (specs if specs is not None else s.cases(ctx))]


def _statuses(results: list[CaseResult]) -> dict[str, str]:
    return {r.case.name: f"{r.status}: {r.message}" for r in results if r.status != "pass"}


@pytest.mark.slow  # a whole quick suite (2.5 s CPU)
def test_quick_determinism_passes(cpu_lib: KernelLibrary, make_ctx: MakeCtx) -> None:
    results = _run(make_ctx(cpu_lib), "determinism")
    assert not _statuses(results)
    for r in results:
        assert r.metrics["distinct_hashes"] == 1 and r.metrics["differing_elements"] == 0
        assert r.metrics["launches"] >= 2


def test_nondeterministic_build_fails(nondet_drill_lib: KernelLibrary, make_ctx: MakeCtx) -> None:
    ctx = make_ctx(nondet_drill_lib)
    repeat = [s for s in get_suite("determinism").cases(ctx) if s.params["variant"] == "repeat"][:2]
    results = _run(ctx, "determinism", repeat)
    assert all(r.status == "fail" for r in results), _statuses(results)
    assert all(r.metrics["distinct_hashes"] == 2 and r.metrics["differing_elements"] == 1 for r in results)


@pytest.mark.slow  # a second process and its torch import (2.3 s CPU)
def test_second_process_worker_agrees(cpu_lib: KernelLibrary) -> None:
    shape = Shape(1, 2, 96, 130)
    seed = derive_seed(42, "test", shape.dims())
    q, k, v = make_inputs(shape, "bhsd", seed=seed, device="cpu")
    here = sha256_bits(cpu_lib.forward(q, k, v, layout="bhsd", rounding="rtz"))
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "regress.run.suites.determinism_worker",
            "--lib",
            str(cpu_lib.path),
            "--seed",
            str(seed),
            "--shape",
            shape.dims(),
            "--layout",
            "bhsd",
            "--mode",
            "rtz",
            "--launches",
            "2",
        ],
        capture_output=True,
        text=True,
        check=True,
        timeout=300,
    )
    assert json.loads(proc.stdout.splitlines()[-1])["hashes"] == [here, here]


@pytest.mark.slow  # a whole quick suite (2.5 s CPU)
def test_quick_ulp_passes_with_the_golden_model(cpu_lib: KernelLibrary, make_ctx: MakeCtx) -> None:
    results = _run(make_ctx(cpu_lib), "ulp")
    assert not _statuses(results)
    for r in results:
        m = r.metrics
        assert m["scaled_ulp_max"] <= m["scaled_ulp_limit"]
        assert m["nonfinite_mismatches"] == 0
        hist = sum(m[f"plain_ulp_hist_{k}"] for k in ("0", "1", "2", "3", "gt3"))
        assert hist == m["finite_elements"]
        assert r.samples["block_scaled_ulp_max"]
        if m.get("input") == "realistic" and r.case.params["mode"] == "rtne":
            assert "baseline:sdpa_cpu:scaled_ulp_max" in m
    poisoned = [r for r in results if r.case.params["input"].startswith(("nan", "posinf", "neginf"))]
    assert poisoned and all(r.metrics["nonfinite_reference"] > 0 for r in poisoned)


def test_ulp_drill_build_fails(ulp_drill_lib: KernelLibrary, make_ctx: MakeCtx) -> None:
    ctx = make_ctx(ulp_drill_lib, baselines=False)
    specs = [s for s in get_suite("ulp").cases(ctx) if s.params["mode"] == "rtne"][:2]
    results = _run(ctx, "ulp", specs)
    assert all(r.status == "fail" for r in results), _statuses(results)
    assert all(r.metrics["scaled_ulp_max"] > 1.5 and r.metrics["plain_ulp_max"] >= 2 for r in results)
    assert "scaled ULP max" in results[0].message


def test_perf_stores_every_sample(cpu_lib: KernelLibrary, make_ctx: MakeCtx) -> None:
    ctx = make_ctx(cpu_lib, iterations=7)
    specs = [s for s in get_suite("perf").cases(ctx) if s.params["sq"] <= 128][:3]
    results = _run(ctx, "perf", specs)
    assert not _statuses(results)
    for r in results:
        # --iterations is the minimum: the CPU extends a case to its minimum timing window.
        n = r.metrics["iterations"]
        assert n >= 7
        assert len(r.samples["time_ms"]) == n
        assert len(r.samples["baseline:sdpa_cpu:time_ms"]) == n
        assert r.metrics["p50_ms"] > 0 and r.metrics["tflops"] > 0
        assert r.metrics["speedup_vs_sdpa_cpu"] > 0
        assert r.device["before"]["cpu"]["logical_cpus"] >= 1
    geo = geomean_speedups(results)
    assert {(m, b) for m, per in geo.items() for b in per} == {
        (r.case.params["mode"], "sdpa_cpu") for r in results
    }


def test_cpu_rounds_follow_the_shape_not_a_warm_up() -> None:
    """Two runs of one case get the same round structure: the count comes from the shape's FLOPs at
    a stated rate, with a floor (one preempted warm-up once gave a case 5 rounds and its twin 770)."""
    from regress.run.suites.base import SuiteContext
    from regress.run.suites.perf import (
        CPU_MIN_WINDOW_S,
        CPU_NOMINAL_FLOPS,
        MAX_ITERATIONS,
        default_iterations,
        timed_iterations,
    )

    cpu = SuiteContext(library=None, device="cpu", quick=True)  # type: ignore[arg-type]
    gpu = SuiteContext(library=None, device="cuda", quick=True)  # type: ignore[arg-type]
    small, big, tiny = Shape(1, 1, 64, 77), Shape(1, 1, 1024, 1024), Shape(1, 1, 1, 1)
    assert default_iterations(cpu) == 40 and default_iterations(gpu) == 40
    n = timed_iterations(cpu, 30, small)
    assert n * small.flops / CPU_NOMINAL_FLOPS >= CPU_MIN_WINDOW_S[True] and n == timed_iterations(
        cpu, 30, small
    )
    assert timed_iterations(cpu, 30, big) == 30  # long calls keep the asked count
    assert timed_iterations(cpu, 30, tiny) == MAX_ITERATIONS
    assert timed_iterations(gpu, 30, small) == 30  # device events: fixed count


def test_cpu_perf_times_one_thread_and_restores_the_setting(
    cpu_lib: KernelLibrary, make_ctx: MakeCtx
) -> None:
    import os

    import torch

    from regress.run.suites.perf import _one_thread

    ctx = make_ctx(cpu_lib, iterations=2)
    before, env = torch.get_num_threads(), os.environ.get("REGRESS_CPU_THREADS")
    with _one_thread(ctx):
        assert torch.get_num_threads() == 1 and os.environ["REGRESS_CPU_THREADS"] == "1"
    assert torch.get_num_threads() == before and os.environ.get("REGRESS_CPU_THREADS") == env


def test_the_round_loop_warms_then_alternates_the_order() -> None:
    """perf and e2e both time through suites.timing.interleaved_rounds: untimed warm-up rounds, then
    every runner once a round with the round's index, the order reversed every other round."""
    from regress.run.suites.timing import interleaved_rounds

    calls: list[tuple[str, int]] = []
    runners = [(key, lambda i, key=key: calls.append((key, i))) for key in ("a", "b")]
    samples = interleaved_rounds("cpu", runners, warm=1, iters=3)
    assert calls == [("a", 0), ("b", 0), ("a", 0), ("b", 0), ("b", 1), ("a", 1), ("a", 2), ("b", 2)]
    assert {k: len(v) for k, v in samples.items()} == {"a": 3, "b": 3}
    assert all(ms >= 0 for v in samples.values() for ms in v)


def test_a_block_seed_orients_each_block_at_random() -> None:
    """With block_seed, every block of two rounds still runs each runner once in each position (ABBA
    or BAAB, so the paired statistic's blocks stay balanced), the orientation drawn per block from the
    seed: reproducible, and not tied to the round's parity."""
    from regress.run.suites.timing import interleaved_rounds, round_orders

    def orders(seed: int) -> list[str]:
        calls: list[str] = []
        runners = [(key, lambda i, key=key: calls.append(key)) for key in ("a", "b")]
        interleaved_rounds("cpu", runners, warm=0, iters=64, block_seed=seed)
        return ["".join(calls[j : j + 4]) for j in range(0, len(calls), 4)]

    blocks = orders(7)
    assert len(blocks) == 32 and set(blocks) == {"abba", "baab"}
    # round_orders is the loop's order, so analyses of raw samples place each call correctly
    listed = round_orders(64, block_seed=7)
    assert ["".join("ab" if o else "ba" for o in listed[j : j + 2]) for j in range(0, 64, 2)] == blocks
    assert round_orders(4) == [True, False, True, False]
    assert blocks == orders(7) and blocks != orders(8)
    assert 8 <= blocks.count("abba") <= 24


def test_an_ab_phase_runs_both_listings_half_the_rounds_each() -> None:
    from regress.run.suites.timing import both_listings_rounds

    calls: list[tuple[str, int]] = []
    arms = [(key, lambda i, key=key: calls.append((key, i))) for key in ("cand", "base")]
    samples, swap_at = both_listings_rounds("cpu", arms, warm=1, iters=10)
    assert swap_at == 4 and {k: len(v) for k, v in samples.items()} == {"cand": 10, "base": 10}
    timed = [k for k, i in calls[2:10]] + [k for k, i in calls[12:]]  # past each listing's warm-up
    assert timed[:8] == ["cand", "base", "base", "cand"] * 2  # candidate listed first
    assert timed[8:12] == ["base", "cand", "cand", "base"]  # then the baseline
    assert len(timed) == 20
    _, none = both_listings_rounds("cpu", arms, warm=0, iters=3)
    assert none == 0  # too few rounds for two listings of a block each


def test_e2e_layer_runs(cpu_lib: KernelLibrary, make_ctx: MakeCtx) -> None:
    results = _run(make_ctx(cpu_lib, iterations=2), "e2e")
    assert not _statuses(results)
    assert {r.case.params["layer"] for r in results} == {"self", "cross", "prefill", "decode"}
    assert all(r.metrics["tokens_per_s"] > 0 and "speedup_vs_sdpa_cpu" in r.metrics for r in results)


def test_kernel_refusal_is_an_error_result_not_a_raise(cpu_lib: KernelLibrary, make_ctx: MakeCtx) -> None:
    ctx = make_ctx(cpu_lib)
    bad = make_spec("ulp", Shape(1, 1, 8, 8, d=64), "bshd", "rtne", input="realistic")
    for name in SUITES:
        r = get_suite(name).run_case(ctx, bad)
        assert r.status == "error" and r.message, name


@pytest.mark.slow  # every quick suite end to end (the single-suite tests above stay in the loop)
def test_quick_set_is_fast(cpu_lib: KernelLibrary, make_ctx: MakeCtx) -> None:
    """The whole quick set on the CPU: well under the 60 s budget."""
    ctx = make_ctx(cpu_lib)
    t0 = time.perf_counter()
    results = [r for name in SUITES for r in run_suite(name, ctx)]
    wall = time.perf_counter() - t0
    # Wall time is reported, never asserted: a timing must not decide a test (docs/perf-notes.md).
    print(f"\nquick suite set on CPU: {len(results)} cases in {wall:.1f} s")
    assert not _statuses(results)


@pytest.mark.slow
def test_full_set_fits_the_nightly_budget(cpu_lib: KernelLibrary, make_ctx: MakeCtx) -> None:
    """The whole full set on the CPU: under the 5-minute budget (about 1.5 min on 2 cores)."""
    ctx = make_ctx(cpu_lib, quick=False)
    t0 = time.perf_counter()
    results = [r for name in SUITES for r in run_suite(name, ctx)]
    wall = time.perf_counter() - t0
    print(f"\nfull suite set on CPU: {len(results)} cases in {wall:.1f} s")
    assert not _statuses(results)


class _RefusingBaseline(Baseline):
    """A baseline with a limit, like cuDNN refusing Sk = 1: it raises on every call."""

    def __init__(self) -> None:
        super().__init__("refuser", "cpu", ("rtne",))

    def _run(self, *args: object) -> torch.Tensor:
        raise RuntimeError("this shape is not supported")


def test_a_refusing_baseline_is_left_out_not_fatal(cpu_lib: KernelLibrary, make_ctx: MakeCtx) -> None:
    ctx = make_ctx(cpu_lib, iterations=3)
    ctx.baselines = [*ctx.baselines, _RefusingBaseline()]
    for suite in ("perf", "e2e"):
        spec = get_suite(suite).cases(ctx)[0]
        r = get_suite(suite).run_case(ctx, spec)
        assert r.status == "pass", r.message
        assert "refuser left out" in r.message
        assert "speedup_vs_sdpa_cpu" in r.metrics and "speedup_vs_refuser" not in r.metrics
