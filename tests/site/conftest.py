"""Fixtures for the site tests: one small demo history (SQLite) rendered once per module, plus a
case and a run whose names carry <script> (they must come out as text)."""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path

import pytest
from filelock import FileLock

from regress.facts.metrics import timing_metrics
from regress.facts.results import CaseResult, CaseSpec
from regress.present.demo import demo_history
from regress.present.site import SiteReport, build_site
from regress.store import Case, Regression, Run, Stack
from regress.store.repo import Store, add_result, finish_run, open_store, start_run

EVIL = "<script>window.__pwned=1</script>"
EVIL_CASE = f"evil_{EVIL}_case"
EVIL_BRANCH = f"feature/{EVIL}"
NIGHTS = 20
CASES = 40  # of the catalogue's cases per suite (fewer script no determinism regression)
START = (datetime.now() - timedelta(days=NIGHTS + 1)).replace(hour=0, minute=0, second=0, microsecond=0)


def add_evil(store: Store) -> tuple[str, str]:
    """A run on an existing stack with a <script> branch, a <script> case and an open regression."""
    with store.reader() as s:
        stack = s.query(Stack).order_by(Stack.id).first()
        assert stack is not None
        stack_id = stack.id
    rid = start_run(
        store,
        stack_id=stack_id,
        build_id=None,
        backend="hip",
        suites=["perf"],
        trigger="manual",
        kernel_commit="deadbeef" * 5,
        ci={"branch": EVIL_BRANCH, "workflow": "pr"},
    )
    spec = CaseSpec(
        suite="perf",
        name=EVIL_CASE,
        params={"b": 1, "h": 2, "sq": 3, "sk": 4, "d": 128, "layout": "bshd", "mode": "rtne"},
    )
    add_result(
        store,
        rid,
        CaseResult(
            case=spec,
            status="fail",
            metrics=timing_metrics({"time_ms": [1.4, 1.5, 1.6, 1.7]}, "tflops", lambda ms: 1e-9 / ms),
            samples={"time_ms": [1.4, 1.5, 1.6, 1.7]},
            message=EVIL,
        ),
    )
    finish_run(store, rid, status="complete", summary={}, exit_code=1, message=EVIL)
    with store.transaction() as s:
        run = s.get(Run, rid)
        assert run is not None
        case = s.query(Case).filter_by(key=spec.key).one()
        s.add(
            Regression(
                case_id=case.id,
                stack_id=stack_id,
                kind="perf",
                metric="time_ms",
                state="open",
                first_run_id=rid,
                last_run_id=rid,
                magnitude=0.2,
                details={"title": EVIL},
                note=EVIL,
            )
        )
    return rid, spec.key


@dataclass
class Site:
    store: Store
    out: Path
    report: SiteReport
    evil_run: str
    evil_case_key: str


@pytest.fixture(scope="session")
def demo_db(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The demo history, written once per session (every night is judged by the analysis, ~13 s);
    each user takes its own copy of the file."""
    # Under pytest-xdist the workers of one run share it (their temp folders' common parent is the
    # run's own): the first writes it under a lock, the others wait and read.
    shared = os.environ.get("PYTEST_XDIST_WORKER") is not None
    folder = tmp_path_factory.getbasetemp().parent if shared else tmp_path_factory.mktemp("demo")
    path = folder / "demo.db"
    with FileLock(f"{path}.lock"):
        if not path.exists():
            part = folder / "demo.db.part"
            part.unlink(missing_ok=True)
            store = open_store(f"sqlite:///{part}")
            demo_history(store, nights=NIGHTS, stacks=3, cases=CASES, seed=3, samples=12, start=START)
            store.engine.dispose()
            part.rename(path)
    return path


def demo_copy(demo_db: Path, tmp: Path) -> Store:
    """A store on a fresh copy of the session's demo history."""
    db = tmp / "site.db"
    shutil.copyfile(demo_db, db)
    return open_store(f"sqlite:///{db}")


def make_site(tmp: Path, demo_db: Path) -> Site:
    store = demo_copy(demo_db, tmp)
    evil_run, evil_key = add_evil(store)
    out = tmp / "site"
    report = build_site(store, out)
    return Site(store, out, report, evil_run, evil_key)


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory, demo_db: Path) -> Iterator[Site]:
    built = make_site(tmp_path_factory.mktemp("site"), demo_db)
    yield built
    built.store.engine.dispose()
