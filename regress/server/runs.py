"""Runs: POST a bundle (authenticated upload), list runs, read one run back as its bundle."""

from __future__ import annotations

import gzip
import hashlib
import time
import zlib
from datetime import timedelta
from typing import Any

from flask import Blueprint, current_app, jsonify, request, url_for
from sqlalchemy.exc import IntegrityError, OperationalError
from sqlalchemy.orm import Session

from regress.facts.bundle import BundleError, loads_bundle, validate_bundle
from regress.machine.pins import pin_for_digest
from regress.store import RunnerToken, queries, utcnow
from regress.store.queries import list_runs as list_runs_query
from regress.store.queries import run_summary
from regress.store.transfer import (
    BundleConflict,
    StackPin,
    UnreadableRun,
    ensure_dimensions,
    export_bundle,
    import_bundle,
)

from .errors import ApiError, error_response
from .extensions import store_ext
from .tokens import lookup_token, may_upload_onto

bp = Blueprint("runs", __name__, url_prefix="/api/v1/runs")

# Writes that lose a race (SQLite busy, PostgreSQL deadlock) are retried this often, then 503.
WRITE_ATTEMPTS = 4
LAST_USED_RESOLUTION = timedelta(minutes=1)  # fewer writes to the token row under load
# Results per page of GET /api/v1/runs/<id>: a 100,000-result run read whole was 28.9 MB built
# in memory per request (six at once slowed small uploads from 0.02 s to 7.1 s).
RESULTS_PAGE = 1000
# ...and at most this many bytes of stored raw samples per page (at least one result): a page of
# 1000 results of 10,000 samples each was built whole in memory (one GET of a 28.6 MiB run took
# 0.77 GB; issue 41 item 5). A real nightly's 381 results are 2 MiB.
SAMPLES_PAGE_BYTES = 8 * 1024 * 1024
GZIP_MEMBERS = 64  # a runner's client sends one; many empty members were quadratic work
GZIP_PIECE = 1 << 16  # compressed bytes fed to zlib at a time

_RUN_SUMMARY = {
    "type": "object",
    "properties": {
        "id": {"type": "string", "description": "the run's key: GET /api/v1/runs/{id} reads it"},
        "given_id": {
            "type": "string",
            "description": "the id its runner gave the run (its bundle's run.id); the key is the same "
            "unless another runner's run held that key first",
        },
        "status": {"type": "string", "enum": ["running", "complete", "failed", "incomplete", "cancelled"]},
        "runner": {"type": "string", "nullable": True},
        "backend": {"type": "string"},
        "stack": {"type": "string", "description": "stack digest (64 hex)"},
        "stack_name": {"type": "string", "nullable": True},
        "kernel_commit": {"type": "string", "nullable": True},
        "trigger": {"type": "string"},
        "origin": {"type": "string"},
        "drill": {"type": "boolean"},
        "started_at": {"type": "string", "format": "date-time"},
        "finished_at": {"type": "string", "format": "date-time", "nullable": True},
        "exit_code": {"type": "integer", "nullable": True},
        "results": {"type": "integer", "nullable": True},
        "failed": {"type": "integer", "nullable": True},
    },
}

OPENAPI_SCHEMAS: dict[str, Any] = {"RunSummary": _RUN_SUMMARY}

