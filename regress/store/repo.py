"""Store writes, one at a time: each public writer is one transaction, or one step inside the
caller's transaction where the caller must keep several steps atomic (bulk.py writes many finished
runs at once; queries.py holds the reads)."""

from __future__ import annotations

import os
import socket
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any, cast

from sqlalchemy import Engine, select
from sqlalchemy.orm import Session, sessionmaker

if TYPE_CHECKING:
    from sqlalchemy import CursorResult

from regress.facts.results import CaseResult, CaseSpec

from .base import new_run_id, utcnow
from .build import Build
from .case import Case
from .db import ensure_schema, make_engine, session_factory
from .gate import GateDecision
from .regression import Regression
from .result import Result, Sample
from .run import REAPED_NOTE, Run
from .stack import Stack
from .token import RunnerToken


@dataclass
class Store:
    engine: Engine
    sessions: sessionmaker[Session]

    @contextmanager
    def transaction(self) -> Iterator[Session]:
        with self.sessions() as session, session.begin():
            yield session

    @contextmanager
    def reader(self) -> Iterator[Session]:
        with self.sessions() as session:
            yield session


def open_store(url: str | None = None, *, upgrade: bool = True, must_exist: bool = False) -> Store:
    """Opens (and, by default, migrates to head) the database at `url` or the default.

    must_exist: for commands that only read; a missing SQLite file or a database without the regress
    schema is refused with one clear line, and nothing is created."""
    engine = make_engine(url, create=not must_exist)
    try:
        ensure_schema(engine, auto_upgrade=upgrade, must_exist=must_exist)
    except Exception:
        engine.dispose()
        raise
    return Store(engine, session_factory(engine))


def get_or_create_stack(
    session: Session, *, digest: str, keys: dict[str, Any], schema_version: int, name: str | None
) -> Stack:
    """The stack row of a digest, created if new. `name`: the caller's (its pin's), or None."""
    return Stack.for_digest(session, digest=digest, keys=keys, schema_version=schema_version, name=name)


def get_or_create_case(session: Session, spec: CaseSpec) -> Case:
    return Case.for_spec(session, spec)


def record_build(session: Session, stack: Stack, build: dict[str, Any]) -> Build:
    """`build` is BuildArtifact-shaped: backend, source_hash, git_commit, compiler, ... as a dict."""
    return Build.for_artifact(session, stack.id, build)


def start_run(
    store: Store,
    *,
    stack_id: int,
    build_id: int | None,
    backend: str,
    suites: Sequence[str],
    trigger: str = "manual",
    is_drill: bool = False,
    kernel_commit: str | None = None,
    source_hash: str | None = None,
    runner: str | None = None,
    host: dict[str, Any] | None = None,
    ci: dict[str, Any] | None = None,
    gpu_state: dict[str, Any] | None = None,
    run_id: str | None = None,
) -> str:
    """Creates the run row, committed at once with status 'running' (so a crash leaves a trace)."""
    rid = run_id or new_run_id()
    with store.transaction() as session:
        session.add(
            Run(
                id=rid,
                stack_id=stack_id,
                build_id=build_id,
                status="running",
                trigger=trigger,
                is_drill=is_drill,
                backend=backend,
                kernel_commit=kernel_commit,
                source_hash=source_hash,
                suites=list(suites),
                runner=runner,
                hostname=socket.gethostname(),
                pid=os.getpid(),
                host=host or {},
                ci=ci or {},
                gpu_state=gpu_state or {},
                summary={},
                message="",
            )
        )
    return rid


def add_result_rows(session: Session, run_id: str, result: CaseResult) -> Result:
    """One result with its samples, inside the caller's transaction."""
    row = Result.of_case_result(run_id, Case.for_spec(session, result.case).id, result)
    session.add(row)
    session.flush()
    return row


def add_result(store: Store, run_id: str, result: CaseResult) -> int:
    """Stores one result with all its samples in one transaction: whole or not at all."""
    with store.transaction() as session:
        run = session.get(Run, run_id)
        if run is None:
            raise KeyError(f"run {run_id} does not exist")
        if run.status != "running":
            raise ValueError(f"run {run_id} is {run.status}; results can only be added while it runs")
        return add_result_rows(session, run_id, result).id


