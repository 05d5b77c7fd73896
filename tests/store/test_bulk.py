"""The one bulk writer (store/bulk.py): many finished runs, each read back exactly as the
one-at-a-time writer (a nightly's add_result) would have stored it, on SQLite and PostgreSQL."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from regress.facts.results import CaseResult, CaseSpec
from regress.present.demo import demo_history
from regress.store import queries
from regress.store.bulk import BulkWriter, ensure_cases
from regress.store.repo import (
    Store,
    add_result,
    finish_run,
    get_or_create_stack,
    start_run,
)
from regress.store.transfer import export_bundle


def _results(night: int) -> list[CaseResult]:
    out = []
    for i, mode in enumerate(("rtne", "rtz", "rtne")):
        sq = 8 * (i + 1)
        params = {"b": 1, "h": 1, "sq": sq, "sk": sq, "d": 128, "layout": "bshd", "mode": mode}
        spec = CaseSpec("perf", f"b1_h1_sq{sq}_sk{sq}_bshd_{mode}", params)
        samples = {"time_ms": [1.0 + night, 1.5, 2.0], "baseline:sdpa:time_ms": [3.0, 3.25]}
        out.append(
            CaseResult(spec, "pass", {"p50_ms": 1.5 + night, "wall_s": 0.25}, samples, device={"gpu": 0})
        )
    out.append(
        CaseResult(CaseSpec("ulp", "u1", {"mode": "rtne"}), "fail", {"max_scaled_ulp": 3.0}, message="over")
    )
    return out


def _run_row(run_id: str, stack_id: int, night: int) -> dict[str, Any]:
    when = datetime(2026, 1, 1 + night, tzinfo=UTC)
    return {
        "id": run_id,
        "stack_id": stack_id,
        "build_id": None,
        "status": "complete",
        "trigger": "nightly",
        "is_drill": False,
        "backend": "cpu",
        "kernel_commit": None,
        "source_hash": None,
        "suites": ["perf", "ulp"],
        "runner": "r",
        "hostname": "h",
        "pid": None,
        "host": {},
        "ci": {},
        "gpu_state": {},
        "summary": {"results": 4},
        "message": "",
        "exit_code": 0,
        "origin": "local",
        "started_at": when,
        "finished_at": when,
    }


def test_bulk_written_runs_read_back_as_a_nightlys(store: Store) -> None:
    with store.transaction() as s:
        stack_id = get_or_create_stack(
            s, digest="cd" * 32, keys={"backend": "cpu"}, schema_version=1, name="t"
        ).id
        known = ensure_cases(s, [_results(0)[0].case])  # one case known beforehand, the rest found or made
    nights = range(3)
    bulk_ids = [f"{night:012x}bulk" for night in nights]
    with store.transaction() as s:
        bulk = BulkWriter(s, case_ids=known, flush_every=5)  # batches that split runs' results
        for night, run_id in zip(nights, bulk_ids, strict=True):
            bulk.run(_run_row(run_id, stack_id, night), _results(night))
        bulk.flush()
        assert bulk.written == 12
    for night, bulk_id in zip(nights, bulk_ids, strict=True):
        one_id = start_run(store, stack_id=stack_id, build_id=None, backend="cpu", suites=["perf", "ulp"])
        for result in _results(night):
            add_result(store, one_id, result)
        finish_run(store, one_id, status="complete")
        with store.reader() as s:
            by_bulk, one_by_one = export_bundle(s, bulk_id), export_bundle(s, one_id)
            headline = sorted((c.key, r.value) for r, c in queries.run_results_with_cases(s, bulk_id))
            expected = sorted((c.key, r.value) for r, c in queries.run_results_with_cases(s, one_id))
        assert by_bulk["results"] == one_by_one["results"]
        assert headline == expected and any(v is not None for _, v in headline)


def test_demo_history_goes_through_the_bulk_writer_on_either_database(store: Store) -> None:
    summary = demo_history(store, nights=3, stacks=2, cases=12, samples=5)
    with store.reader() as s:
        assert queries.count_runs(s) == summary.runs == 6
        run = queries.list_runs(s, limit=1)[0][0]
        stored = queries.run_results_with_cases(s, run.id)
        assert len(stored) * summary.runs == summary.results
        assert all(res.samples for res, case in stored if case.suite == "perf")
