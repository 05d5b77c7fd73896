"""The schema-versioned JSON bundle of one run: what a runner uploads and `regress nightly` writes.

Validation happens before anything is stored, and names the first offending field.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

BUNDLE_SCHEMA = "regress.bundle"
BUNDLE_VERSION = 1
RUN_STATUSES = {"running", "complete", "failed", "incomplete"}
RESULT_STATUSES = {"pass", "fail", "error", "timeout", "skip"}


class BundleError(ValueError):
    """A bundle that does not follow the schema; the message names the field."""


def _require(obj: Any, key: str, kind: type | tuple[type, ...], where: str) -> Any:
    if not isinstance(obj, dict) or key not in obj:
        raise BundleError(f"{where}.{key} is missing")
    value = obj[key]
    if not isinstance(value, kind) or (isinstance(value, bool) and bool not in _as_tuple(kind)):
        raise BundleError(f"{where}.{key} must be {_kind_name(kind)}, got {type(value).__name__}")
    return value


def _as_tuple(kind: type | tuple[type, ...]) -> tuple[type, ...]:
    return kind if isinstance(kind, tuple) else (kind,)


def _kind_name(kind: type | tuple[type, ...]) -> str:
    return " or ".join(k.__name__ for k in _as_tuple(kind))


def validate_bundle(data: Any) -> None:
    """Raises BundleError unless `data` is a complete, well-typed bundle of schema version 1."""
    if not isinstance(data, dict):
        raise BundleError("bundle must be a JSON object")
    if data.get("schema") != BUNDLE_SCHEMA:
        raise BundleError(f"bundle.schema must be {BUNDLE_SCHEMA!r}")
    version = _require(data, "schema_version", int, "bundle")
    if version != BUNDLE_VERSION:
        raise BundleError(
            f"bundle.schema_version {version} is not supported (this server reads {BUNDLE_VERSION})"
        )
    run = _require(data, "run", dict, "bundle")
    run_id = _require(run, "id", str, "run")
    if not (8 <= len(run_id) <= 32) or not all(c in "0123456789abcdefghijklmnopqrstuvwxyz-" for c in run_id):
        raise BundleError("run.id must be 8-32 characters of [0-9a-z-]")
    status = _require(run, "status", str, "run")
    if status not in RUN_STATUSES:
        raise BundleError(f"run.status {status!r} is not one of {sorted(RUN_STATUSES)}")
    _require(run, "backend", str, "run")
    _require(run, "started_at", str, "run")
    _require(run, "suites", list, "run")
    stack = _require(data, "stack", dict, "bundle")
    digest = _require(stack, "digest", str, "stack")
    if len(digest) != 64 or any(c not in "0123456789abcdef" for c in digest):
        raise BundleError("stack.digest must be 64 lowercase hex digits")
    _require(stack, "keys", dict, "stack")
    _require(stack, "schema_version", int, "stack")
    build = data.get("build")
    if build is not None:
        for key in ("backend", "source_hash", "artifact_hash", "compiler", "compiler_version"):
            _require(build, key, str, "build")
        _require(build, "flags", list, "build")
    results = _require(data, "results", list, "bundle")
    for i, res in enumerate(results):
        where = f"results[{i}]"
        for key in ("suite", "name", "kernel", "status"):
            _require(res, key, str, where)
        if res["status"] not in RESULT_STATUSES:
            raise BundleError(f"{where}.status {res['status']!r} is not one of {sorted(RESULT_STATUSES)}")
        _require(res, "params", dict, where)
        _require(res, "metrics", dict, where)
        samples = _require(res, "samples", dict, where)
        for name, values in samples.items():
            if not isinstance(values, list) or not all(
                isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v) for v in values
            ):
                raise BundleError(f"{where}.samples[{name!r}] must be a list of finite numbers")


def write_bundle(bundle: dict[str, Any], directory: Path) -> Path:
    """Writes <dir>/<run-id>.json atomically (temp file + rename), so a reader never sees half."""
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"{bundle['run']['id']}.json"
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(bundle, indent=1, sort_keys=True, default=str))
    tmp.replace(path)
    return path


def read_bundle(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as exc:
        raise BundleError(f"{path}: cannot read bundle: {exc}") from exc
    validate_bundle(data)
    return data