OPENAPI_PATHS: dict[str, Any] = {
    "/api/v1/runs": {
        "post": {
            "summary": "Upload one run bundle (schema regress.facts.bundle v1)",
            "description": (
                "Idempotent by runner and run id: the same bundle again answers 200, a different "
                "bundle under a run id this runner stored 409. The token's runner owns the run; a "
                "bundle naming another runner is refused. Another runner's run under the same id is "
                "another run: it is stored under a key of its own (the answer's `key`, and Location). "
                "The body may be gzip-compressed (Content-Encoding: gzip)."
            ),
            "security": [{"runnerToken": []}],
            "requestBody": {
                "required": True,
                "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Bundle"}}},
            },
            "responses": {
                "201": {"description": "Stored"},
                "200": {"description": "Already stored, identical: nothing written"},
                "400": error_response("Not JSON, or not a valid bundle (the field is named)"),
                "401": error_response("Missing or unknown token"),
                "403": error_response(
                    "Revoked token, a bundle naming another runner, or a stack the token may not use"
                ),
                "409": error_response(
                    "A different bundle is stored under this run id, or the bundle's stack or build "
                    "disagrees with the stored one (the first differing JSON path is named)"
                ),
                "413": error_response("Body over the size limit"),
                "503": error_response("Database busy or down; retry after Retry-After seconds"),
            },
        },
        "get": {
            "summary": "List runs, newest first",
            "parameters": [
                {"name": "stack", "in": "query", "schema": {"type": "string"}, "description": "digest"},
                {"name": "runner", "in": "query", "schema": {"type": "string"}},
                {"name": "status", "in": "query", "schema": {"type": "string"}},
                {"name": "limit", "in": "query", "schema": {"type": "integer", "maximum": 500}},
                {"name": "before", "in": "query", "schema": {"type": "string"}, "description": "run id"},
            ],
            "responses": {
                "200": {
                    "description": "A page of runs; `next` is the `before` of the next page",
                    "content": {
                        "application/json": {
                            "schema": {
                                "type": "object",
                                "properties": {
                                    "runs": {
                                        "type": "array",
                                        "items": {"$ref": "#/components/schemas/RunSummary"},
                                    },
                                    "next": {"type": "string", "nullable": True},
                                },
                            }
                        }
                    },
                },
                "400": error_response("Bad query parameter"),
            },
        },
    },
    "/api/v1/runs/{run_id}": {
        "get": {
            "summary": "One run as its bundle",
            "parameters": [
                {
                    "name": "run_id",
                    "in": "path",
                    "required": True,
                    "schema": {"type": "string"},
                    "description": "the run's key; with `runner`, the id that runner gave it",
                },
                {
                    "name": "runner",
                    "in": "query",
                    "schema": {"type": "string"},
                    "description": "read the run this runner stored under the id in the path",
                },
                {
                    "name": "offset",
                    "in": "query",
                    "schema": {"type": "integer", "minimum": 0, "default": 0},
                    "description": "first result of the page (stored order)",
                },
                {
                    "name": "limit",
                    "in": "query",
                    "schema": {"type": "integer", "minimum": 0, "maximum": 1000, "default": 1000},
                    "description": "results per page (at most 1000); X-Total-Results gives the count and "
                    'a Link header (rel="next") the next page',
                },
                {
                    "name": "samples",
                    "in": "query",
                    "schema": {"type": "boolean", "default": True},
                    "description": "false leaves the raw samples out",
                },
            ],
            "responses": {
                "200": {"description": "The bundle with one page of its results"},
                "400": error_response("Bad offset or limit"),
                "404": error_response("No such run"),
            },
        }
    },
}


def _authenticate() -> RunnerToken:
    header = request.headers.get("Authorization", "")
    scheme, _, token = header.partition(" ")
    challenge = {"WWW-Authenticate": 'Bearer realm="regress"'}
    if scheme.lower() != "bearer" or not token.strip():
        raise ApiError(401, "missing bearer token (Authorization: Bearer <token>)", challenge)
    with store_ext.store.reader() as session:  # a database error here is 503 (app.py), not 500
        row = lookup_token(session, token.strip())
        if row is None:
            raise ApiError(401, "unknown token", challenge)
        if row.revoked_at is not None:
            raise ApiError(403, f"token {row.id} of runner {row.runner!r} is revoked")
        session.expunge(row)
        return row


def _too_large(limit: int, what: str = "") -> ApiError:
    return ApiError(413, f"bundle is larger than the limit of {limit} bytes{what}")


def _read_body(limit: int) -> bytes:
    """The raw body, at most `limit` bytes. With Content-Length werkzeug refuses a larger one; a
    chunked body has none, and werkzeug's capped stream would silently cut it at the limit."""
    if request.content_length is not None:
        return request.get_data(cache=False)  # raises 413 past MAX_CONTENT_LENGTH
    stream = request.environ["wsgi.input"]  # chunked: the server de-chunks and ends the stream
    body = bytearray()
    while chunk := stream.read(min(1 << 20, limit + 1 - len(body))):
        body += chunk
        if len(body) > limit:
            raise _too_large(limit)
    return bytes(body)


