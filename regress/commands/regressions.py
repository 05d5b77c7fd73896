"""`regress regressions list|ack|resolve`: the lifecycle of detected regressions."""

from __future__ import annotations

import json

import click

from ..escape import visible
from ..results import REGRESSION_STATES
from . import options


@click.group()
def regressions() -> None:
    """Detected regressions: open → acknowledged (known, silent, visible) → resolved."""


@regressions.command("list")
@click.option("--state", type=click.Choice(REGRESSION_STATES), help="Only this state.")
# At least 1: SQLite read -1 as "no limit" and PostgreSQL refused it; at most a 64-bit integer.
@click.option("--limit", type=click.IntRange(1, 2**63 - 1), default=200, show_default=True)
@click.option("--json", "as_json", is_flag=True)
@options.db
def list_cmd(state: str | None, limit: int, as_json: bool, db_url: str | None) -> None:
    """Newest first."""
    from rich.console import Console
    from rich.table import Table
    from rich.text import Text

    from ..analysis import list_regressions
    from ..store.repo import open_store

    rows = list_regressions(open_store(db_url, must_exist=True), state=state, limit=limit)
    if as_json:
        click.echo(json.dumps(rows, indent=2, default=str))
        return
    if not rows:
        click.echo("no regressions" + (f" in state {state}" if state else ""))
        return
    table = Table()
    for col in ("id", "state", "kind", "metric", "case", "stack", "change", "first run", "note"):
        table.add_column(col)
    for r in rows:
        mag = r["magnitude"]
        change = (
            f"{mag * 100:+.1f}%"
            if r["kind"] == "perf" and mag is not None
            else (f"{mag:.3g}" if mag is not None else "")
        )
        cells = (
            str(r["id"]),
            r["state"] + (" (drill)" if r["drill"] else ""),
            r["kind"],
            r["metric"],
            f"{r['suite']}/{r['case']}",
            r["stack"] or r["stack_digest"][:12],
            change,
            r["first_run"],
            r["note"],
        )
        table.add_row(*(Text(visible(c)) for c in cells))  # stored text: never rich markup or ESC
    Console(width=200, markup=False, highlight=False).print(table)


@regressions.command("ack")
@click.argument("regression_id", type=int)
@click.option("--note", required=True, help="Why it is known (an issue link, a decision).")
@options.db
def ack_cmd(regression_id: int, note: str, db_url: str | None) -> None:
    """Acknowledge a regression: it stops alerting but stays visible."""
    from ..analysis import acknowledge
    from ..store.repo import open_store

    acknowledge(open_store(db_url, must_exist=True), regression_id, note)
    click.echo(f"regression {regression_id} acknowledged")


@regressions.command("resolve")
@click.argument("regression_id", type=int)
@click.option("--note", default="", help="Optional: how it was resolved.")
@options.db
def resolve_cmd(regression_id: int, note: str, db_url: str | None) -> None:
    """Resolve a regression by hand (it also resolves itself when its series recovers)."""
    from ..analysis import resolve
    from ..store.repo import open_store

    resolve(open_store(db_url, must_exist=True), regression_id, note)
    click.echo(f"regression {regression_id} resolved")


COMMANDS = [regressions]
