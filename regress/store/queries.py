"""Reads: every query the CLI, the ingest server, the site, the nightly analysis and the gate need.

Typed selects on the ORM tables, rows read by column name, never by position: a migration that
adds or reorders a column cannot shift a reader by one (issue 12). Each function's name says what
it returns; a caller passes the session (or, for the site, the connection) it reads in, so a read
inside a writer's transaction sees that transaction. Writers live in repo.py (one row at a time,
transactional) and bulk.py (many finished runs at once: the demo history and bundle ingest).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from datetime import datetime
from typing import Any

from sqlalchemy import ColumnElement, Connection, Row, Text, func, select, text
from sqlalchemy.orm import Session

from regress.facts.errors import UserError
from regress.facts.stats import upper_median

from .build import Build
from .case import Case
from .gate import GateDecision
from .readable import result_problem, run_problem
from .regression import Regression
from .result import Result, Sample
from .run import FINISHED_STATES, REAPED_NOTE, Run
from .stack import Stack
from .token import RunnerToken

# --- runs: one list query and one dict per run, for `regress runs list` and GET /api/v1/runs ----


def list_runs(
    session: Session,
    *,
    limit: int,
    stack_digest: str | None = None,
    runner: str | None = None,
    status: str | None = None,
    before: str | None = None,
    skipped: list[tuple[str, str]] | None = None,
) -> list[tuple[Run, Stack]]:
    """Newest first by run id (ids are time-sortable, so `before` pages through them). Unreadable
    runs (regress.store.readable) are left out and, with `skipped`, listed there as (id, why)."""
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
    return [(run, stack) for run, stack in rows if _readable(run.id, run_problem(run), skipped)]


def _readable(key: str, problem: str | None, skipped: list[tuple[str, str]] | None) -> bool:
    if problem is not None and skipped is not None:
        skipped.append((key, problem))
    return problem is None


def count_runs(session: Session) -> int:
    return session.scalar(select(func.count()).select_from(Run)) or 0


def count_results(session: Session) -> int:
    return session.scalar(select(func.count()).select_from(Result)) or 0


def runs_oldest_first(session: Session) -> Sequence[Run]:
    """Every stored run, in the order they started (the benchmarks' reports walk them so)."""
    return session.scalars(select(Run).order_by(Run.started_at, Run.id)).all()


def run_ids(session: Session) -> list[str]:
    """Every stored run id, in the order the runs started."""
    return list(session.scalars(select(Run.id).order_by(Run.started_at, Run.id)))


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
        "given_id": run.given_id,
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
    session: Session,
    *,
    suite: str | None = None,
    since_run: str | None = None,
    skipped: list[tuple[str, str]] | None = None,
) -> Iterator[dict[str, Any]]:
    """One row per stored result, oldest run first, with run, stack and case identity; unreadable
    rows are left out (and listed in `skipped` as ('run/case', why))."""
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
        problem = run_problem(run) or result_problem(res, samples=False)
        if not _readable(f"{run.id}/{case.name}", problem, skipped):
            continue
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
    """run id -> (number of results, largest result id): with the run's status and stored_at, what
    tells the site cache a run changed."""
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
            Run.stored_at,
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


# --- single rows by key -------------------------------------------------------------------------


def run_by_id(session: Session, run_id: str) -> Run | None:
    """The run stored under this key."""
    return session.get(Run, run_id)


def run_of_runner(session: Session, runner: str | None, given_id: str) -> Run | None:
    """The run this runner (None: a run that names none) stored under this run id (store/run.py)."""
    who = Run.runner.is_(None) if runner is None else Run.runner == runner
    return session.scalars(select(Run).where(Run.given_id == given_id, who)).first()


def stack_by_id(session: Session, stack_id: int) -> Stack | None:
    return session.get(Stack, stack_id)


def build_by_id(session: Session, build_id: int | None) -> Build | None:
    return session.get(Build, build_id) if build_id is not None else None


