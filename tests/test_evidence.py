"""One evidence path: the night's analysis and the gate build the same rule inputs for the same pair."""

from __future__ import annotations

import numpy as np

from regress.facts.results import CaseResult, CaseSpec
from regress.judge.analysis import AnalysisConfig, night_evidence
from regress.judge.evidence import PerfPair, perf_evidence
from regress.judge.gate import GateConfig
from regress.store import queries
from regress.store.repo import Store, add_result, finish_run, get_or_create_stack, start_run

CASES = [f"b1_h1_sq{s}_sk{s}_bshd_rtne" for s in (64, 128, 256, 512, 1024, 2048)]


def _result(rng: np.random.Generator, name: str, level: float, control: float) -> CaseResult:
    times = level * (1 + 0.01 * np.abs(rng.standard_normal(40)))
    sdpa = control * (1 + 0.01 * np.abs(rng.standard_normal(40)))
    return CaseResult(
        CaseSpec("perf", name, {"b": 1}),
        "pass",
        {},
        samples={"time_ms": [float(t) for t in times], "baseline:sdpa_cpu:time_ms": [float(t) for t in sdpa]},
    )


def _night(store: Store, rng: np.random.Generator, control: float) -> str:
    with store.transaction() as session:
        stack_id = get_or_create_stack(session, digest="d", keys={}, schema_version=1, name="cpu-a").id
    rid = start_run(store, stack_id=stack_id, build_id=None, backend="cpu", suites=["perf"], source_hash="s")
    for i, name in enumerate(CASES):
        add_result(store, rid, _result(rng, name, 1.0 + i, control * (1.0 + i)))
    finish_run(store, rid, status="complete")
    return rid


def test_the_night_and_the_gate_see_the_same_inputs(store: Store) -> None:
    rng = np.random.default_rng(3)
    # Eight nights, the fourth one loaded (its control 60 % slower on every case): left out by both.
    runs = [_night(store, rng, 1.6 if i == 3 else 1.0) for i in range(8)]
    base_id, cand_id = runs[-2], runs[-1]
    night_cfg, gate_cfg = AnalysisConfig(), GateConfig()
    with store.reader() as session:
        cand = queries.run_by_id(session, cand_id)
        base = queries.run_by_id(session, base_id)
        assert cand is not None and base is not None
        night = night_evidence(night_cfg, session, cand)
        b_rows = {c.key: r for r, c in queries.run_results_with_cases(session, base_id)}
        pairs = [
            PerfPair(c, base, b_rows[c.key], r) for r, c in queries.run_results_with_cases(session, cand_id)
        ]
        gate_ev = perf_evidence(
            session,
            pairs,
            q=gate_cfg.pairwise.location_quantile,
            history_runs=gate_cfg.history_runs,
            with_control=True,
        )
    assert night_cfg.pairwise.location_quantile == gate_cfg.pairwise.location_quantile
    assert sorted(night.inputs, key=lambda c: c.key) == sorted(gate_ev.inputs, key=lambda c: c.key)
    assert night.dropped_nights == gate_ev.dropped_nights == [runs[3]]
    assert all(len(c.history) == 6 for c in night.inputs)  # seven nights before tonight, one dropped
    assert any("noisy night" in r for r in night.reasons)


def test_a_series_history_is_the_stacks_earlier_finished_runs_newest_first(store: Store) -> None:
    """queries.series_histories, the one read of every case's history at once: per case, its results
    in earlier finished non-drill runs of the same stack, newest first, at most `limit`, whatever the
    other cases, stacks, drills and unfinished runs around it."""
    rng = np.random.default_rng(5)
    runs = [_night(store, rng, 1.0) for _ in range(6)]
    with store.transaction() as session:
        other = get_or_create_stack(session, digest="e", keys={}, schema_version=1, name="cpu-b").id
        first = queries.run_by_id(session, runs[0])
        assert first is not None
        same = first.stack_id
    elsewhere = start_run(
        store, stack_id=other, build_id=None, backend="cpu", suites=["perf"], source_hash="s"
    )
    add_result(store, elsewhere, _result(rng, CASES[0], 1.0, 1.0))
    finish_run(store, elsewhere, status="complete")
    drill = start_run(
        store, stack_id=same, build_id=None, backend="cpu", suites=["perf"], source_hash="s", is_drill=True
    )
    add_result(store, drill, _result(rng, CASES[0], 1.0, 1.0))
    finish_run(store, drill, status="complete")
    unfinished = start_run(
        store, stack_id=same, build_id=None, backend="cpu", suites=["perf"], source_hash="s"
    )
    add_result(store, unfinished, _result(rng, CASES[1], 1.0, 1.0))
    last = _night(store, rng, 1.0)
    with store.reader() as session:
        run = queries.run_by_id(session, last)
        assert run is not None
        ids = {c.name: c.id for _, c in queries.run_results_with_cases(session, last)}
        got = queries.series_histories(session, run, [ids[n] for n in CASES], limit=4)
        assert set(got) == set(ids.values())
        for name in CASES:
            hist = got[ids[name]]
            assert [r.id for r, _ in hist] == runs[::-1][:4], name
            assert all(res.case_id == ids[name] and res.run_id == r.id for r, res in hist)
