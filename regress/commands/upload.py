"""`regress upload BUNDLE… --url URL` and `regress upload --flush`: send bundles to `regress serve`."""

from __future__ import annotations

import os
from pathlib import Path

import click

from ..errors import EXIT_FAILED, EXIT_OK, EXIT_UNDECIDED, UserError
from ..upload import ENV_SPOOL, ENV_TOKEN, UploadReport, default_spool_dir, flush_spool, upload_bundles


@click.command("upload")
@click.argument("bundles", nargs=-1, type=click.Path(dir_okay=False, path_type=Path))
@click.option("--url", envvar="REGRESS_URL", metavar="URL", help="Service base URL (or $REGRESS_URL).")
@click.option(
    "--flush", is_flag=True, help="First send every bundle in the spool now (backoff or not); report each."
)
@click.option(
    "--spool",
    "spool_dir",
    type=click.Path(file_okay=False, path_type=Path),
    help=f"Spool directory (default: ${ENV_SPOOL} or ./.regress/spool).",
)
@click.pass_context
def upload(
    ctx: click.Context, bundles: tuple[Path, ...], url: str | None, flush: bool, spool_dir: Path | None
) -> None:
    """Upload run bundles with the token in $REGRESS_TOKEN.

    Each bundle is checked against the bundle schema before it is sent. Bundles wait in the spool
    while the service is unreachable or failing (each with its own backoff; one failing bundle never
    holds the others back); `--flush` sends them later. A bundle the service refuses (4xx) moves to
    <spool>/rejected/ with the reason. Exit 0 when everything is stored, 1 when a bundle was
    refused, 2 when some are still spooled.
    """
    if not bundles and not flush:
        raise UserError("nothing to do: name bundle files, or --flush the spool")
    if not url:
        raise UserError("no service URL: pass --url or set REGRESS_URL")
    token = os.environ.get(ENV_TOKEN, "")
    if not token:
        raise UserError(f"no upload token: set {ENV_TOKEN} (from `regress token create RUNNER`)")
    spool = spool_dir or default_spool_dir()
    report = UploadReport()
    if flush:
        report.outcomes += flush_spool(url, token, spool, force=True).outcomes
    if bundles:
        report.outcomes += upload_bundles(bundles, url, token, spool).outcomes
    for line in report.lines():
        click.echo(line)
    click.echo(
        f"{len(report.stored)} stored, {len(report.spooled)} spooled, {len(report.rejected)} rejected",
        err=True,
    )
    ctx.exit(EXIT_UNDECIDED if report.spooled else EXIT_FAILED if report.rejected else EXIT_OK)


COMMANDS = [upload]
