"""regress.facts.metrics: the one place a fact about results is computed (issue 12)."""

from __future__ import annotations

import json
import math
import tomllib
from pathlib import Path

import numpy as np
import pytest
from committed import headline_bundle
from hypothesis import given
from hypothesis import strategies as st
from scipy.stats import gmean

from regress.facts.metrics import (
    HEADLINE,
    geomean,
    geomean_by_mode,
    geomean_speedups,
    headline_value,
    load_contract,
    percentile,
    stored_geomean,
    summarise,
    timing_metrics,
)
from regress.facts.results import CaseResult, CaseSpec

ROOT = Path(__file__).resolve().parents[1]
finite = st.floats(min_value=-1e6, max_value=1e6, allow_nan=False)


@given(st.lists(finite, min_size=1, max_size=60), st.floats(min_value=0, max_value=100))
def test_percentile_is_numpys_linear_on_lists_and_arrays(values: list[float], q: float) -> None:
    want = float(np.percentile(values, q))
    assert percentile(values, q) == pytest.approx(want, rel=1e-12, abs=1e-9)
    assert percentile(np.asarray(values), q) == pytest.approx(want, rel=1e-12, abs=1e-9)


def test_percentile_of_nothing_is_nan() -> None:
    assert math.isnan(percentile([], 50)) and math.isnan(percentile(np.zeros(0), 50))


@given(st.lists(st.floats(min_value=1e-3, max_value=1e3), min_size=1, max_size=40))
def test_geomean_is_scipys(values: list[float]) -> None:
    assert geomean(values) == pytest.approx(float(gmean(values)), rel=1e-9)


def test_geomean_skips_what_has_no_log() -> None:
    assert geomean([0.0, -1.0, math.nan, math.inf]) is None
    assert geomean([2.0, 8.0, 0.0]) == pytest.approx(4.0)


def _perf(mode: str, status: str = "pass", **speedups: float) -> CaseResult:
    spec = CaseSpec(suite="perf", name=f"x_{mode}", params={"mode": mode})
    return CaseResult(spec, status, metrics={f"speedup_vs_{b}": x for b, x in speedups.items()})  # type: ignore[arg-type]


def test_geomean_speedups_one_shape_passing_perf_only() -> None:
    results = [
        _perf("rtne", a=2.0, b=1.0),
        _perf("rtne", a=8.0, b=4.0),
        _perf("rtz", a=3.0),
        _perf("rtz", "error", a=100.0),  # an error has no timing of the kernel
        _perf("rtz", "fail", a=100.0),
        CaseResult(CaseSpec("e2e", "layer", {"mode": "rtz"}), "pass", metrics={"speedup_vs_a": 9.0}),
    ]
    assert geomean_speedups(results) == {"rtne": {"a": 4.0, "b": 2.0}, "rtz": {"a": 3.0}}
    assert geomean_by_mode([("rtne", {"speedup_vs_a": 2.0, "p50_ms": 1.0})]) == {"rtne": {"a": 2.0}}


def test_summary_matches_the_committed_real_run() -> None:
    """The committed H200 nightly's stored summary is what summarise computes from its results."""
    bundle = json.loads(headline_bundle("h200-nightly-*").read_text())
    results = [
        CaseResult(CaseSpec(r["suite"], r["name"], r["params"]), r["status"], metrics=r["metrics"])
        for r in bundle["results"]
    ]
    computed = summarise(results)
    # The run predates the watchdog: its summary has no timeout counts, which are all zero here.
    assert computed.pop("timeouts") == 0
    for counts in computed["suites"].values():
        assert counts.pop("timeout") == 0
    assert computed == bundle["run"]["summary"]
    assert stored_geomean(bundle["run"]["summary"]) == bundle["run"]["summary"]["geomean_speedup"]


def test_stored_geomean_takes_only_the_one_shape() -> None:
    assert stored_geomean({"geomean_speedup": {"rtne": 1.2}}) == {}  # the old flat demo shape
    assert stored_geomean(None) == {} and stored_geomean({"geomean_speedup": "x"}) == {}


def test_timing_metrics_against_each_baseline() -> None:
    m = timing_metrics(
        {"time_ms": [1.0, 2.0, 3.0], "baseline:flash:time_ms": [4.0, 4.0, 4.0]}, "tflops", lambda ms: 10 / ms
    )
    assert m["p50_ms"] == 2.0 and m["tflops"] == 5.0 and m["stdev_ms"] == pytest.approx(1.0)
    assert m["baseline:flash:p50_ms"] == 4.0 and m["speedup_vs_flash"] == 2.0


def test_headline_per_suite() -> None:
    assert headline_value("perf", {"p50_ms": 1.5}) == 1.5
    assert headline_value("ulp", {"scaled_ulp_max": 1}) == 1.0
    assert headline_value("determinism", {"distinct_hashes": True}) is None  # a bool is not a number
    assert headline_value("nope", {"p50_ms": 1.0}) is None
    assert set(HEADLINE) == {"perf", "e2e", "ulp", "determinism"} and all(h.unit for h in HEADLINE.values())


def test_contract_is_the_packaged_toml() -> None:
    raw = tomllib.loads((ROOT / "regress" / "facts" / "contract.toml").read_text())
    assert load_contract().scaled_ulp_max == raw["scaled_ulp_max"]


def test_a_drill_cost_outside_its_tolerance_is_called_so() -> None:
    """The nightly's drill table once printed "geomean (within tolerance) +58.8 %" for a 30 % request."""
    from regress.facts.metrics import drill_tolerance_word

    drill = {"requested_pct": 30, "tolerance_pct": 6.0}
    assert drill_tolerance_word(drill, 58.8) == "outside tolerance"
    assert drill_tolerance_word(drill, 27.0) == "within tolerance"
    assert drill_tolerance_word(drill, None) == "not measured"
