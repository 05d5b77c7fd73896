"""`regress runs list|show` and `regress export`: read what is stored."""

from __future__ import annotations

import csv
import json
import sys
from typing import Any

import click

from regress.facts.errors import UserError
from regress.facts.escape import csv_cell, readable, visible

from . import listing, options


@click.group()
def runs() -> None:
    """Stored runs."""


@runs.command("list")
@options.db
# At least 1: SQLite read -1 as "no limit" and PostgreSQL refused it; at most a 64-bit integer.
@click.option("--limit", type=click.IntRange(1, 2**63 - 1), default=30, show_default=True)
@listing.machine_formats
def list_runs(db_url: str | None, limit: int, as_json: bool, as_tsv: bool) -> None:
    """Newest runs first (a run whose process died shows as incomplete, one a signal stopped as
    cancelled)."""
    from regress.store import queries
    from regress.store.queries import run_summary
    from regress.store.repo import open_store, reap_stale_runs

    store = open_store(db_url, must_exist=True)
    reap_stale_runs(store)
    skipped: list[tuple[str, str]] = []
    with store.reader() as session:
        rows_in = queries.list_runs(session, limit=limit, skipped=skipped)
        data = [run_summary(run, stack) for run, stack in rows_in]
    _warn_skipped("run", skipped)
    if as_json:
        click.echo(json.dumps(data, indent=2))
        return
    columns = ("id", "status", "trigger", "backend", "stack", "commit", "started", "results", "failed")
    rows = [
        (
            r["id"],
            r["status"],
            r["trigger"] + (" (drill)" if r["drill"] else ""),
            r["backend"],
            r["stack_name"] or r["stack"][:12],
            (r["kernel_commit"] or "")[:10],
            r["started_at"][:16].replace("T", " "),  # to the minute: one column less to fold
            str(r["results"] if r["results"] is not None else "—"),
            str(r["failed"] if r["failed"] is not None else "—"),
        )
        for r in data
    ]
    listing.print_rows(columns, rows, as_tsv=as_tsv, no_wrap=("id",), right=("results", "failed"))


@runs.command("show")
@click.argument("run_id")
@options.db
@click.option("--json", "as_json", is_flag=True, help="The full bundle (every result and sample).")
@click.option("--tsv", "as_tsv", is_flag=True, help="The results table, tab-separated (a header row first).")
def show_run(run_id: str, db_url: str | None, as_json: bool, as_tsv: bool) -> None:
    """One run (RUN_ID or a unique prefix of it): its stack, build and every result."""
    from regress.facts.metrics import HEADLINE, headline_value, plan_label
    from regress.store.queries import find_run
    from regress.store.repo import open_store
    from regress.store.transfer import export_bundle

    store = open_store(db_url, must_exist=True)
    skipped: list[tuple[str, str]] = []
    with store.reader() as session:
        key = find_run(session, run_id).id
        bundle = export_bundle(session, key, skipped=skipped)
    _warn_skipped("result", skipped)
    if as_json:
        click.echo(json.dumps(bundle, indent=1, default=str))
        return
    run, stack, build = bundle["run"], bundle["stack"], bundle["build"]
    # The launch plan that ran (perf and e2e record it): a regression from a changed plan reads so.
    plans = [plan_label(res["metrics"]) for res in bundle["results"]]
    with_plan = any(plans)
    rows = []
    for res, plan in zip(bundle["results"], plans, strict=True):
        h, value = HEADLINE.get(res["suite"]), headline_value(res["suite"], res["metrics"])
        shown = f"{h.metric}={value:.4g} {h.unit}" if h and value is not None else ""
        rows.append((res["suite"], res["name"], res["status"], shown, *((plan,) if with_plan else ())))
    columns = ("suite", "case", "status", "headline", *(("plan",) if with_plan else ()))
    if as_tsv:
        listing.print_rows(columns, rows, as_tsv=True)
        return
    # Every stored string is uploaded text: printed with rich markup off and controls escaped, so
    # `[/x]` is shown as it is and ESC never reaches the terminal.
    console = listing.console()
    # A run whose id another runner's run held first is stored under a key of its own (store/run.py).
    named = run["id"] if key == run["id"] else f"{run['id']} (runner {run['runner']}, key {key})"
    head = f"run {named}  {run['status']}  trigger={run['trigger']}  backend={run['backend']}"
    console.print(visible(head), soft_wrap=True)
    if run.get("message"):
        console.print(visible(run["message"]), soft_wrap=True)
    console.print(visible(f"stack {stack['name'] or '(unpinned)'}  digest {stack['digest']}"), soft_wrap=True)
    if build:
        inject = ", ".join(f"{k}={readable(v)}" for k, v in (build["inject"] or {}).items()) or "none"
        console.print(
            visible(
                f"build {build['artifact_hash'][:16]}  source {build['source_hash'][:16]}  "
                f"commit {build['git_commit'] or 'unknown'}  inject {inject}"
            ),
            soft_wrap=True,
        )
    listing.print_rows(columns, rows, out=console, no_wrap=("case",))


