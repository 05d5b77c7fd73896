"""Store writes, one at a time: each public writer is one transaction, or one step inside the
caller's transaction where the caller must keep several steps atomic (bulk.py writes many finished
runs at once; queries.py holds the reads)."""

from __future__ import annotations

import json
import os
import socket
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import Engine, select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session, sessionmaker

from ..errors import UserError
from ..metrics import headline_value
from ..pins import load_pin, pin_name_for_digest
from ..results import CaseResult, CaseSpec
from ..stack_keys import HASHED_KEYS, PINNED_KEYS, stack_digest
from .base import new_run_id, utcnow
from .build import Build
from .case import Case
from .db import ensure_schema, make_engine, session_factory
from .gate import GateDecision
from .regression import Regression
from .result import Result, Sample
from .run import FINISHED_STATES, Run
from .stack import Stack
from .token import RunnerToken


class BundleConflict(Exception):
    """A run id that is already stored with different content."""


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


def _get_or_create(session: Session, model: type[Any], lookup: dict[str, Any], **values: Any) -> Any:
    """Select, else insert in a savepoint; a concurrent insert of the same key wins and is re-read."""
    found = session.scalars(select(model).filter_by(**lookup)).first()
    if found is not None:
        return found
    try:
        with session.begin_nested():
            row = model(**lookup, **values)
            session.add(row)
            session.flush()
            return row
    except IntegrityError:
        return session.scalars(select(model).filter_by(**lookup)).one()


def get_or_create_stack(
    session: Session, *, digest: str, keys: dict[str, Any], schema_version: int, name: str | None
) -> Stack:
    stack: Stack = _get_or_create(
        session, Stack, {"digest": digest}, keys=keys, schema_version=schema_version, name=name
    )
    if name and not stack.name:
        stack.name = name
    return stack


def get_or_create_case(session: Session, spec: CaseSpec) -> Case:
    from .bulk import case_values

    values = case_values(spec)
    return _get_or_create(session, Case, {"key": values.pop("key")}, **values)


def stack_facts(bundle: dict[str, Any]) -> tuple[str | None, dict[str, Any]]:
    """The name (from the pins) and the keys the store holds for a validated bundle's stack.

    The digest must be the one of the bundle's keys (BundleError). A pinned stack's keys are its
    pin's: a pinned, unhashed key may differ only on a run that declared its drift, and the stored
    row keeps the pin's value (BundleConflict otherwise)."""
    from ..bundle import BundleError

    st = bundle["stack"]
    computed = stack_digest({k: st["keys"].get(k) for k in HASHED_KEYS}, st["schema_version"])
    if computed != st["digest"]:
        raise BundleError(
            f"bundle.stack.digest: {st['digest']} is not the digest of bundle.stack.keys "
            f"and schema_version, which is {computed}"
        )
    name = pin_name_for_digest(st["digest"])
    keys = st["keys"]
    if name is not None:  # a pinned stack's facts are its pin's, reviewed in the repository
        pin = load_pin(name)
        host = bundle["run"].get("host")
        declared_drift = bool(isinstance(host, dict) and host.get("drift"))
        for key in (*HASHED_KEYS, *PINNED_KEYS):
            if st["keys"].get(key) == pin.expected.get(key):
                continue
            # A pinned but unhashed key (os_kernel, torch...) may drift on a run that said so
            # (`--allow-drift` records the diff in run.host.drift); the stack row keeps the pin's
            # value and the run's host record the live one. Undeclared drift is a conflict.
            if key in HASHED_KEYS or not declared_drift:
                raise BundleConflict(
                    f"bundle.stack.keys.{key}: {str(st['keys'].get(key))[:80]!r} is not the value of "
                    f"stack {name}'s pin ({str(pin.expected.get(key))[:80]!r})"
                    + ("" if key in HASHED_KEYS else "; the run records no drift (bundle.run.host.drift)")
                )
        keys = {**st["keys"], **{k: pin.expected.get(k) for k in (*HASHED_KEYS, *PINNED_KEYS)}}
    return name, keys


