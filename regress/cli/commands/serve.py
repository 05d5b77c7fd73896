"""`regress serve`: the results service on waitress, the production server (regress/server/wsgi.py).

Deadlines on reading a request, a bound on open connections and on the body are on by default;
docs/reliability.md ("The server") says why waitress and what each limit costs. `--dev-server`
runs werkzeug's threaded development server instead (a debugging aid, never for runners).
"""

from __future__ import annotations

import math

import click

from regress.facts.errors import Interrupted, UserError

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
@click.option("--threads", type=click.IntRange(1, 256), default=None, help="Requests handled at once (8).")
@click.option(
    "--header-timeout",
    type=click.FloatRange(0.1, 3600),
    default=None,
    help="Close a connection whose request line and headers take longer (10 s).",
)
@click.option(
    "--request-timeout",
    type=click.FloatRange(0.1, 86400),
    default=None,
    help="Close a connection whose whole request, body included, takes longer (120 s).",
)
@click.option(
    "--connection-limit",
    type=click.IntRange(1, 100000),
    default=None,
    help="Open connections at once; more wait in the listen backlog (1000).",
)
@click.option(
    "--dev-server", is_flag=True, help="werkzeug's development server (no deadlines; not for runners)."
)
def serve(
    host: str,
    port: int,
    db_url: str | None,
    max_bundle_mb: float | None,
    threads: int | None,
    header_timeout: float | None,
    request_timeout: float | None,
    connection_limit: int | None,
    dev_server: bool,
) -> None:
    """Serve the results API (POST/GET /api/v1/runs, /api/v1/series, /healthz) until interrupted."""
    from regress.server.app import create_app, max_bundle_bytes
    from regress.server.wsgi import Limits, make_server
    from regress.store.db import DatabaseError

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
    if dev_server:
        from werkzeug.serving import run_simple

        click.echo(f"regress: serving on http://{host}:{port} (werkzeug development server)")
        run_simple(host, port, app, threaded=True, use_reloader=False, use_debugger=False)
        return
    given = {
        "threads": threads,
        "header_timeout_s": header_timeout,
        "request_timeout_s": request_timeout,
        "connection_limit": connection_limit,
    }
    limits = Limits(**{k: v for k, v in given.items() if v is not None})  # type: ignore[arg-type]
    try:
        server = make_server(app, host, port, limit, limits)
    except OSError as exc:
        raise UserError(f"cannot listen on {host}:{port}: {exc.strerror or exc}") from exc
    click.echo(
        f"regress: serving on http://{host}:{port} (waitress, {limits.threads} threads, headers within "
        f"{limits.header_timeout_s:g} s, requests within {limits.request_timeout_s:g} s, "
        f"{limits.connection_limit} connections)"
    )
    try:
        signum = server.serve_until_stopped()
    finally:
        server.close()
    raise Interrupted(signum)  # exit 128 + N, one line, as every command stopped by a signal


COMMANDS = [serve]
