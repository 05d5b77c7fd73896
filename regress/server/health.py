"""GET /healthz: the process answers and the database answers."""

from __future__ import annotations

from typing import Any

from flask import Blueprint, jsonify

from ..store.queries import database_answers
from ..store.repo import database_writes
from .extensions import store_ext

bp = Blueprint("health", __name__)

OPENAPI_PATHS: dict[str, Any] = {
    "/healthz": {
        "get": {
            "summary": "Liveness, and that the database answers and can write",
            "responses": {
                "200": {"description": "Service and database are up"},
                "503": {"description": "The database does not answer or cannot write (`database` says why)"},
            },
        }
    }
}


@bp.get("/healthz")
def healthz() -> Any:
    try:
        with store_ext.store.reader() as session:
            database_answers(session)
        # Uploads need writes: a database that answers but cannot write (full disk, read-only) gave
        # 503 to every upload while /healthz said ok.
        database_writes(store_ext.store)
    except Exception as exc:  # any driver error means "not healthy", and says why
        reason = str(getattr(exc, "orig", None) or exc).strip().splitlines()
        body = jsonify(status="unavailable", database=reason[0] if reason else type(exc).__name__)
        return body, 503, {"Retry-After": "5"}
    return jsonify(status="ok", database="ok")
