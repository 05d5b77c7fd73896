"""Series: one case on one stack over time (DESIGN §4: a series is (case, stack digest))."""

from __future__ import annotations

from typing import Any

from flask import Blueprint, jsonify, request

from regress.store import queries

from .errors import ApiError, error_response
from .extensions import store_ext

bp = Blueprint("series", __name__, url_prefix="/api/v1/series")

OPENAPI_PATHS: dict[str, Any] = {
    "/api/v1/series": {
        "get": {
            "summary": "The points of one (case, stack) series, oldest first",
            "parameters": [
                {
                    "name": "case",
                    "in": "query",
                    "required": True,
                    "schema": {"type": "string"},
                    "description": "case key (32 hex)",
                },
                {
                    "name": "stack",
                    "in": "query",
                    "required": True,
                    "schema": {"type": "string"},
                    "description": "stack digest (64 hex)",
                },
                {
                    "name": "drills",
                    "in": "query",
                    "schema": {"type": "boolean", "default": False},
                    "description": "include drill runs (injected regressions)",
                },
            ],
            "responses": {
                "200": {"description": "case, stack and points (run, commit, time, status, value, metrics)"},
                "400": error_response("case or stack missing"),
                "404": error_response("No such case or stack"),
            },
        }
    }
}


@bp.get("")
def get_series() -> Any:
    case_key, digest = request.args.get("case"), request.args.get("stack")
    if not case_key or not digest:
        raise ApiError(400, "both query parameters are required: case=KEY&stack=DIGEST")
    drills = request.args.get("drills", "false").lower() in {"1", "true", "yes"}
    with store_ext.store.reader() as session:
        case = queries.case_by_key(session, case_key)
        stack = queries.stack_by_digest(session, digest)
        if case is None or stack is None:
            raise ApiError(404, f"no {'case ' + case_key if case is None else 'stack ' + digest}")
        points = [
            {
                "run_id": run.id,
                "kernel_commit": run.kernel_commit,
                "started_at": run.started_at.isoformat(),
                "run_status": run.status,
                "status": res.status,
                "value": res.value,
                "metrics": res.metrics,
            }
            for res, run in queries.series_points(session, case_id=case.id, stack_id=stack.id, drills=drills)
        ]
        return jsonify(
            case={
                "key": case.key,
                "kernel": case.kernel,
                "suite": case.suite,
                "name": case.name,
                "params": case.params,
            },
            stack={"digest": stack.digest, "name": stack.name},
            points=points,
        )
