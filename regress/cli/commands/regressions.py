"""`regress regressions list|ack|resolve`: the lifecycle of detected regressions."""

from __future__ import annotations

import json

import click

from regress.facts.results import REGRESSION_STATES

from . import listing, options


@click.group()
def regressions() -> None:
    """Detected regressions: open → acknowledged (known, silent, visible) → resolved."""


@regressions.command("list")
@click.option("--state", type=click.Choice(REGRESSION_STATES), help="Only this state.")
# At least 1: SQLite read -1 as "no limit" and PostgreSQL refused it; at most a 64-bit integer.
@click.option("--limit", type=click.IntRange(1, 2**63 - 1), default=200, show_default=True)
@listing.machine_formats
@options.db
def list_cmd(state: str | None, limit: int, as_json: bool, as_tsv: bool, db_url: str | None) -> None:
    """Newest first; drills (and what they acknowledged) after the real ones."""
    from regress.facts.metrics import describe_change
    from regress.judge.analysis import list_regressions
    from regress.store.repo import open_store

    rows = list_regressions(open_store(db_url, must_exist=True), state=state, limit=limit)
    if as_json:
        click.echo(json.dumps(rows, indent=2, default=str))
        return
    if not rows:
        click.echo("no regressions" + (f" in state {state}" if state else ""))
        return
    columns = ("id", "state", "kind", "metric", "case", "stack", "change", "first run", "note")
    cells = [
        (
            str(r["id"]),
            r["state"] + (" (drill)" if r["drill"] else ""),
            r["kind"],
            r["metric"],
            f"{r['suite']}/{r['case']}",
            r["stack"] or r["stack_digest"][:12],
            describe_change(r["kind"], r["metric"], r["magnitude"]),
            r["first_run"],
            r["note"],
        )
        for r in sorted(rows, key=lambda r: bool(r["drill"]))  # stable: newest first within each
    ]
    listing.print_rows(columns, cells, as_tsv=as_tsv, no_wrap=("id", "change"), right=("change",))


@regressions.command("ack")
@click.argument("regression_id", type=int)
@click.option("--note", required=True, help="Why it is known (an issue link, a decision).")
@options.db
def ack_cmd(regression_id: int, note: str, db_url: str | None) -> None:
    """Acknowledge a regression: it stops alerting but stays visible."""
    from regress.judge.analysis import acknowledge
    from regress.store.repo import open_store

    acknowledge(open_store(db_url, must_exist=True), regression_id, note)
    click.echo(f"regression {regression_id} acknowledged")


@regressions.command("resolve")
@click.argument("regression_id", type=int)
@click.option("--note", default="", help="Optional: how it was resolved.")
@options.db
def resolve_cmd(regression_id: int, note: str, db_url: str | None) -> None:
    """Resolve a regression by hand (it also resolves itself when its series recovers)."""
    from regress.judge.analysis import resolve
    from regress.store.repo import open_store

    resolve(open_store(db_url, must_exist=True), regression_id, note)
    click.echo(f"regression {regression_id} resolved")


COMMANDS = [regressions]
