"""The app factory and the JSON error contract shared by every blueprint."""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from flask import Flask, jsonify, request
from sqlalchemy.exc import DisconnectionError, InterfaceError, OperationalError
from sqlalchemy.exc import TimeoutError as PoolTimeout
from werkzeug.exceptions import HTTPException

from regress.store.db import StoreFault

from . import health, openapi, runs, series
from .errors import ApiError
from .extensions import store_ext

# A nightly bundle with every raw timing is a few MiB; 64 MiB leaves room and still bounds memory.
DEFAULT_MAX_BUNDLE_BYTES = 64 * 1024 * 1024
ENV_MAX_BYTES = "REGRESS_MAX_BUNDLE_BYTES"
# Benchmark only (benchmarks/service/ingest.py): store results one row per statement, as before issue #13.
ENV_ROW_BY_ROW = "REGRESS_INGEST_ROW_BY_ROW"
UNREAD_BODY_TIMEOUT_S = 2.0  # werkzeug only: how long a refused upload's unread body may stall
RETRY_AFTER_S = 5  # what a client waits after a 503: a database restart takes a few seconds
# Errors that mean "the database does not answer now" (refused, restarting, locked, pool empty).
UNAVAILABLE = (OperationalError, InterfaceError, DisconnectionError, PoolTimeout)


def max_bundle_bytes() -> int:
    """$REGRESS_MAX_BUNDLE_BYTES, else 64 MiB. ValueError naming the variable unless a positive
    integer: int() raised a bare traceback for "64MB", and 0 answered 413 to every upload."""
    raw = os.environ.get(ENV_MAX_BYTES, "").strip()
    if not raw:
        return DEFAULT_MAX_BUNDLE_BYTES
    if not (raw.isascii() and raw.isdigit()) or int(raw) == 0:
        raise ValueError(f"${ENV_MAX_BYTES} must be a positive number of bytes, not {raw!r}")
    return int(raw)


def create_app(config: Mapping[str, Any] | None = None) -> Flask:
    """Builds the service. `config` overrides: DATABASE_URL (default $REGRESS_DATABASE_URL),
    MAX_CONTENT_LENGTH (bytes; default $REGRESS_MAX_BUNDLE_BYTES or 64 MiB), AUTO_UPGRADE (True)."""
    app = Flask(__name__)
    app.config.update(
        DATABASE_URL=None,
        MAX_CONTENT_LENGTH=None if config and "MAX_CONTENT_LENGTH" in config else max_bundle_bytes(),
        AUTO_UPGRADE=True,
        JSON_SORT_KEYS=False,
        INGEST_ROW_BY_ROW=os.environ.get(ENV_ROW_BY_ROW, "") not in ("", "0"),
    )
    if config:
        app.config.update(config)
    store_ext.init_app(app)
    app.register_blueprint(health.bp)
    app.register_blueprint(runs.bp)
    app.register_blueprint(series.bp)
    app.register_blueprint(openapi.bp)

    @app.before_request
    def _clean_parameters() -> None:
        # PostgreSQL cannot hold NUL in text: a lookup with one raised inside the driver (500).
        for name, value in [*request.args.items(multi=True), *(request.view_args or {}).items()]:
            if isinstance(value, str) and "\x00" in value:
                raise ApiError(400, f"parameter {name!r} contains NUL")

    @app.after_request
    def _bound_unread_bodies(response: Any) -> Any:
        # An upload refused before its body was read (401/403/413): werkzeug's server then drains
        # the rest with a blocking read, so a client that kept sending slowly held a thread for as
        # long as it liked (200 such clients held 201 threads: issue 24). Bound that drain: after
        # UNREAD_BODY_TIMEOUT_S without data the connection is dropped and its thread freed.
        # (gunicorn, the documented deployment, reads requests itself and has no werkzeug socket.)
        has_body = bool(request.content_length) or "chunked" in request.headers.get("Transfer-Encoding", "")
        sock = request.environ.get("werkzeug.socket")
        if has_body and response.status_code >= 400 and sock is not None:
            sock.settimeout(UNREAD_BODY_TIMEOUT_S)
            response.headers["Connection"] = "close"
        return response

    @app.errorhandler(ApiError)
    def _api_error(err: ApiError) -> Any:
        return jsonify(error=err.message, status=err.status), err.status, err.headers

    def _db_unavailable(err: Exception) -> Any:
        # Every endpoint, token lookup included: the client should come back, not give up.
        reason = str(getattr(err, "orig", None) or err).strip().splitlines()
        app.logger.warning("database unavailable: %s", reason[0] if reason else type(err).__name__)
        body = jsonify(error="database unavailable, retry later", status=503)
        return body, 503, {"Retry-After": str(RETRY_AFTER_S)}

    for error_class in UNAVAILABLE:
        app.register_error_handler(error_class, _db_unavailable)

    @app.errorhandler(StoreFault)
    def _store_fault(err: StoreFault) -> Any:
        # A full disk or a damaged file: the client keeps its spool and comes back; the log says why.
        app.logger.error("%s", err)
        body = jsonify(error="database cannot write now (full disk or damaged file), retry later", status=503)
        return body, 503, {"Retry-After": str(RETRY_AFTER_S)}

    @app.errorhandler(HTTPException)
    def _http_error(err: HTTPException) -> Any:
        code = err.code or 500
        message = err.description or err.name
        if code == 413:
            message = f"bundle is larger than the limit of {app.config['MAX_CONTENT_LENGTH']} bytes"
        return jsonify(error=message, status=code), code

    return app
