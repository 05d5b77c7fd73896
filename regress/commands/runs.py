"""`regress runs list|show` and `regress export`: read what is stored."""

from __future__ import annotations

import csv
import json
import sys
from collections.abc import Iterator
from typing import Any

import click
from rich.console import Console
from rich.table import Table
from sqlalchemy import select

from ..errors import UserError
from ..store import Case, Result, Run, Stack
from ..store.repo import export_bundle, open_store, reap_stale_runs

_db = click.option(
    "--db", "db_url", envvar="REGRESS_DATABASE_URL", help="Database URL (default ./.regress/regress.db)."
)


def _run_row(run: Run, stack: Stack) -> dict[str, Any]:
    # A summary written before the bundle schema may be anything: show it as odd, never crash.
    summary = run.summary
    if not isinstance(summary, dict):
        summary = {"results": f"odd summary {summary!r:.20}"}
    return {
        "id": run.id,
        "status": run.status,
        "trigger": run.trigger,
        "drill": run.is_drill,
        "backend": run.backend,
        "stack": stack.name,
        "stack_digest": stack.digest,
        "kernel_commit": run.kernel_commit,
        "started_at": run.started_at.isoformat(),
        "finished_at": run.finished_at.isoformat() if run.finished_at else None,
        "exit_code": run.exit_code,
        "results": summary.get("results"),
        "failed": summary.get("failed"),
    }


@click.group()
def runs() -> None:
    """Stored runs."""


@runs.command("list")
@_db
@click.option("--limit", default=30, show_default=True)
@click.option("--json", "as_json", is_flag=True)
def list_runs(db_url: str | None, limit: int, as_json: bool) -> None:
    """Newest runs first (a run whose process died shows as incomplete)."""
    store = open_store(db_url)
    reap_stale_runs(store)
    with store.reader() as session:
        rows = session.execute(
            select(Run, Stack)
            .join(Stack, Stack.id == Run.stack_id)
            .order_by(Run.started_at.desc(), Run.id.desc())
            .limit(limit)
        ).all()
        data = [_run_row(run, stack) for run, stack in rows]
    if as_json:
        click.echo(json.dumps(data, indent=2))
        return
    table = Table()
    for col in ("id", "status", "trigger", "backend", "stack", "commit", "started", "results", "failed"):
        table.add_column(col)
    for r in data:
        table.add_row(
            r["id"],
            r["status"],
            r["trigger"] + (" (drill)" if r["drill"] else ""),
            r["backend"],
            r["stack"] or r["stack_digest"][:12],
            (r["kernel_commit"] or "")[:10],
            r["started_at"][:19],
            str(r["results"] if r["results"] is not None else "—"),
            str(r["failed"] if r["failed"] is not None else "—"),
        )
    Console().print(table)


@runs.command("show")
@click.argument("run_id")
@_db
@click.option("--json", "as_json", is_flag=True, help="The full bundle (every result and sample).")
def show_run(run_id: str, db_url: str | None, as_json: bool) -> None:
    """One run: its stack, build and every result."""
    store = open_store(db_url)
    with store.reader() as session:
        try:
            bundle = export_bundle(session, run_id)
        except KeyError as exc:
            raise UserError(f"no run {run_id!r} in the database") from exc
    if as_json:
        click.echo(json.dumps(bundle, indent=1, default=str))
        return
    run, stack, build = bundle["run"], bundle["stack"], bundle["build"]
    console = Console()
    console.print(f"run {run['id']}  {run['status']}  trigger={run['trigger']}  backend={run['backend']}")
    console.print(f"stack {stack['name'] or '(unpinned)'}  digest {stack['digest']}")
    if build:
        console.print(
            f"build {build['artifact_hash'][:16]}  source {build['source_hash'][:16]}  "
            f"commit {build['git_commit']}  inject {build['inject'] or 'none'}"
        )
    table = Table()
    for col in ("suite", "case", "status", "headline"):
        table.add_column(col)
    for res in bundle["results"]:
        m = res["metrics"] if isinstance(res["metrics"], dict) else {}
        headline = next(
            (
                f"{k}={m[k]:.4g}" if isinstance(m[k], int | float) else f"{k}={m[k]!r:.20}"
                for k in ("p50_ms", "scaled_ulp_max", "distinct_hashes")
                if k in m
            ),
            "",
        )
        table.add_row(res["suite"], res["name"], res["status"], headline)
    console.print(table)


EXPORT_FIELDS = (
    "run_id",
    "run_status",
    "started_at",
    "stack",
    "stack_digest",
    "kernel_commit",
    "kernel",
    "suite",
    "case",
    "b",
    "h",
    "sq",
    "sk",
    "d",
    "layout",
    "mode",
    "status",
    "metrics",
)


def export_rows(
    store: Any, *, suite: str | None = None, since_run: str | None = None
) -> Iterator[dict[str, Any]]:
    """One row per stored result, oldest run first, with run, stack and case identity."""
    with store.reader() as session:
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


@click.command("export")
@_db
@click.option("--format", "fmt", type=click.Choice(["jsonl", "csv"]), default="jsonl", show_default=True)
@click.option("--suite", help="Only this suite.")
@click.option("--output", "-o", type=click.File("w"), default="-", help="File to write (default stdout).")
def export(db_url: str | None, fmt: str, suite: str | None, output: Any) -> None:
    """Every stored result, one line each (raw samples: `regress runs show RUN --json`)."""
    store = open_store(db_url)
    rows = export_rows(store, suite=suite)
    if fmt == "jsonl":
        for row in rows:
            output.write(json.dumps(row, default=str) + "\n")
        return
    writer = csv.writer(output if output is not None else sys.stdout)
    writer.writerow(EXPORT_FIELDS)
    for row in rows:
        writer.writerow(
            [json.dumps(row[f], sort_keys=True) if f == "metrics" else row[f] for f in EXPORT_FIELDS]
        )


COMMANDS = [runs, export]
