"""`regress upload BUNDLE… --url URL` and `regress upload --flush`: send bundles to `regress serve`."""

from __future__ import annotations

import os
from pathlib import Path

import click

from regress.facts.errors import EXIT_FAILED, EXIT_OK, EXIT_UNDECIDED, UserError
from regress.run.upload import (
    ENV_SPOOL,
    ENV_TOKEN,
    UploadReport,
    check_token,
    check_url,
    default_spool_dir,
    flush_spool,
    spool_bundle,
    upload_bundles,
)

from . import options


@click.command("upload")
@click.argument("bundles", nargs=-1, type=click.Path(dir_okay=False, path_type=Path))
@click.option("--url", envvar="REGRESS_URL", metavar="URL", help="Service base URL (or $REGRESS_URL).")
@click.option(
    "--flush", is_flag=True, help="First send every bundle in the spool now (backoff or not); report each."
)
@click.option(
    "--run",
    "run_ids",
    multiple=True,
    metavar="ID",
    help="Re-create the bundle of this stored run (id or prefix, from --db) and send it; repeatable.",
)
@options.db
@click.option(
    "--spool",
    "spool_dir",
    type=click.Path(file_okay=False, path_type=Path),
    help=f"Spool directory (default: ${ENV_SPOOL} or ./.regress/spool).",
)
@click.pass_context
def upload(
    ctx: click.Context,
    bundles: tuple[Path, ...],
    url: str | None,
    flush: bool,
    run_ids: tuple[str, ...],
    db_url: str | None,
    spool_dir: Path | None,
) -> None:
    """Upload run bundles with the token in $REGRESS_TOKEN.

    Each bundle is checked against the bundle schema before it is sent. Bundles wait in the spool
    while the service is unreachable or failing (each with its own backoff; one failing bundle never
    holds the others back); `--flush` sends them later. A bundle the service refuses (4xx) moves to
    <spool>/rejected/ with the reason. `--run ID` re-creates a stored run's bundle from the
    database (a bundle file lost or never written) and sends it the same way. Exit 0 when
    everything is stored, 1 when a bundle was refused, 2 when some are still spooled.
    """
    if not bundles and not flush and not run_ids:
        raise UserError("nothing to do: name bundle files, --run stored runs, or --flush the spool")
    if not url:
        raise UserError("no service URL: pass --url or set REGRESS_URL")
    try:  # before anything is spooled: a bad token or URL is one line, not a traceback
        token = check_token(os.environ.get(ENV_TOKEN, ""))
        check_url(url)
    except ValueError as exc:
        raise UserError(str(exc)) from exc
    spool = spool_dir or default_spool_dir()
    report = UploadReport()
    if flush:
        report.outcomes += flush_spool(url, token, spool, force=True).outcomes
    if run_ids:
        report.outcomes += upload_bundles(
            _spooled_from_store(run_ids, db_url, spool), url, token, spool
        ).outcomes
    if bundles:
        report.outcomes += upload_bundles(bundles, url, token, spool).outcomes
    for line in report.lines():
        click.echo(line)
    click.echo(
        f"{len(report.stored)} stored, {len(report.spooled)} spooled, {len(report.rejected)} rejected",
        err=True,
    )
    ctx.exit(EXIT_UNDECIDED if report.spooled else EXIT_FAILED if report.rejected else EXIT_OK)


def _spooled_from_store(run_ids: tuple[str, ...], db_url: str | None, spool: Path) -> list[Path]:
    """Each run's bundle exported from the store and spooled: what `regress nightly` wrote."""
    from regress.store.queries import find_run
    from regress.store.repo import open_store
    from regress.store.transfer import export_bundle

    store = open_store(db_url, must_exist=True)
    try:
        with store.reader() as session:
            bundles = [export_bundle(session, find_run(session, rid).id) for rid in run_ids]
    finally:
        store.engine.dispose()
    return [spool_bundle(bundle, spool) for bundle in bundles]


COMMANDS = [upload]