@runs.command("delete")
@click.argument("run_id")
@options.db
@click.option("--yes", is_flag=True, help="Do not ask for confirmation.")
def delete_run(run_id: str, db_url: str | None, yes: bool) -> None:
    """Remove one run (RUN_ID, the full id) and everything that refers to it: its results and
    samples, the regression records and gate decisions it took part in. For an admin removing a
    run that should never have been accepted; there is no undo."""
    from regress.store.queries import find_run
    from regress.store.repo import delete_run as delete_stored_run
    from regress.store.repo import open_store

    store = open_store(db_url, must_exist=True)
    with store.reader() as session:
        found = find_run(session, run_id).id
    if found != run_id.strip():
        raise UserError(f"give the full run id to delete ({found!r} matched the prefix {run_id!r})")
    if not yes:
        click.confirm(f"delete run {found} and everything that refers to it?", abort=True, err=True)
    with store.transaction() as session:
        removed = delete_stored_run(session, found)
    click.echo(f"deleted run {found}: " + ", ".join(f"{n} {k}" for k, n in removed.items() if k != "runs"))


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


@click.command("export")
@options.db
@click.option("--format", "fmt", type=click.Choice(["jsonl", "csv"]), default="jsonl", show_default=True)
@click.option("--suite", help="Only this suite.")
@click.option("--output", "-o", type=click.File("w"), default="-", help="File to write (default stdout).")
def export(db_url: str | None, fmt: str, suite: str | None, output: Any) -> None:
    """Every stored result, one line each (raw samples: `regress runs show RUN --json`)."""
    from regress.store import queries
    from regress.store.repo import open_store

    store = open_store(db_url, must_exist=True)
    out = output if output is not None else sys.stdout
    skipped: list[tuple[str, str]] = []
    with store.reader() as session:  # streamed: a year of results need not fit in memory
        rows = queries.export_rows(session, suite=suite, skipped=skipped)
        if fmt == "jsonl":
            for row in rows:
                out.write(json.dumps(row, default=str) + "\n")
        else:
            writer = csv.writer(out)
            writer.writerow(EXPORT_FIELDS)
            for row in rows:  # uploaded text is no spreadsheet formula (`=cmd|...`): csv_cell
                writer.writerow(
                    [
                        csv_cell(json.dumps(row[f], sort_keys=True) if f == "metrics" else row[f])
                        for f in EXPORT_FIELDS
                    ]
                )
    _warn_skipped("result", skipped)


def _warn_skipped(what: str, skipped: list[tuple[str, str]]) -> None:
    """One line on stderr naming the rows no reader can use (regress.store.readable)."""
    if skipped:
        from regress.store.readable import describe_skipped

        click.echo(f"regress: {visible(describe_skipped(what, skipped))}", err=True)


COMMANDS = [runs, export]
