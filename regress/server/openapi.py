"""GET /api/v1/openapi.json: the description, joined from the fragments beside each view."""

from __future__ import annotations

from typing import Any

from flask import Blueprint, jsonify

from regress import __version__
from regress.facts.bundle import bundle_schema

from . import health, runs, series
from .errors import ERROR_SCHEMA

bp = Blueprint("openapi", __name__)


BUNDLE_PREFIX = "Bundle_"


def _openapi_schema(node: Any) -> Any:
    """A bundle schema node for OpenAPI 3.1: $defs become components; regress's own keywords become
    what a generic tool reads (the service still checks them with regress.facts.bundle)."""
    if isinstance(node, list):
        return [_openapi_schema(v) for v in node]
    if not isinstance(node, dict):
        return node
    out = {k: _openapi_schema(v) for k, v in node.items() if k not in ("$defs", "$schema", "$id")}
    if isinstance(out.get("$ref"), str) and out["$ref"].startswith("#/$defs/"):
        out["$ref"] = "#/components/schemas/" + BUNDLE_PREFIX + out["$ref"].removeprefix("#/$defs/")
    if out.pop("regressNumbers", False):
        out["items"] = {"type": "number", "description": "finite"}
    if "regressJson" in out:
        depth = out.pop("regressJson").get("maxDepth")
        out["description"] = f"free-form JSON: finite numbers, no NUL, nested at most {depth} levels"
    if out.get("format") == "regress-timestamp":
        out["format"] = "date-time"
    return out


def bundle_components() -> dict[str, Any]:
    """The bundle's JSON Schema (regress/facts/schemas/bundle.schema.json) as OpenAPI components."""
    schema = bundle_schema()
    components = {"Bundle": _openapi_schema(schema)}
    for name, node in schema.get("$defs", {}).items():
        components[BUNDLE_PREFIX + name] = _openapi_schema(node)
    return components


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
            "schemas": {"Error": ERROR_SCHEMA, **runs.OPENAPI_SCHEMAS, **bundle_components()},
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