def case_by_key(session: Session, key: str) -> Case | None:
    return session.scalars(select(Case).where(Case.key == key)).first()


def stack_by_digest(session: Session, digest: str) -> Stack | None:
    return session.scalars(select(Stack).where(Stack.digest == digest)).first()


def run_result_count(session: Session, run_id: str) -> int:
    """How many results a run holds."""
    return session.scalar(select(func.count()).select_from(Result).where(Result.run_id == run_id)) or 0


def results_within_bytes(session: Session, run_id: str, offset: int, budget: int) -> int:
    """How many results from `offset` on (stored order, at most 1000) fit in `budget` bytes of
    stored raw samples: the API's page size, so one GET builds a bounded answer (issue 41 item 5).
    Counted as the columns' text length, which a damaged JSON value has too."""
    size = func.coalesce(func.sum(func.length(func.cast(Sample.values, Text))), 0)
    rows = session.execute(
        select(Result.id, size)
        .outerjoin(Sample, Sample.result_id == Result.id)
        .where(Result.run_id == run_id)
        .group_by(Result.id)
        .order_by(Result.id)
        .offset(offset)
        .limit(1000)
    ).all()
    used = count = 0
    for _, nbytes in rows:
        used += int(nbytes)
        if count and used > budget:
            break
        count += 1
    return count


def database_answers(session: Session) -> None:
    """One round trip to the database; raises the driver's error when it does not answer."""
    session.execute(text("SELECT 1"))


# --- one run's results and a series' past: the nightly analysis and the gate ---------------------


def run_results_with_cases(
    session: Session, run_id: str, skipped: list[tuple[str, str]] | None = None
) -> list[tuple[Result, Case]]:
    """Every readable result of the run with its case; unreadable ones are left out (and listed in
    `skipped` as (case name, why)): the gate and the analysis never judge them."""
    rows = session.execute(
        select(Result, Case).join(Case, Case.id == Result.case_id).where(Result.run_id == run_id)
    ).all()
    return [(res, case) for res, case in rows if _readable(case.name, result_problem(res), skipped)]


def passing_results_of_suite(session: Session, suite: str) -> list[tuple[Result, Case]]:
    """Every passing result of the suite's cases in non-drill runs, with its case (a noise profile)."""
    rows = session.execute(
        select(Result, Case)
        .join(Case, Case.id == Result.case_id)
        .join(Run, Run.id == Result.run_id)
        .where(Case.suite == suite, Run.is_drill.is_(False), Result.status == "pass")
    ).all()
    return [(res, case) for res, case in rows]


def run_result_of_case(session: Session, run_id: str, case_id: int) -> Result | None:
    return session.scalars(select(Result).where(Result.run_id == run_id, Result.case_id == case_id)).first()


def _earlier_finished(run: Run) -> tuple[ColumnElement[bool], ...]:
    """Runs a baseline of `run` may come from: same stack, finished, not a drill, not later."""
    return (
        Run.stack_id == run.stack_id,
        Run.id != run.id,
        Run.is_drill.is_(False),
        Run.status.in_(FINISHED_STATES),
        Run.started_at <= run.started_at,
    )


HISTORY_CHUNK = 500  # case ids per IN (...): under SQLite's 999-parameter floor


def series_histories(
    session: Session, run: Run, case_ids: Iterable[int], limit: int
) -> dict[int, list[tuple[Run, Result]]]:
    """The series history of each case: case id -> its results in earlier finished non-drill runs
    of the same stack, newest first, at most `limit`. One query per chunk of cases, not one per
    case (a night's analysis asked three times per case: 20 ms a case on SQLite)."""
    out: dict[int, list[tuple[Run, Result]]] = {}
    ids = sorted(set(case_ids))
    for i in range(0, len(ids), HISTORY_CHUNK):
        chunk = ids[i : i + HISTORY_CHUNK]
        rank = (
            func.row_number()
            .over(partition_by=Result.case_id, order_by=(Run.started_at.desc(), Run.id.desc()))
            .label("rank")
        )
        ranked = (
            select(Result.id.label("result_id"), rank)
            .join(Run, Result.run_id == Run.id)
            .where(Result.case_id.in_(chunk), *_earlier_finished(run))
            .subquery()
        )
        rows = session.execute(
            select(Run, Result)
            .join(Result, Result.run_id == Run.id)
            .join(ranked, ranked.c.result_id == Result.id)
            .where(ranked.c.rank <= limit)
            .order_by(Result.case_id, ranked.c.rank)
        ).all()
        for r, res in rows:
            if run_problem(r) is None and result_problem(res) is None:  # history: skipped quietly
                out.setdefault(res.case_id, []).append((r, res))
    return {cid: out.get(cid, []) for cid in ids}