def bundle_stack(session: Session, bundle: dict[str, Any]) -> Stack:
    """The stack row of a validated bundle (`stack_facts`); its name comes from the pins, not from
    the uploader. Shared rows are facts, not first come: a stored stack with other keys is a
    conflict (BundleConflict)."""
    from ..bundle import first_difference

    st = bundle["stack"]
    name, keys = stack_facts(bundle)
    stack = get_or_create_stack(
        session, digest=st["digest"], keys=keys, schema_version=st["schema_version"], name=name
    )
    stored = {"keys": stack.keys, "schema_version": stack.schema_version}
    where = first_difference(stored, {"keys": keys, "schema_version": st["schema_version"]}, ("stack",))
    if where:
        raise BundleConflict(f"stack {st['digest'][:12]} is stored with other facts (first at {where})")
    return stack


# What an artifact hash determines. The git commit is provenance, not content: one artifact is
# rebuilt at every commit that leaves the kernel sources alone (the run carries its kernel_commit).
BUILD_FACTS = ("source_hash", "compiler", "compiler_version", "flags", "compile_only", "stats", "inject")


def bundle_build(session: Session, stack: Stack, build: dict[str, Any]) -> Build:
    """The build row of a validated bundle; a stored build of that artifact whose facts differ is a
    conflict (BundleConflict), never silently the first uploader's."""
    from ..bundle import first_difference, normalised

    row = record_build(session, stack, build)
    stored = normalised({k: getattr(row, k) for k in BUILD_FACTS})
    sent = normalised(
        {
            **{k: build.get(k) for k in BUILD_FACTS},
            "compile_only": bool(build.get("compile_only", False)),
            "stats": build.get("stats") or {},
            "inject": build.get("inject") or {},
        }
    )
    where = first_difference(stored, sent, ("build",))
    if where:
        raise BundleConflict(
            f"build {build['artifact_hash'][:12]} is stored with other facts (first at {where})"
        )
    return row


def record_build(session: Session, stack: Stack, build: dict[str, Any]) -> Build:
    """`build` is BuildArtifact-shaped: backend, source_hash, git_commit, compiler, ... as a dict."""
    row: Build = _get_or_create(
        session,
        Build,
        {"stack_id": stack.id, "backend": build["backend"], "artifact_hash": build["artifact_hash"]},
        source_hash=build["source_hash"],
        git_commit=build.get("git_commit"),
        git_dirty=bool(build.get("git_dirty", False)),
        compiler=build["compiler"],
        compiler_version=build["compiler_version"],
        flags=list(build["flags"]),
        compile_only=bool(build.get("compile_only", False)),
        stats=dict(build.get("stats") or {}),
        inject=dict(build.get("inject") or {}),
    )
    return row


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


def _add_result_rows(session: Session, run_id: str, result: CaseResult) -> Result:
    case = get_or_create_case(session, result.case)
    row = Result(
        run_id=run_id,
        case_id=case.id,
        status=result.status,
        value=headline_value(result.case.suite, result.metrics),
        metrics=result.metrics,
        device=result.device,
        message=result.message,
    )
    row.samples = [
        Sample(name=name, values=[float(v) for v in values]) for name, values in result.samples.items()
    ]
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
        return _add_result_rows(session, run_id, result).id


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
    before_commit: Callable[[dict[str, Any]], None] | None = None,
) -> None:
    """Records how the run ended. `before_commit` gets the run's bundle as it will be stored, inside
    the transaction: the nightly writes and spools it there, so no run reads finished without one."""
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
            before_commit(export_bundle(session, run_id))


def reaped_local_runs(store: Store, *, limit: int = 20) -> list[str]:
    """The newest local runs the reaper marked 'incomplete' (their process ended while 'running')."""
    with store.reader() as session:
        query = (
            select(Run.id)
            .where(Run.status == "incomplete", Run.origin == "local", Run.message.endswith(REAPED_NOTE))
            .order_by(Run.started_at.desc())
            .limit(limit)
        )
        return list(session.scalars(query))


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


REAPED_NOTE = "process ended before the run finished"


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


def _iso(value: datetime | None) -> str | None:
    return value.isoformat() if value else None


