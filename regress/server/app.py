"""The app factory and the JSON error contract shared by every blueprint."""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from flask import Flask, jsonify
from werkzeug.exceptions import HTTPException

from . import health, openapi, runs, series
from .errors import ApiError
from .extensions import store_ext

# A nightly bundle with every raw timing is a few MiB; 64 MiB leaves room and still bounds memory.
DEFAULT_MAX_BUNDLE_BYTES = 64 * 1024 * 1024
ENV_MAX_BYTES = "REGRESS_MAX_BUNDLE_BYTES"


def create_app(config: Mapping[str, Any] | None = None) -> Flask:
    """Builds the service. `config` overrides: DATABASE_URL (default $REGRESS_DATABASE_URL),
    MAX_CONTENT_LENGTH (bytes; default $REGRESS_MAX_BUNDLE_BYTES or 64 MiB), AUTO_UPGRADE (True)."""
    app = Flask(__name__)
    app.config.update(
        DATABASE_URL=None,
        MAX_CONTENT_LENGTH=int(os.environ.get(ENV_MAX_BYTES, DEFAULT_MAX_BUNDLE_BYTES)),
        AUTO_UPGRADE=True,
        JSON_SORT_KEYS=False,
    )
    if config:
        app.config.update(config)
    store_ext.init_app(app)
    app.register_blueprint(health.bp)
    app.register_blueprint(runs.bp)
    app.register_blueprint(series.bp)
    app.register_blueprint(openapi.bp)

    @app.errorhandler(ApiError)
    def _api_error(err: ApiError) -> Any:
        return jsonify(error=err.message, status=err.status), err.status, err.headers

    @app.errorhandler(HTTPException)
    def _http_error(err: HTTPException) -> Any:
        code = err.code or 500
        message = err.description or err.name
        if code == 413:
            message = f"bundle is larger than the limit of {app.config['MAX_CONTENT_LENGTH']} bytes"
        return jsonify(error=message, status=code), code

    return app