def _gunzip(raw: bytes, limit: int) -> bytes:
    """Every gzip member in turn (RFC 1952 allows several), bounded so that a small compressed body
    cannot expand past the limit in memory, nor cost more than linear work: each member is fed in
    GZIP_PIECE slices of a memoryview (taking `unused_data` whole copied the rest of the body once
    per member: 4 MiB of empty members took 44 s, issue 41 item 4), and at most GZIP_MEMBERS of them."""
    out = bytearray()
    view = memoryview(raw)
    pos = members = 0
    try:
        while pos < len(view):
            members += 1
            if members > GZIP_MEMBERS:
                raise ApiError(400, f"body holds more than the limit of {GZIP_MEMBERS} gzip members")
            inflater = zlib.decompressobj(16 + zlib.MAX_WBITS)
            while not inflater.eof:
                if pos >= len(view):
                    raise ApiError(400, "body is not valid gzip: truncated member")
                piece = view[pos : pos + GZIP_PIECE]
                pos += len(piece)
                out += inflater.decompress(piece, limit + 1 - len(out))
                if len(out) > limit or inflater.unconsumed_tail:
                    raise _too_large(limit, " (after gzip)")
            pos -= len(inflater.unused_data)  # at most one piece: the next member's start
    except (zlib.error, gzip.BadGzipFile) as exc:
        raise ApiError(400, f"body is not valid gzip: {exc}") from exc
    return bytes(out)


def _read_json() -> tuple[Any, str]:
    """The body's JSON and the SHA-256 of its (decompressed) bytes, which the answer echoes so the
    client knows the service read the very bundle it sent (regress.run.upload checks it)."""
    limit = int(current_app.config["MAX_CONTENT_LENGTH"])
    raw = _read_body(limit)
    encoding = request.headers.get("Content-Encoding", "identity").lower()
    if encoding == "gzip":
        raw = _gunzip(raw, limit)
    elif encoding != "identity":
        raise ApiError(400, f"unsupported Content-Encoding {encoding!r} (gzip or none)")
    try:
        return loads_bundle(raw), hashlib.sha256(raw).hexdigest()
    except ValueError as exc:  # not UTF-8, not JSON
        raise ApiError(400, f"body is not JSON: {exc}") from exc
    except RecursionError as exc:
        raise ApiError(400, "body is not a bundle: JSON nested too deep") from exc


def _store_bundle(
    session: Session, bundle: dict[str, Any], token: RunnerToken, pin: StackPin | None
) -> tuple[str, bool]:
    row_by_row = bool(current_app.config.get("INGEST_ROW_BY_ROW"))
    key, created = import_bundle(
        session, bundle, pin=pin, runner=token.runner, row_by_row=row_by_row, validated=True
    )
    row = queries.runner_token_by_id(session, token.id)
    now = utcnow()
    if row is not None and (row.last_used_at is None or now - row.last_used_at > LAST_USED_RESOLUTION):
        row.last_used_at = now
    return key, created


@bp.post("")
def upload() -> Any:
    token = _authenticate()
    bundle, body_sha256 = _read_json()
    try:
        validate_bundle(bundle)
    except BundleError as exc:
        raise ApiError(400, f"invalid bundle: {exc}") from exc
    claimed = bundle["run"].get("runner")
    if claimed and claimed != token.runner:
        raise ApiError(403, f"this token uploads as runner {token.runner!r}, the bundle names {claimed!r}")
    digest = bundle["stack"]["digest"]
    if not may_upload_onto(token, digest):
        raise ApiError(
            403, f"token {token.id} of runner {token.runner!r} may not upload onto stack {digest[:12]}"
        )
    pin = pin_for_digest(digest)  # the stack's name is its pin's, never the uploader's
    store = store_ext.store
    for attempt in range(WRITE_ATTEMPTS):
        try:
            if not current_app.config.get("INGEST_ROW_BY_ROW"):
                with store.transaction() as session:  # shared rows first, in a short transaction
                    ensure_dimensions(session, bundle, pin)
            with store.transaction() as session:
                key, created = _store_bundle(session, bundle, token, pin)
            break
        except BundleConflict as exc:
            raise ApiError(409, str(exc)) from exc
        except BundleError as exc:  # a fact of the bundle the store checks (the stack digest)
            raise ApiError(400, f"invalid bundle: {exc}") from exc
        except UnreadableRun as exc:  # stored under this id, but no reader can compare it
            raise ApiError(409, str(exc)) from exc
        except IntegrityError:
            # A concurrent upload of the same run (or of another runner's run under that key)
            # committed first; the next pass sees it.
            if attempt == WRITE_ATTEMPTS - 1:
                raise
        except OperationalError as exc:
            if attempt == WRITE_ATTEMPTS - 1:
                current_app.logger.warning("upload gave up on a busy database: %s", exc)
                raise  # app.py answers 503 with Retry-After
            time.sleep(0.05 * 2**attempt)
    run_id = bundle["run"]["id"]
    current_app.logger.info(
        "run %s (key %s) from %s: %s", run_id, key, token.runner, "stored" if created else "duplicate"
    )
    body = {
        "run_id": run_id,
        "key": key,
        "created": created,
        "runner": token.runner,
        "results": len(bundle["results"]),
        "sha256": body_sha256,
    }
    headers = {"Location": url_for("runs.get_run", run_id=key)}
    return jsonify(body), (201 if created else 200), headers