def previous_built_run(session: Session, run: Run) -> Run | None:
    """The latest earlier finished non-drill run of the same stack that recorded a build."""
    return session.scalars(
        select(Run)
        .where(*_earlier_finished(run), Run.build_id.is_not(None))
        .order_by(Run.started_at.desc(), Run.id.desc())
        .limit(1)
    ).first()


def latest_finished_run_of_stack(session: Session, stack_name: str) -> Run | None:
    """The latest finished, non-drill run of the pinned stack with this name (the gate's `stack:NAME`)."""
    return session.scalars(
        select(Run)
        .join(Stack, Stack.id == Run.stack_id)
        .where(Stack.name == stack_name, Run.status.in_(FINISHED_STATES), Run.is_drill.is_(False))
        .order_by(Run.started_at.desc(), Run.id.desc())
        .limit(1)
    ).first()


# --- regressions ------------------------------------------------------------------------------

ACTIVE_REGRESSION_STATES = ("open", "acknowledged")


def regression_by_id(session: Session, regression_id: int) -> Regression | None:
    return session.get(Regression, regression_id)


def active_regression(
    session: Session, *, case_id: int, stack_id: int, kind: str, metric: str
) -> Regression | None:
    """The open (or acknowledged) regression of one (case, stack, kind, metric), if any."""
    return session.scalars(
        select(Regression).where(
            Regression.case_id == case_id,
            Regression.stack_id == stack_id,
            Regression.kind == kind,
            Regression.metric == metric,
            Regression.state.in_(ACTIVE_REGRESSION_STATES),
        )
    ).first()


def active_regressions_of_stack(session: Session, stack_id: int) -> Sequence[Regression]:
    return session.scalars(
        select(Regression).where(
            Regression.stack_id == stack_id, Regression.state.in_(ACTIVE_REGRESSION_STATES)
        )
    ).all()


def regressions_touched_by_run(session: Session, run_id: str) -> Sequence[Regression]:
    """Regressions first seen or last updated by this run."""
    return session.scalars(
        select(Regression).where((Regression.first_run_id == run_id) | (Regression.last_run_id == run_id))
    ).all()


def regressions_with_case_and_stack(
    session: Session, *, state: str | None, limit: int
) -> list[tuple[Regression, Case, Stack]]:
    """Regressions newest first (by last update), each with its case and stack."""
    query = (
        select(Regression, Case, Stack)
        .join(Case, Case.id == Regression.case_id)
        .join(Stack, Stack.id == Regression.stack_id)
        .order_by(Regression.updated_at.desc(), Regression.id.desc())
        .limit(limit)
    )
    if state:
        query = query.where(Regression.state == state)
    return [(reg, case, stack) for reg, case, stack in session.execute(query).all()]


# --- series: one case on one stack over time (GET /api/v1/series) -------------------------------


def series_points(session: Session, *, case_id: int, stack_id: int, drills: bool) -> list[tuple[Result, Run]]:
    """Every result of the case on the stack with its run, oldest first; drill runs only if asked."""
    query = (
        select(Result, Run)
        .join(Run, Run.id == Result.run_id)
        .where(Result.case_id == case_id, Run.stack_id == stack_id)
        .order_by(Run.started_at, Run.id)
    )
    if not drills:
        query = query.where(Run.is_drill.is_(False))
    return [(res, run) for res, run in session.execute(query) if result_problem(res) is None]


