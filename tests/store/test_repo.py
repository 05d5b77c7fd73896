"""Store writes: a result and its samples land together or not at all; bundles import idempotently."""

from __future__ import annotations

import pytest
from sqlalchemy import func, select
from sqlalchemy.exc import IntegrityError

from regress.facts.bundle import BundleError
from regress.facts.results import CaseResult, CaseSpec
from regress.store import Result, Run, Sample
from regress.store.repo import Store, add_result, finish_run, get_or_create_stack, start_run
from regress.store.transfer import BundleConflict, export_bundle, import_bundle


def _stack(store: Store) -> int:
    with store.transaction() as s:
        return get_or_create_stack(
            s, digest="ab" * 32, keys={"backend": "cpu"}, schema_version=1, name="t"
        ).id


def _result(name: str = "b1_h1_sq8_sk8_bshd_rtne", samples: list[float] | None = None) -> CaseResult:
    spec = CaseSpec(
        "perf", name, {"b": 1, "h": 1, "sq": 8, "sk": 8, "d": 128, "layout": "bshd", "mode": "rtne"}
    )
    return CaseResult(spec, "pass", {"p50_ms": 1.5}, {"time_ms": samples or [1.0, 1.5, 2.0]})


def test_result_and_samples_are_stored_together(store: Store) -> None:
    run_id = start_run(store, stack_id=_stack(store), build_id=None, backend="cpu", suites=["perf"])
    add_result(store, run_id, _result())
    with store.reader() as s:
        res = s.scalars(select(Result)).one()
        assert res.value == 1.5
        assert [x.values for x in res.samples] == [[1.0, 1.5, 2.0]]


def test_a_failed_result_write_leaves_nothing_behind(store: Store) -> None:
    run_id = start_run(store, stack_id=_stack(store), build_id=None, backend="cpu", suites=["perf"])
    add_result(store, run_id, _result())
    with pytest.raises(IntegrityError):  # the same case twice in one run: uq_results_run_id_case_id
        add_result(store, run_id, _result(samples=[9.0]))
    with store.reader() as s:
        assert s.scalar(select(func.count()).select_from(Result)) == 1
        assert s.scalar(select(func.count()).select_from(Sample)) == 1


def test_results_are_refused_after_the_run_finished(store: Store) -> None:
    run_id = start_run(store, stack_id=_stack(store), build_id=None, backend="cpu", suites=["perf"])
    finish_run(store, run_id, status="complete")
    with pytest.raises(ValueError, match="complete"):
        add_result(store, run_id, _result())


def test_bundle_import_is_idempotent_and_conflicts_are_refused(store: Store) -> None:
    run_id = start_run(store, stack_id=_stack(store), build_id=None, backend="cpu", suites=["perf"])
    add_result(store, run_id, _result())
    finish_run(store, run_id, status="complete")
    with store.reader() as s:
        bundle = export_bundle(s, run_id)
    with store.transaction() as s:
        assert import_bundle(s, bundle, pin=None) == (run_id, False)
    bundle["results"][0]["samples"]["time_ms"] = [5.0]
    with store.transaction() as s, pytest.raises(BundleConflict):
        import_bundle(s, bundle, pin=None)
    with store.reader() as s:
        assert s.scalar(select(func.count()).select_from(Run)) == 1


def test_a_malformed_bundle_names_the_field(store: Store) -> None:
    with store.transaction() as s, pytest.raises(BundleError, match=r"stack\.digest"):
        import_bundle(
            s,
            pin=None,
            bundle={
                "schema": "regress.bundle",
                "schema_version": 1,
                "run": {
                    "id": "abcdef012345",
                    "status": "complete",
                    "backend": "cpu",
                    "started_at": "2026-01-01",
                    "suites": [],
                },
                "stack": {"digest": "xyz", "keys": {}, "schema_version": 1},
                "results": [],
            },
        )
