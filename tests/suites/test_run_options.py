"""The run's options travel in the options (regress.run.runner.CaseOptions → SuiteContext), not in the
environment: the A/B baseline build and the long-shape switch; and a nightly leaves its caller's
options as they were."""

from __future__ import annotations

import dataclasses
import pickle
from pathlib import Path

import pytest

from regress.facts.errors import UserError
from regress.native.build import build_kernel
from regress.run.nightly import NightlyOptions, plan_cases, run_nightly
from regress.run.runner import CaseOptions, make_context
from regress.run.suites import get_suite
from regress.run.suites.perf import GPU_LONG_SHAPES


def test_the_ab_baseline_is_an_option_that_reaches_the_perf_suite() -> None:
    path = build_kernel("cpu").path
    options = CaseOptions(quick=True, iterations=7, ab_baseline=str(path), ab_label="the same build")
    assert pickle.loads(pickle.dumps(options)) == options  # what a worker process is given
    ctx = make_context(path, "cpu", options)
    spec = next(s for s in get_suite("perf").cases(ctx) if s.params["sq"] <= 128)
    ab = get_suite("perf").run_case(ctx, spec)
    assert ab.status == "pass", ab.message
    assert ab.metrics["ab_baseline"] == "the same build" and ab.metrics["ab_rounds"] > 0
    n = len(ab.samples["ab:baseline:time_ms"])
    assert n == len(ab.samples["ab:candidate:time_ms"]) > 0
    # both listings, half the rounds each, the swap on a block boundary (regress.detect.paired reads it)
    assert ab.metrics["ab_swap_at"] % 2 == 0 and 0 < ab.metrics["ab_swap_at"] < n
    plain = get_suite("perf").run_case(
        make_context(path, "cpu", dataclasses.replace(options, ab_baseline=None)), spec
    )
    assert "ab_baseline" not in plain.metrics and "ab:baseline:time_ms" not in plain.samples


def test_long_shapes_are_an_option_of_the_gpu_plan() -> None:
    def shapes(opts: NightlyOptions) -> set[tuple[int, ...]]:
        return {
            (s.params["b"], s.params["h"], s.params["sq"], s.params["sk"])
            for _, s in plan_cases(opts, "cuda", "cuda")
        }

    long = {(s.b, s.h, s.sq, s.sk) for s in GPU_LONG_SHAPES}
    assert not long & shapes(NightlyOptions(backend="cuda", suites=("perf",)))
    assert long <= shapes(NightlyOptions(backend="cuda", suites=("perf",), long_shapes=True))


def test_a_nightly_leaves_its_callers_options_as_they_were(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """hip-emu runs no perf suite, so the default suites are narrowed for the run, in a copy: the
    caller's object keeps the suites it asked for (the upload check refuses the run right after)."""
    monkeypatch.delenv("REGRESS_TOKEN", raising=False)
    opts = NightlyOptions(
        backend="hip-emu", db=f"sqlite:///{tmp_path / 'r.db'}", out=tmp_path, upload="http://x"
    )
    before = dataclasses.replace(opts)
    with pytest.raises(UserError, match="--upload"):
        run_nightly(opts)
    assert opts == before