# --- runner tokens ----------------------------------------------------------------------------


def runner_tokens(session: Session) -> Sequence[RunnerToken]:
    """Every token, live and revoked, oldest first."""
    return session.scalars(select(RunnerToken).order_by(RunnerToken.id)).all()


def live_runner_tokens(
    session: Session, *, token_id: int | None = None, runner: str | None = None
) -> Sequence[RunnerToken]:
    """Unrevoked tokens, narrowed to one id or one runner's when given."""
    query = select(RunnerToken).where(RunnerToken.revoked_at.is_(None))
    if token_id is not None:
        query = query.where(RunnerToken.id == token_id)
    if runner is not None:
        query = query.where(RunnerToken.runner == runner)
    return session.scalars(query).all()


def runner_token_by_hash(session: Session, token_hash: str) -> RunnerToken | None:
    return session.scalars(select(RunnerToken).where(RunnerToken.token_hash == token_hash)).first()


def runner_token_by_id(session: Session, token_id: int) -> RunnerToken | None:
    return session.get(RunnerToken, token_id)


def find_run(session: Session, id_or_prefix: str) -> Run:
    """The run with this key, else the one run its runner gave this id, else the one run whose key
    starts with this prefix (every command that takes a run accepts all three). Not found or
    ambiguous: a UserError that says which."""
    sel = id_or_prefix.strip()
    if not sel:
        raise UserError("empty run id")
    exact = session.get(Run, sel)
    if exact is not None:
        return exact
    # A run id another runner's run held first: its run is stored under a qualified key (run.py).
    given = session.scalars(select(Run).where(Run.given_id == sel).limit(6)).all()
    if len(given) == 1:
        return given[0]
    if given:
        shown = ", ".join(f"{m.id} (runner {m.runner})" for m in given[:5])
        raise UserError(f"run id {sel!r} is stored for several runners: give the key of one: {shown}")
    matches = session.scalars(select(Run).where(Run.id.startswith(sel, autoescape=True)).limit(6)).all()
    if len(matches) == 1:
        return matches[0]
    if not matches:
        raise UserError(f"run {sel!r} not found in the database (`regress runs list` shows the stored ones)")
    shown = ", ".join(m.id for m in matches[:5])
    raise UserError(f"run prefix {sel!r} is ambiguous: it matches {shown}{', …' if len(matches) > 5 else ''}")


def reaped_local_runs(session: Session, *, limit: int = 20) -> list[str]:
    """The newest local runs the reaper marked 'incomplete' (their process ended while 'running')."""
    query = (
        select(Run.id)
        .where(Run.status == "incomplete", Run.origin == "local", Run.message.endswith(REAPED_NOTE))
        .order_by(Run.started_at.desc())
        .limit(limit)
    )
    return list(session.scalars(query))


def case_wall_times(session: Session, stack_id: int, *, last_runs: int = 3) -> dict[str, float]:
    """Each case's measured wall time (seconds, the upper median over the stack's last finished
    runs), by case key: what the scheduler deals cases by and the watchdog sets each case's time
    limit from."""
    run_ids = session.scalars(
        select(Run.id)
        .where(Run.stack_id == stack_id, Run.status.in_(FINISHED_STATES), Run.is_drill.is_(False))
        .order_by(Run.started_at.desc())
        .limit(last_runs)
    ).all()
    if not run_ids:
        return {}
    seen: dict[str, list[float]] = {}
    rows = session.execute(
        select(Case.key, Result.metrics)
        .join(Case, Case.id == Result.case_id)
        .where(Result.run_id.in_(run_ids))
    )
    for key, metrics in rows:
        wall = metrics.get("wall_s") if isinstance(metrics, dict) else None
        if isinstance(wall, int | float) and wall > 0:
            seen.setdefault(key, []).append(float(wall))
    return {key: upper_median(v) for key, v in seen.items()}
