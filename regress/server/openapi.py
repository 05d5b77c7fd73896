"""GET /api/v1/openapi.json: the description, joined from the fragments beside each view."""

from __future__ import annotations

from typing import Any

from flask import Blueprint, jsonify

from .. import __version__
from . import health, runs, series
from .errors import ERROR_SCHEMA

bp = Blueprint("openapi", __name__)


def openapi_document() -> dict[str, Any]:
    paths: dict[str, Any] = {}
    for module in (health, runs, series):
        paths.update(module.OPENAPI_PATHS)
    paths["/api/v1/openapi.json"] = {
        "get": {"summary": "This description", "responses": {"200": {"description": "OpenAPI 3.1"}}}
    }
    return {
        "openapi": "3.1.0",
        "info": {"title": "regress results service", "version": __version__},
        "paths": paths,
        "components": {
            "schemas": {"Error": ERROR_SCHEMA, **runs.OPENAPI_SCHEMAS},
            "securitySchemes": {
                "runnerToken": {
                    "type": "http",
                    "scheme": "bearer",
                    "description": "per-runner token from `regress token create RUNNER`",
                }
            },
        },
    }


@bp.get("/api/v1/openapi.json")
def get_openapi() -> Any:
    return jsonify(openapi_document())
