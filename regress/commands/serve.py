"""`regress serve`: the results service on werkzeug's threaded server.

For production run it under gunicorn (`pip install 'regress[serve]'`):
    gunicorn --preload -w 4 -b 0.0.0.0:8080 'regress.server:create_app()'
--preload migrates the database once, before the workers fork.
"""

from __future__ import annotations

import math

import click

from ..errors import UserError
from . import options


@click.command("serve")
@click.option("--host", default="127.0.0.1", show_default=True, help="Address to listen on.")
@click.option("--port", default=8080, show_default=True, type=click.IntRange(1, 65535))
@options.db
@click.option(
    "--max-bundle-mb",
    type=float,
    default=None,
    help="Refuse bodies over this size with 413 (default: $REGRESS_MAX_BUNDLE_BYTES or 64 MiB).",
)
def serve(host: str, port: int, db_url: str | None, max_bundle_mb: float | None) -> None:
    """Serve the results API (POST/GET /api/v1/runs, /api/v1/series, /healthz) until interrupted."""
    from werkzeug.serving import run_simple

    from ..server.app import create_app, max_bundle_bytes
    from ..store.db import DatabaseError

    if max_bundle_mb is None:
        try:
            limit = max_bundle_bytes()
        except ValueError as exc:
            raise UserError(str(exc)) from exc
    elif math.isfinite(max_bundle_mb) and (limit_bytes := max_bundle_mb * 1024 * 1024) >= 1:
        limit = int(limit_bytes)
    else:  # nan and inf raised from int(); 0 or less served a 413 to every upload
        raise UserError(f"--max-bundle-mb must be a positive number, not {max_bundle_mb}")
    config: dict[str, object] = {"DATABASE_URL": db_url, "MAX_CONTENT_LENGTH": limit}
    try:
        app = create_app(config)
    except DatabaseError as exc:
        raise UserError(str(exc)) from exc
    click.echo(f"regress: serving on http://{host}:{port} (werkzeug threaded; use gunicorn in production)")
    run_simple(host, port, app, threaded=True, use_reloader=False, use_debugger=False)


COMMANDS = [serve]
