"""The p5-p95 band of the case pages is what the perf suite stored (metrics p5_ms and p95_ms,
regress.facts.metrics.summarize_times), not a recomputation; a run stored before p5_ms existed (every
committed bundle before issue 43) gets the missing edge from its raw samples, as its pages had."""

from __future__ import annotations

import math

import numpy as np

from regress.facts.metrics import summarize_times
from regress.facts.results import CaseResult, CaseSpec
from regress.present.site.data import load
from regress.store.repo import Store, add_result, finish_run, get_or_create_stack, start_run


def _run(store: Store, metrics: dict[str, float], times: list[float]) -> None:
    with store.transaction() as session:
        stack_id = get_or_create_stack(session, digest="d" * 64, keys={}, schema_version=1, name="s").id
    rid = start_run(store, stack_id=stack_id, build_id=None, backend="cpu", suites=["perf"], source_hash="s")
    spec = CaseSpec("perf", "b1_h1_sq64_sk64_bhsd_rtne", {"b": 1, "mode": "rtne"})
    add_result(store, rid, CaseResult(case=spec, status="pass", metrics=metrics, samples={"time_ms": times}))
    finish_run(store, rid, status="complete")


def test_the_band_is_the_stored_p5_and_p95(store: Store) -> None:
    times = [1.0 + 0.01 * i for i in range(100)]
    stored = summarize_times(times)
    assert stored["p5_ms"] < stored["p50_ms"] < stored["p95_ms"]
    _run(store, {**stored, "p5_ms": 0.5, "p95_ms": 3.0}, times)  # edges no recomputation would give
    table = load(store.engine, None).table
    assert (table["lo"][0], table["hi"][0]) == (0.5, 3.0)


def test_a_run_stored_without_p5_gets_it_from_its_samples(store: Store) -> None:
    times = list(np.linspace(1.0, 2.0, 101))
    old = {k: v for k, v in summarize_times(times).items() if k != "p5_ms"}
    _run(store, old, times)
    table = load(store.engine, None).table
    assert math.isclose(table["lo"][0], 1.05) and table["hi"][0] == old["p95_ms"]