def find_run(session: Session, id_or_prefix: str) -> Run:
    """The run with this id, or the one run whose id starts with this prefix (every command that
    takes a run accepts both). Not found or ambiguous: a UserError that says which."""
    sel = id_or_prefix.strip()
    if not sel:
        raise UserError("empty run id")
    exact = session.get(Run, sel)
    if exact is not None:
        return exact
    matches = session.scalars(select(Run).where(Run.id.startswith(sel, autoescape=True)).limit(6)).all()
    if len(matches) == 1:
        return matches[0]
    if not matches:
        raise UserError(f"run {sel!r} not found in the database (`regress runs list` shows the stored ones)")
    shown = ", ".join(m.id for m in matches[:5])
    raise UserError(f"run prefix {sel!r} is ambiguous: it matches {shown}{', …' if len(matches) > 5 else ''}")


def export_bundle(
    session: Session, run_id: str, *, offset: int = 0, limit: int | None = None
) -> dict[str, Any]:
    """The run as a schema-versioned bundle (the same document a runner uploads). offset/limit
    take one page of its results, in stored order (the API's paginated read)."""
    # regress.bundle (and jsonschema with it) is imported where a bundle is made or read, not when
    # a command opens the store (issue 11: `regress runs list` pays only for SQLAlchemy).
    from ..bundle import BUNDLE_SCHEMA, BUNDLE_VERSION

    run = session.get(Run, run_id)
    if run is None:
        raise KeyError(f"run {run_id} does not exist")
    stack = session.get(Stack, run.stack_id)
    assert stack is not None
    build = session.get(Build, run.build_id) if run.build_id else None
    query = (
        select(Result, Case)
        .join(Case, Case.id == Result.case_id)
        .where(Result.run_id == run_id)
        .order_by(Result.id)
    )
    rows = session.execute(query.offset(offset).limit(limit) if limit is not None or offset else query).all()
    results = []
    for res, case in rows:
        cr = CaseResult(
            case=CaseSpec(suite=case.suite, name=case.name, params=case.params, kernel=case.kernel),
            status=res.status,  # type: ignore[arg-type]
            metrics=res.metrics,
            samples={s.name: s.values for s in res.samples},
            message=res.message,
            device=res.device,
        )
        results.append(cr.to_dict())
    return {
        "schema": BUNDLE_SCHEMA,
        "schema_version": BUNDLE_VERSION,
        "run": {
            "id": run.id,
            "status": run.status,
            "trigger": run.trigger,
            "is_drill": run.is_drill,
            "backend": run.backend,
            "kernel_commit": run.kernel_commit,
            "source_hash": run.source_hash,
            "suites": run.suites,
            "runner": run.runner,
            "hostname": run.hostname,
            "host": run.host,
            "ci": run.ci,
            "gpu_state": run.gpu_state,
            "summary": run.summary,
            "message": run.message,
            "exit_code": run.exit_code,
            "started_at": _iso(run.started_at),
            "finished_at": _iso(run.finished_at),
        },
        "stack": {
            "digest": stack.digest,
            "name": stack.name,
            "schema_version": stack.schema_version,
            "keys": stack.keys,
        },
        "build": None
        if build is None
        else {
            "backend": build.backend,
            "source_hash": build.source_hash,
            "git_commit": build.git_commit,
            "git_dirty": build.git_dirty,
            "compiler": build.compiler,
            "compiler_version": build.compiler_version,
            "flags": build.flags,
            "artifact_hash": build.artifact_hash,
            "compile_only": build.compile_only,
            "stats": build.stats,
            "inject": build.inject,
        },
        "results": results,
    }


def _parse_time(value: Any) -> datetime | None:
    from ..bundle import parse_timestamp

    return parse_timestamp(str(value)) if value else None


