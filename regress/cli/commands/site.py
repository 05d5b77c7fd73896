"""`regress site`: render the static HTML site from the result database."""

from __future__ import annotations

from pathlib import Path

import click

from regress.facts.errors import UserError

from . import options


@click.command("site")
@click.option(
    "--out",
    "out_dir",
    required=True,
    type=click.Path(file_okay=False, path_type=Path),
    help="Output folder (created; only changed pages are rewritten).",
)
@options.db
@click.option("--full", is_flag=True, help="Ignore the cache and rewrite every page.")
@click.option("--base-url", default=None, help="Absolute URL the site is served at (for the Atom feed).")
@click.option("-v", "--verbose", is_flag=True, help="Print timings per step.")
def site_cmd(out_dir: Path, db_url: str | None, full: bool, base_url: str | None, verbose: bool) -> None:
    """Render the static site (index, case trends, runs, stacks, regressions, gates, Atom feed)."""
    from regress.present.site import build_site
    from regress.store.db import DatabaseError
    from regress.store.repo import open_store

    try:
        store = open_store(db_url, must_exist=True)
    except DatabaseError as exc:
        raise UserError(str(exc)) from exc
    report = build_site(store, out_dir, full=full, base_url=base_url)
    click.echo(
        f"site: {report.pages} pages, {report.rendered} rendered, {report.written} written, "
        f"{report.removed} removed in {report.seconds:.2f} s -> {out_dir / 'index.html'}"
    )
    if verbose:
        click.echo("  " + ", ".join(f"{k} {v:.2f} s" for k, v in report.timings.items()))


COMMANDS = [site_cmd]