def finish_run(
    store: Store,
    run_id: str,
    *,
    status: str,
    summary: dict[str, Any] | None = None,
    exit_code: int | None = None,
    message: str = "",
    gpu_state: dict[str, Any] | None = None,
    finished_at: datetime | None = None,
    before_commit: Callable[[Session], None] | None = None,
) -> None:
    """Records how the run ended. `before_commit` gets the session, the run flushed as it will be
    stored, inside the transaction: the nightly exports, writes and spools the run's bundle there
    (transfer.export_bundle), so no run reads finished without one."""
    with store.transaction() as session:
        run = session.get(Run, run_id)
        if run is None:
            raise KeyError(f"run {run_id} does not exist")
        run.status = status
        run.summary = summary or {}
        run.exit_code = exit_code
        run.message = message
        run.finished_at = finished_at or utcnow()
        if gpu_state is not None:
            run.gpu_state = {**run.gpu_state, **gpu_state}
        if before_commit is not None:
            session.flush()
            before_commit(session)


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def reap_stale_runs(store: Store) -> list[str]:
    """Marks 'running' runs of this host whose process is gone as 'incomplete'. Returns their ids."""
    host = socket.gethostname()
    reaped: list[str] = []
    with store.transaction() as session:
        # Uploaded runs carry the uploader's hostname and pid: they are never this host's processes.
        running = select(Run).where(Run.status == "running", Run.hostname == host, Run.origin == "local")
        for run in session.scalars(running):
            if run.pid is None or run.pid == os.getpid() or not _pid_alive(run.pid):
                if run.pid == os.getpid():
                    continue
                run.status = "incomplete"
                run.finished_at = utcnow()
                run.message = (run.message + " " + REAPED_NOTE).strip()
                reaped.append(run.id)
    return reaped


def add_regression(session: Session, **values: Any) -> Regression:
    """A new regression record (every column of `regressions` but the id), inside the caller's
    transaction: the nightly analysis opens, updates and resolves its records together."""
    row = Regression(**values)
    session.add(row)
    return row


def record_gate_decision(
    session: Session,
    *,
    baseline_run_id: str,
    candidate_run_id: str,
    verdict: str,
    exit_code: int,
    report: dict[str, Any],
) -> int:
    """Stores one gate verdict with its report; returns the decision's id."""
    row = GateDecision(
        baseline_run_id=baseline_run_id,
        candidate_run_id=candidate_run_id,
        verdict=verdict,
        exit_code=exit_code,
        report=report,
    )
    session.add(row)
    session.flush()
    return row.id


def database_writes(store: Store) -> None:
    """One real write, committed (alembic_version's row rewritten as it is): raises the driver's
    error when the database answers but cannot write (a full disk, a read-only file or server)."""
    from sqlalchemy import text

    from .db import PROBE

    with store.engine.connect() as conn:
        conn.info[PROBE] = True  # a probe's commit is no evidence that a run's rows fit (db.py)
        try:
            conn.execute(text("UPDATE alembic_version SET version_num = version_num"))
            conn.commit()
        finally:
            conn.info.pop(PROBE, None)


def delete_run(session: Session, run_id: str) -> dict[str, int]:
    """Removes a run with everything that refers to it (its results and samples, the regression
    records and gate decisions it took part in), inside the caller's transaction. For an admin
    removing a run that should never have been accepted; returns what was removed, by table."""
    from sqlalchemy import delete, or_

    result_ids = select(Result.id).where(Result.run_id == run_id)
    removed = {}
    for name, statement in (
        ("samples", delete(Sample).where(Sample.result_id.in_(result_ids))),
        ("results", delete(Result).where(Result.run_id == run_id)),
        (
            "regressions",
            delete(Regression).where(
                or_(
                    Regression.first_run_id == run_id,
                    Regression.last_run_id == run_id,
                    Regression.baseline_run_id == run_id,
                )
            ),
        ),
        (
            "gate decisions",
            delete(GateDecision).where(
                or_(GateDecision.baseline_run_id == run_id, GateDecision.candidate_run_id == run_id)
            ),
        ),
        ("runs", delete(Run).where(Run.id == run_id)),
    ):
        # a DELETE's result is a CursorResult (SQLAlchemy's Session.execute types every result as Result)
        done = cast(
            "CursorResult[Any]", session.execute(statement.execution_options(synchronize_session=False))
        )
        removed[name] = int(done.rowcount)
    return removed


def add_runner_token(
    session: Session, runner: str, token_hash: str, stacks: list[str] | None = None
) -> RunnerToken:
    """A new live ingest credential, stored as its hash only; `stacks` limits where it uploads."""
    row = RunnerToken(runner=runner, token_hash=token_hash, stacks=stacks)
    session.add(row)
    session.flush()
    return row
