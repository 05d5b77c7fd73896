"""GET /healthz: the process answers, the database answers and can take a write."""

from __future__ import annotations

from typing import Any

from flask import Blueprint, jsonify

from regress.store.db import write_problem
from regress.store.queries import database_answers
from regress.store.repo import database_writes

from .extensions import store_ext

bp = Blueprint("health", __name__)

OPENAPI_PATHS: dict[str, Any] = {
    "/healthz": {
        "get": {
            "summary": "Liveness, and that the database answers and can write",
            "responses": {
                "200": {"description": "Service and database are up"},
                "503": {
                    "description": "The database does not answer or cannot write (`database` says why; "
                    "a SQLite filesystem under 1 MiB free and the last write's fault count too); Retry-After"
                },
            },
        }
    }
}


def _unavailable(reason: str) -> Any:
    return jsonify(status="unavailable", database=reason), 503, {"Retry-After": "5"}


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
        return _unavailable(reason[0] if reason else type(exc).__name__)
    # One page rewritten can still fit where a run's rows do not: the free space and the last
    # upload's own fault say so too (issue 24).
    problem = write_problem(store_ext.store.engine)
    if problem is not None:
        return _unavailable(f"cannot write: {problem}")
    return jsonify(status="ok", database="ok")
