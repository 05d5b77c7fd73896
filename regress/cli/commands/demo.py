"""`regress demo-history`: fill a database with a realistic synthetic history to explore the site."""

from __future__ import annotations

import click

from regress.facts.errors import UserError

from . import options


@click.command("demo-history")
@click.option("--nights", type=click.IntRange(min=1), default=30, show_default=True, help="Nights.")
@click.option("--stacks", type=click.IntRange(min=1), default=3, show_default=True, help="Stack lanes.")
@click.option(
    "--cases",
    type=click.IntRange(min=12),
    default=60,
    show_default=True,
    help="About this many. Every night is judged by the nightly's analysis: about 9 ms a case a run.",
)
@click.option("--seed", type=int, default=0, show_default=True, help="Same seed, same history.")
@options.db
@click.option("--force", is_flag=True, help="Write even if the database already holds runs.")
def demo_history_cmd(
    nights: int, stacks: int, cases: int, seed: int, db_url: str | None, force: bool
) -> None:
    """Fill a database with synthetic nightly runs: noise, steps, a stack upgrade, and the
    regressions the nightly's analysis finds in them (about a minute at the defaults)."""
    from regress.present.demo import demo_history
    from regress.store import queries
    from regress.store.db import DatabaseError
    from regress.store.repo import open_store

    try:
        store = open_store(db_url)
    except DatabaseError as exc:
        raise UserError(str(exc)) from exc
    with store.reader() as session:
        existing = queries.count_runs(session)
    if existing and not force:
        raise UserError(f"the database already holds {existing} runs; use a fresh --db (or --force)")
    try:
        s = demo_history(store, nights=nights, stacks=stacks, cases=cases, seed=seed, progress=_night_written)
    except ValueError as exc:
        raise UserError(str(exc)) from None
    click.echo(
        f"wrote {s.runs} runs ({s.nights} nights x {s.stacks} stacks), {s.cases} cases, "
        f"{s.results} results, {s.regressions} regressions in {s.seconds:.1f} s"
    )
    click.echo("next: regress site --out site/" + (f" --db {db_url}" if db_url else ""))


def _night_written(done: int, nights: int) -> None:
    """A plain line on stderr per night (a night is 1-4 s at the defaults; piped, a bar says nothing)."""
    click.echo(f"[{done:>{len(str(nights))}}/{nights}] night written and judged", err=True)


COMMANDS = [demo_history_cmd]