def import_bundle(
    session: Session,
    bundle: dict[str, Any],
    *,
    runner: str | None = None,
    row_by_row: bool = False,
    validated: bool = False,
) -> tuple[str, bool]:
    """Stores a bundle inside the caller's transaction. Returns (run id, created).

    Idempotent by run id: the same bundle again is a no-op (created=False); a different bundle under
    a stored run id raises BundleConflict. The run goes in through the bulk writer (store/bulk.py:
    COPY on PostgreSQL); row_by_row=True keeps the old one-row-per-statement path for its results,
    for the ingest benchmark's comparison.
    validated=True: the caller has just run validate_bundle on this very dict (the service).
    """
    from .bulk import prepare_results, write_runs

    if not validated:
        from ..bundle import validate_bundle

        validate_bundle(bundle)
    run_doc = bundle["run"]
    existing = session.get(Run, run_doc["id"])
    if existing is not None:
        from ..bundle import BundleError, canonical, first_difference, normalised

        stored, sent = canonical(export_bundle(session, existing.id)), canonical(bundle)
        # The stack as the store holds it: a run that declared drift from its pin is stored under
        # the pin's keys, so its own identical re-send was 409 (the live value is in run.host).
        # A bundle whose stack the store would refuse differs anyway: its first difference is named.
        with suppress(BundleError, BundleConflict):
            sent["stack"]["keys"] = normalised(stack_facts(bundle)[1])
        if stored == sent:
            return existing.id, False
        where = first_difference(stored, sent)
        raise BundleConflict(f"run {existing.id} is already stored with different content (first at {where})")
    results = [CaseResult.from_dict(res) for res in bundle["results"]]
    # The JSON encoding of every result before the first write: SQLite's lock is then held only
    # for the inserts themselves.
    prepared = prepare_results(run_doc["id"], [] if row_by_row else results)
    stack = bundle_stack(session, bundle)
    build_id = bundle_build(session, stack, bundle["build"]).id if bundle.get("build") else None
    row = {
        "id": run_doc["id"],
        "stack_id": stack.id,
        "build_id": build_id,
        "status": run_doc["status"],
        "trigger": run_doc.get("trigger") or "upload",
        "is_drill": bool(run_doc.get("is_drill", False)),
        "backend": run_doc["backend"],
        "kernel_commit": run_doc.get("kernel_commit"),
        "source_hash": run_doc.get("source_hash"),
        "suites": list(run_doc["suites"]),
        "runner": runner or run_doc.get("runner"),
        "hostname": run_doc.get("hostname"),
        "pid": None,
        "host": run_doc.get("host") or {},
        "ci": run_doc.get("ci") or {},
        "gpu_state": run_doc.get("gpu_state") or {},
        "summary": run_doc.get("summary") or {},
        "message": run_doc.get("message") or "",
        "exit_code": run_doc.get("exit_code"),
        "origin": "upload",
        "started_at": _parse_time(run_doc["started_at"]) or utcnow(),
        "finished_at": _parse_time(run_doc.get("finished_at")),
    }
    write_runs(session, [row], prepared)
    for result in results if row_by_row else []:
        _add_result_rows(session, run_doc["id"], result)
    return run_doc["id"], True


def bundle_fingerprint(bundle: dict[str, Any]) -> tuple[Any, ...]:
    """What must match for two bundles to be 'the same run': identity and every result's numbers.

    Numbers compare as floats (a resent 3 is the stored 3.0); call only on a validated bundle.
    """
    from ..bundle import normalised

    run = bundle["run"]
    results = sorted(
        (
            r["suite"],
            r["name"],
            r["status"],
            json.dumps(normalised(r["params"]), sort_keys=True),
            json.dumps(normalised(r["samples"]), sort_keys=True),
            json.dumps(normalised(r["metrics"]), sort_keys=True),
        )
        for r in bundle["results"]
    )
    return (run["id"], run["status"], run["backend"], bundle["stack"]["digest"], tuple(results))


def case_wall_times(session: Session, stack_id: int, *, last_runs: int = 3) -> dict[str, float]:
    """Each case's measured wall time (seconds, median over the stack's last finished runs), by case
    key: what the scheduler deals cases by and the watchdog sets each case's time limit from."""
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
    return {key: sorted(v)[len(v) // 2] for key, v in seen.items()}


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
        removed[name] = int(session.execute(statement.execution_options(synchronize_session=False)).rowcount)
    return removed


def add_runner_token(
    session: Session, runner: str, token_hash: str, stacks: list[str] | None = None
) -> RunnerToken:
    """A new live ingest credential, stored as its hash only; `stacks` limits where it uploads."""
    row = RunnerToken(runner=runner, token_hash=token_hash, stacks=stacks)
    session.add(row)
    session.flush()
    return row
