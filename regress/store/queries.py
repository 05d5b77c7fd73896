"""Reads: every query the site, the CLI (`runs list`) and the ingest server's run listing need.

Typed selects on the ORM tables, rows read by column name, never by position: a migration that
adds or reorders a column cannot shift a reader by one (issue 12). Writers live in repo.py (one
row at a time, transactional) and bulk.py (the demo history).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from datetime import datetime
from typing import Any

from sqlalchemy import Connection, Row, func, select
from sqlalchemy.orm import Session

from .build import Build
from .case import Case
from .gate import GateDecision
from .regression import Regression
from .result import Result, Sample
from .run import Run
from .stack import Stack

# --- runs: one list query and one dict per run, for `regress runs list` and GET /api/v1/runs ----


def list_runs(
    session: Session,
    *,
    limit: int,
    stack_digest: str | None = None,
    runner: str | None = None,
    status: str | None = None,
    before: str | None = None,
) -> list[tuple[Run, Stack]]:
    """Newest first by run id (ids are time-sortable, so `before` pages through them)."""
    query = select(Run, Stack).join(Stack, Stack.id == Run.stack_id)
    if stack_digest:
        query = query.where(Stack.digest == stack_digest)
    if runner:
        query = query.where(Run.runner == runner)
    if status:
        query = query.where(Run.status == status)
    if before:
        query = query.where(Run.id < before)
    rows = session.execute(query.order_by(Run.id.desc()).limit(limit)).all()
    return [(run, stack) for run, stack in rows]


def count_runs(session: Session) -> int:
    return session.scalar(select(func.count()).select_from(Run)) or 0


def first_run_start(session: Session) -> datetime | None:
    """When the oldest stored run started (the demo appends nights to a history from there)."""
    return session.scalar(select(func.min(Run.started_at)))


def run_summary(run: Run, stack: Stack) -> dict[str, Any]:
    """One run as the CLI's `runs list --json` and the API's RunSummary show it. A summary stored
    before the bundle schema may be anything: it is shown as odd, never a crash."""
    summary = (
        run.summary if isinstance(run.summary, dict) else {"results": f"odd summary {run.summary!r:.20}"}
    )
    return {
        "id": run.id,
        "status": run.status,
        "runner": run.runner,
        "backend": run.backend,
        "stack": stack.digest,
        "stack_name": stack.name,
        "kernel_commit": run.kernel_commit,
        "trigger": run.trigger,
        "drill": run.is_drill,
        "origin": run.origin,
        "started_at": run.started_at.isoformat(),
        "finished_at": run.finished_at.isoformat() if run.finished_at else None,
        "exit_code": run.exit_code,
        "results": summary.get("results"),
        "failed": summary.get("failed"),
    }


def export_rows(
    session: Session, *, suite: str | None = None, since_run: str | None = None
) -> Iterator[dict[str, Any]]:
    """One row per stored result, oldest run first, with run, stack and case identity."""
    query = (
        select(Result, Run, Case, Stack)
        .join(Run, Run.id == Result.run_id)
        .join(Case, Case.id == Result.case_id)
        .join(Stack, Stack.id == Run.stack_id)
        .order_by(Run.started_at, Run.id, Result.id)
    )
    if suite:
        query = query.where(Case.suite == suite)
    if since_run:
        query = query.where(Run.id >= since_run)
    for res, run, case, stack in session.execute(query).yield_per(500):
        yield {
            "run_id": run.id,
            "run_status": run.status,
            "started_at": run.started_at.isoformat(),
            "stack": stack.name,
            "stack_digest": stack.digest,
            "kernel_commit": run.kernel_commit,
            "kernel": case.kernel,
            "suite": case.suite,
            "case": case.name,
            "b": case.b,
            "h": case.h,
            "sq": case.sq,
            "sk": case.sk,
            "d": case.d,
            "layout": case.layout,
            "mode": case.mode,
            "status": res.status,
            "metrics": res.metrics,
        }


# --- the site's reads -------------------------------------------------------------------------


def stacks(conn: Connection) -> Sequence[Row[Any]]:
    return conn.execute(
        select(
            Stack.id, Stack.digest, Stack.name, Stack.keys, Stack.schema_version, Stack.created_at
        ).order_by(Stack.id)
    ).all()


def result_counts(conn: Connection) -> dict[str, tuple[int, int]]:
    """run id -> (number of results, largest result id): what tells the site cache a run changed."""
    q = select(Result.run_id, func.count().label("n"), func.max(Result.id).label("max_id")).group_by(
        Result.run_id
    )
    return {r.run_id: (int(r.n), int(r.max_id or 0)) for r in conn.execute(q)}


def runs(conn: Connection) -> Sequence[Row[Any]]:
    return conn.execute(
        select(
            Run.id,
            Run.stack_id,
            Run.status,
            Run.trigger,
            Run.is_drill,
            Run.backend,
            Run.kernel_commit,
            Run.started_at,
            Run.finished_at,
            Run.summary,
            Run.gpu_state,
            Run.host,
            Run.ci,
            Run.message,
            Run.exit_code,
            Run.runner,
            Run.build_id,
        ).order_by(Run.started_at, Run.id)
    ).all()


def cases(conn: Connection) -> Sequence[Row[Any]]:
    return conn.execute(
        select(
            Case.id,
            Case.key,
            Case.kernel,
            Case.suite,
            Case.name,
            Case.params,
            Case.b,
            Case.h,
            Case.sq,
            Case.sk,
            Case.layout,
            Case.mode,
        )
    ).all()


def time_samples(conn: Connection, run_ids: Iterable[str] | None) -> Iterable[Row[Any]]:
    """(result_id, values) of every result's kernel timing series ("time_ms")."""
    q = select(Sample.result_id, Sample.values).join(Result, Result.id == Sample.result_id)
    q = q.where(Sample.name == "time_ms")
    if run_ids is not None:
        q = q.where(Result.run_id.in_(list(run_ids)))
    return conn.execute(q)