@bp.get("")
def list_runs() -> Any:
    text = request.args.get("limit", "50")
    # ASCII digits only: int() also reads full-width and other Unicode digits.
    if not (text.isascii() and text.isdigit() and len(text) <= 6):
        raise ApiError(400, "limit must be an integer between 1 and 500")
    limit = int(text)
    if not 1 <= limit <= 500:
        raise ApiError(400, "limit must be between 1 and 500")
    skipped: list[tuple[str, str]] = []
    with store_ext.store.reader() as session:
        rows = list_runs_query(
            session,
            skipped=skipped,
            limit=limit + 1,
            stack_digest=request.args.get("stack"),
            runner=request.args.get("runner"),
            status=request.args.get("status"),
            before=request.args.get("before"),
        )
        # The first `limit` of the fetched rows, readable or not, make the page; unreadable ones are
        # named instead of served (regress.store.readable), and `next` pages past them all.
        fetched = sorted([run.id for run, _ in rows] + [key for key, _ in skipped], reverse=True)
        cut = fetched[limit - 1] if len(fetched) > limit else ""
        page = [run_summary(run, stack) for run, stack in rows if run.id >= cut]
    unreadable = [{"id": key, "problem": why} for key, why in skipped if key >= cut]
    return jsonify(runs=page, next=cut or None, unreadable=unreadable)


@bp.get("/<run_id>")
def get_run(run_id: str) -> Any:
    offset = _count_param("offset", 0, 10**9)
    limit = _count_param("limit", RESULTS_PAGE, RESULTS_PAGE)
    with_samples = request.args.get("samples", "true").lower() not in {"0", "false", "no"}
    runner = request.args.get("runner")
    with store_ext.store.reader() as session:
        if runner is not None:  # the run this runner gave this id, wherever it is stored
            found = queries.run_of_runner(session, runner, run_id)
            if found is None:
                raise ApiError(404, f"runner {runner!r} stored no run {run_id}")
            run_id = found.id
        if with_samples:  # a page holds at most SAMPLES_PAGE raw samples (and at least one result)
            limit = max(
                1, min(limit, queries.results_within_bytes(session, run_id, offset, SAMPLES_PAGE_BYTES))
            )
        skipped: list[tuple[str, str]] = []
        try:
            bundle = export_bundle(
                session, run_id, offset=offset, limit=limit, samples=with_samples, skipped=skipped
            )
        except KeyError as exc:
            raise ApiError(404, f"run {run_id} does not exist") from exc
        except UnreadableRun as exc:
            raise ApiError(422, str(exc)) from exc
        total = queries.run_result_count(session, run_id)
    # The body stays a bundle (valid against the schema); the page is in the headers.
    headers = {"X-Total-Results": str(total), "X-Unreadable-Results": str(len(skipped))}
    if offset + len(bundle["results"]) < total:
        args: dict[str, Any] = {} if with_samples else {"samples": "false"}
        after = url_for(
            "runs.get_run", run_id=run_id, offset=offset + len(bundle["results"]), limit=limit, **args
        )
        headers["Link"] = f'<{after}>; rel="next"'
    return jsonify(bundle), 200, headers


def _count_param(name: str, default: int, most: int) -> int:
    text = request.args.get(name)
    if text is None:
        return default
    if not (text.isascii() and text.isdigit() and len(text) <= 10) or int(text) > most:
        raise ApiError(400, f"{name} must be an integer between 0 and {most}")
    return int(text)
