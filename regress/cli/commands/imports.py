"""`regress import BUNDLE…`: load run bundles into the local database, no server needed."""

from __future__ import annotations

from pathlib import Path

import click

from regress.facts.errors import EXIT_OK, EXIT_UNDECIDED

from . import options


@click.command("import")
@click.argument(
    "bundles", nargs=-1, required=True, type=click.Path(exists=True, dir_okay=False, path_type=Path)
)
@options.db
@click.pass_context
def import_cmd(ctx: click.Context, bundles: tuple[Path, ...], db_url: str | None) -> None:
    """Store run bundles, such as benchmarks/headline/*.json, through the service's own validation.

    Idempotent: a bundle already stored with the same content is skipped; one stored with different
    content under the same run id is refused and the stored run is kept. Each bundle is one
    transaction, so a bad one stores nothing and the others still go in. Exit 0 when every bundle is
    stored or already there, 2 when any was refused (each refusal is named).
    """
    from regress.machine.pins import pin_for_digest
    from regress.store.repo import open_store
    from regress.store.transfer import import_files

    store = open_store(db_url)
    try:
        outcomes = import_files(store, bundles, pin_for=pin_for_digest)
    finally:
        store.engine.dispose()
    for outcome in outcomes:
        click.echo(outcome.line(), err=outcome.state == "refused")
    counts = {s: sum(o.state == s for o in outcomes) for s in ("stored", "already stored", "refused")}
    click.echo(", ".join(f"{n} {s}" for s, n in counts.items()))
    ctx.exit(EXIT_UNDECIDED if counts["refused"] else EXIT_OK)


COMMANDS = [import_cmd]