def results(conn: Connection, run_ids: Iterable[str] | None) -> Iterable[Row[Any]]:
    """Each result with its case's suite (what names its headline metric)."""
    q = select(
        Result.id,
        Result.run_id,
        Result.case_id,
        Case.suite,
        Result.status,
        Result.value,
        Result.metrics,
        Result.message,
    ).join(Case, Case.id == Result.case_id)
    if run_ids is not None:
        q = q.where(Result.run_id.in_(list(run_ids)))
    return conn.execute(q)


def regressions(conn: Connection) -> list[dict[str, Any]]:
    q = select(
        Regression.id,
        Regression.case_id,
        Regression.stack_id,
        Regression.kind,
        Regression.metric,
        Regression.state,
        Regression.first_run_id,
        Regression.baseline_run_id,
        Regression.last_run_id,
        Regression.magnitude,
        Regression.p_value,
        Regression.details,
        Regression.note,
        Regression.created_at,
        Regression.updated_at,
        Regression.resolved_at,
    ).order_by(Regression.id)
    return [{**r._asdict(), "details": r.details or {}} for r in conn.execute(q)]


def gate_decisions(conn: Connection) -> list[dict[str, Any]]:
    q = select(
        GateDecision.id,
        GateDecision.baseline_run_id,
        GateDecision.candidate_run_id,
        GateDecision.verdict,
        GateDecision.exit_code,
        GateDecision.report,
        GateDecision.created_at,
    ).order_by(GateDecision.id)
    return [{**r._asdict(), "report": r.report or {}} for r in conn.execute(q)]


def builds(conn: Connection) -> dict[int, dict[str, Any]]:
    q = select(
        Build.id,
        Build.backend,
        Build.git_commit,
        Build.git_dirty,
        Build.compiler,
        Build.compiler_version,
        Build.flags,
        Build.artifact_hash,
        Build.stats,
    )
    return {r.id: {**r._asdict(), "stats": r.stats or {}, "flags": r.flags or []} for r in conn.execute(q)}
