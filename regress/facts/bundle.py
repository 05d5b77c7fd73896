"""The schema-versioned JSON bundle of one run: what a runner uploads and `regress nightly` writes.

Validation happens before anything is stored, against one JSON Schema
(regress/facts/schemas/bundle.schema.json), and names the JSON path of the first offending field.
"""

from __future__ import annotations

import functools
import json
import math
import re
import unicodedata
from collections import deque
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from jsonschema import Draft202012Validator, FormatChecker, ValidationError, validators
from jsonschema.exceptions import best_match

from .errors import UserError
from .results import CaseResult, CaseSpec, stored_series

BUNDLE_SCHEMA = "regress.bundle"  # the schema's name in every bundle (a format name, not a module path)
BUNDLE_VERSION = 1
RUN_STATUSES = {"running", "complete", "failed", "incomplete", "cancelled"}
RESULT_STATUSES = {"pass", "fail", "error", "timeout", "skip"}
SCHEMA_FILE = Path(__file__).with_name("schemas") / "bundle.schema.json"
# Deeper than any real bundle (free-form objects sit 3 levels down and nest a few more); checked
# before anything else walks the document, so a 100,000-deep array is one error, not a crash.
MAX_DEPTH = 24
# Integers stored in JSON columns are compared exactly (idempotency) and summed by readers.
JSON_INT_RANGE = (-(2**63), 2**63 - 1)
# Every float, anywhere: readers square and sum them (variance, geomean, chart scales); 1.7e308
# was finite yet became Infinity in the site's JSON, which JSON.parse refuses.
FLOAT_LIMIT = 1e100
# gpu_state snapshots' `time_unix` (seconds): the datetime range, so every reader can show it.
TIME_UNIX_RANGE = (0.0, 32503680000.0)  # 1970-01-01 .. 3000-01-01
# Timestamps: datetime.fromisoformat, then this range once converted to naive UTC.
TIME_RANGE = (datetime(1970, 1, 1), datetime(2999, 12, 31))
# A run cannot have started (or finished) in the future: a far-future started_at made the run every
# gate's `stack:NAME` baseline. Both doors (the service, `regress import`) allow runner clocks ahead
# by this much.
CLOCK_SKEW = timedelta(hours=1)
# Raw samples: a real nightly holds at most 1,280 per result and 88,000 per run; these bounds are
# 15x and 11x that. Unbounded, a 28.6 MiB upload took 1.0 GB of server memory (issue 41 item 5).
MAX_SAMPLES_PER_RESULT = 20_000
MAX_SAMPLES_PER_RUN = 1_000_000
# Sample series and metrics that are durations: a reader takes their logarithm (geomean, the gate's
# ratios), so one that is zero or negative is a value no reader can use (issue 41 item 6).
_DURATION = re.compile(r"(?:^|:)(?:time_ms|p5_ms|p50_ms|p95_ms|mean_ms)\Z")


class BundleError(UserError):
    """A bundle that does not follow the schema; the message names the JSON path of the field."""


_BAD_TEXT = re.compile("[\x00\ud800-\udfff]")  # PostgreSQL stores neither; UTF-8 cannot encode the latter


_CONTROL = re.compile("[\x00-\x1f\x7f]")


def _bad_text(value: str) -> bool:
    return _BAD_TEXT.search(value) is not None


def _finite(value: Any) -> bool:
    if isinstance(value, bool):
        return False
    if isinstance(value, int):
        return JSON_INT_RANGE[0] <= value <= JSON_INT_RANGE[1]
    return isinstance(value, float) and -FLOAT_LIMIT <= value <= FLOAT_LIMIT  # NaN compares False


def _out_of_range(value: Any) -> str:
    return f"{_short(value)} is not a finite number within ±{FLOAT_LIMIT:g} (or an integer within 64 bits)"


def _is_number(_checker: Any, value: Any) -> bool:
    return _finite(value)


def _is_integer(_checker: Any, value: Any) -> bool:
    # Only a JSON integer literal: a whole float (1.0, -0.0) is refused rather than stored as an
    # int in one database and failing PostgreSQL's integer COPY in the other.
    return isinstance(value, int) and _finite(value)


class _HugeInt(float):
    """An integer literal too long for 64 bits, kept as infinity with its length, so that the
    validator names its JSON path instead of Python's int-size limit raising at parse time."""

    digits = 0

    def __repr__(self) -> str:
        return f"an integer of {self.digits} digits"


def _parse_int(text: str) -> int | float:
    if len(text) <= 20:  # 2**63 has 19 digits; a sign makes 20
        return int(text)
    huge = _HugeInt("-inf" if text.startswith("-") else "inf")
    huge.digits = len(text.lstrip("-"))
    return huge


class _RepeatedKeys(dict[str, Any]):
    """An object whose text named a key twice (JSON leaves it undefined; Python keeps the last)."""

    repeated = ""


def _object(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out = dict(pairs)
    if len(out) == len(pairs):
        return out
    repeated = _RepeatedKeys(out)
    seen: set[str] = set()
    for key, _ in pairs:
        if key in seen:
            repeated.repeated = key
            break
        seen.add(key)
    return repeated


def loads_bundle(raw: bytes | str) -> Any:
    """JSON text as a bundle candidate for validate_bundle: integers past 64 bits and repeated keys
    are kept visible (validate_bundle names their path) instead of raising or silently winning.
    Raises ValueError for text that is not JSON."""
    return json.loads(raw, parse_int=_parse_int, object_pairs_hook=_object)


def _json_problem(value: Any, max_depth: int) -> tuple[list[str | int], str] | None:
    """The first thing in a free-form JSON value that the store or a reader cannot hold."""
    stack: list[tuple[Any, list[str | int]]] = [(value, [])]
    while stack:
        item, where = stack.pop()
        if len(where) > max_depth:
            return where, f"nests deeper than {max_depth} levels"
        if isinstance(item, dict):
            for key, sub in item.items():
                if not isinstance(key, str) or _bad_text(key) or len(key) > 256:
                    return where, f"has a key {str(key)[:40]!r} that is not a clean string of <= 256 chars"
                stack.append((sub, [*where, key]))
        elif isinstance(item, list):
            stack.extend((sub, [*where, i]) for i, sub in enumerate(item))
        elif isinstance(item, str):
            if _bad_text(item):
                return where, "contains NUL or a lone surrogate"
        elif isinstance(item, int | float) and not isinstance(item, bool):
            if not _finite(item):
                return (
                    where,
                    f"{_short(item)} is not a number within ±{FLOAT_LIMIT:g} (or an integer within 64 bits)",
                )
        elif item is not None and not isinstance(item, bool):
            return where, f"is a {type(item).__name__}, not JSON"
    return None


def _regress_json(validator: Any, options: Any, instance: Any, _schema: Any) -> Iterator[ValidationError]:
    if validator.is_type(instance, "object"):
        found = _json_problem(instance, int(options.get("maxDepth", MAX_DEPTH)))
        if found is not None:
            where, problem = found
            yield ValidationError(problem, path=deque(where))


def _all_finite(values: list[Any]) -> bool:
    """Raw samples are most of a bundle's bytes: checked in C-speed builtins (type set, fsum) first,
    element by element only when that is not conclusive."""
    kinds = set(map(type, values))
    if kinds <= {float, int}:
        if int in kinds and not all(map(_finite, values)):
            return False
        try:
            if math.isfinite(math.fsum(values)) and max(map(abs, values), default=0) <= FLOAT_LIMIT:
                return True
        except (OverflowError, ValueError):  # inf - inf, or finite values whose sum overflows
            pass
    return all(map(_finite, values))


def _regress_numbers(validator: Any, enabled: Any, instance: Any, _schema: Any) -> Iterator[ValidationError]:
    if enabled and isinstance(instance, list) and not _all_finite(instance):
        i = next(i for i, v in enumerate(instance) if not _finite(v))
        yield ValidationError(
            f"{_short(instance[i])} is not a number within ±{FLOAT_LIMIT:g}", path=deque([i])
        )


def _timestamp(value: object) -> bool:
    if not isinstance(value, str):
        return True
    parsed = parse_timestamp(value)  # raises ValueError / OverflowError
    if not TIME_RANGE[0] <= parsed <= TIME_RANGE[1]:
        raise ValueError(f"{value!r} is outside {TIME_RANGE[0]:%Y}-{TIME_RANGE[1]:%Y}")
    return True


def parse_timestamp(value: str) -> datetime:
    """ISO 8601 as naive UTC (the store's convention); naive input is taken as UTC already."""
    parsed = datetime.fromisoformat(value)
    if parsed.tzinfo is not None:
        parsed = parsed.astimezone(UTC).replace(tzinfo=None)
    return parsed


_FORMATS = FormatChecker(formats=())
_FORMATS.checks("regress-timestamp", raises=(ValueError, OverflowError, TypeError))(_timestamp)


@functools.cache
def bundle_schema() -> dict[str, Any]:
    """The JSON Schema of a bundle (regress/facts/schemas/bundle.schema.json), as a dict."""
    schema: dict[str, Any] = json.loads(SCHEMA_FILE.read_text())
    return schema


def max_results() -> int:
    """The most results one run (one bundle) may hold: the schema's `results.maxItems`.

    A full nightly holds ~300. Each result is a row in the store and a page of the site, so this is
    what bounds ingest and render work per run; docs/reliability.md states what the limit costs.
    """
    return int(bundle_schema()["properties"]["results"]["maxItems"])


@functools.cache
def _anchored(pattern: str) -> re.Pattern[str]:
    # JSON Schema's `$` is ECMA-262's: the end of the string. Python's also matches before a final
    # newline, so every `^...$` field took "value\n" (issue 41 item 10: a run id that `runs delete`
    # could not name, a site file name holding a newline). A final `$` means \Z here.
    return re.compile(
        pattern[:-1] + r"\Z" if pattern.endswith("$") and not pattern.endswith("\\$") else pattern
    )


def _pattern(validator: Any, pattern: str, instance: Any, _schema: Any) -> Iterator[ValidationError]:
    if validator.is_type(instance, "string") and not _anchored(pattern).search(instance):
        yield ValidationError(f"{instance!r} does not match {pattern!r}")


@functools.cache
def _validator() -> Any:
    types = Draft202012Validator.TYPE_CHECKER.redefine_many({"number": _is_number, "integer": _is_integer})
    cls = validators.extend(
        Draft202012Validator,
        validators={"regressJson": _regress_json, "regressNumbers": _regress_numbers, "pattern": _pattern},
        type_checker=types,
    )
    schema = bundle_schema()
    cls.check_schema(schema)
    # The schema has no recursive reference: inlining every $ref once saves a registry lookup per
    # field per result (half of the time on a 14,000-result bundle).
    return cls(_inline_refs(schema, schema["$defs"]), format_checker=_FORMATS)


def _inline_refs(node: Any, defs: dict[str, Any]) -> Any:
    if isinstance(node, list):
        return [_inline_refs(v, defs) for v in node]
    if not isinstance(node, dict):
        return node
    if isinstance(node.get("$ref"), str) and node["$ref"].startswith("#/$defs/"):
        target = _inline_refs(defs[node["$ref"].removeprefix("#/$defs/")], defs)
        rest = {k: _inline_refs(v, defs) for k, v in node.items() if k != "$ref"}
        return {**target, **rest} if not (set(target) & set(rest)) else {"allOf": [target], **rest}
    return {k: _inline_refs(v, defs) for k, v in node.items() if k != "$defs"}


def _short(value: Any) -> str:
    text = repr(value) if not isinstance(value, dict | list) else type(value).__name__
    return text if len(text) <= 60 else text[:57] + "..."


def json_path(parts: Any) -> str:
    out = "bundle"
    for part in parts:
        out += f"[{part}]" if isinstance(part, int) else f".{part}" if _plain(part) else f"[{part!r}]"
    return out


def _plain(key: Any) -> bool:
    return isinstance(key, str) and key.isidentifier()


_TYPE_NAMES = {dict: "object", list: "array", str: "string", bool: "boolean", type(None): "null"}


def _describe(err: ValidationError) -> str:
    if err.validator == "anyOf" and err.context:
        # A nullable field: explain the non-null branch's error (the null branch's says nothing).
        branch = [e for e in err.context if e.relative_schema_path[0] != 0] or list(err.context)
        return _describe(best_match(branch))
    inst = err.instance
    kind = err.validator
    if kind == "type":
        got = _TYPE_NAMES.get(type(inst)) or ("number" if isinstance(inst, int | float) else "other")
        if isinstance(inst, int | float) and not isinstance(inst, bool) and not _finite(inst):
            return _out_of_range(inst)
        want = err.validator_value
        want = " or ".join(want) if isinstance(want, list) else want
        shown = "" if isinstance(inst, dict | list) else f" {_short(inst)}"
        return f"must be {want}, got {got}{shown}"
    if kind == "maxLength":
        return f"is {len(inst)} characters, longer than {err.validator_value} (the column's size)"
    if kind == "minLength":
        return f"must have at least {err.validator_value} characters"
    if kind == "pattern":
        if _bad_text(inst):
            return "contains NUL or a lone surrogate"
        if isinstance(inst, str) and (bad := _CONTROL.search(inst)):
            return f"contains the control character {bad.group()!r} at {bad.start()}: this field takes none"
        return f"{_short(inst)} does not match {err.validator_value}"
    if kind in ("minimum", "maximum"):
        return f"{_short(inst)} is outside the column's range ({kind} {err.validator_value})"
    if kind == "format":
        return f"{_short(inst)} is not a timestamp in {TIME_RANGE[0]:%Y}-{TIME_RANGE[1]:%Y} (ISO 8601)"
    if kind in ("enum", "const"):
        allowed = err.validator_value if kind == "enum" else [err.validator_value]
        return f"{_short(inst)} is not one of {allowed}"
    if kind == "additionalProperties":
        extra = sorted(set(inst) - set(err.schema.get("properties", {})))
        return f"has unknown field(s) {', '.join(map(repr, extra[:5]))}"
    if kind in ("maxItems", "maxProperties"):
        return f"has {len(inst):,} entries, more than the limit of {err.validator_value:,}"
    return str(err.message)[:300]  # jsonschema has no type information


def _first_error(data: Any) -> ValidationError | None:
    errors = list(_validator().iter_errors(data))
    if not errors:
        return None
    return best_match(errors)


def validate_bundle(data: Any) -> None:
    """Raises BundleError unless `data` is a bundle the store can hold and every reader can show.

    The one validator of a bundle: the service, `regress import` and `regress upload` call it. It
    checks the JSON Schema (regress/facts/schemas/bundle.schema.json), then that no case repeats, that
    durations are positive and that the run is not in the future. The message names the JSON path
    of the first problem found. Case names, suites and kernels are normalised to NFC in place first
    (an NFD spelling became a second case that looks the same; issue 41 item 11).
    """
    results = data.get("results") if isinstance(data, dict) else None
    if isinstance(results, list):
        _normalise_case_names(results)
    if isinstance(results, list) and len(results) > max_results():  # before any per-result work
        raise BundleError(
            f"bundle.results: holds {len(results):,} results, more than the limit of "
            f"{max_results():,} per run"
        )
    _check_sample_counts(results)
    deep = _json_problem_depth(data)
    if deep is not None:
        where, repeated = deep
        if repeated is not None:
            raise BundleError(f"{json_path(where)}: names the key {repeated!r} twice")
        raise BundleError(f"{json_path(where[:6])}...: nests deeper than {MAX_DEPTH} levels")
    err = _first_error(data)
    if err is not None:
        # A nullable field's error comes from one branch of anyOf; name the field, not the branch.
        if err.validator == "required":
            missing = next(k for k in err.validator_value if k not in err.instance)
            raise BundleError(f"{json_path([*err.absolute_path, missing])}: is missing")
        raise BundleError(f"{json_path(err.absolute_path)}: {_describe(err)}")
    run = data["run"]
    stamp = _bad_time_unix(run.get("gpu_state"), ["run", "gpu_state"])
    if stamp is not None:
        raise BundleError(
            f"{json_path(stamp)}: is not a time in seconds since 1970 within "
            f"{TIME_UNIX_RANGE[0]:.0f}..{TIME_UNIX_RANGE[1]:.0f} (years 1970-2999)"
        )
    if run.get("finished_at") and parse_timestamp(run["finished_at"]) < parse_timestamp(run["started_at"]):
        raise BundleError(
            f"bundle.run.finished_at: {run['finished_at']!r} is before started_at {run['started_at']!r}"
        )
    check_clock(run)
    seen: dict[str, int] = {}
    for i, res in enumerate(data["results"]):
        _check_durations(res, i)
        key = CaseSpec(res["suite"], res["name"], res["params"], res["kernel"]).key
        if "case_key" in res and res["case_key"] != key:
            raise BundleError(
                f"bundle.results[{i}].case_key: {res['case_key']!r} is not the case's key {key!r}"
            )
        if key in seen:
            raise BundleError(
                f"bundle.results[{i}]: repeats the case of results[{seen[key]}] "
                f"({res['suite']}/{res['name']}); a run holds one result per case"
            )
        seen[key] = i


def _bad_time_unix(value: Any, where: list[str | int]) -> list[str | int] | None:
    """The path of a `time_unix` in the GPU snapshots that is not a datetime a reader can show."""
    if isinstance(value, dict):
        for key, sub in value.items():
            if key == "time_unix" and not (
                isinstance(sub, int | float)
                and not isinstance(sub, bool)
                and TIME_UNIX_RANGE[0] <= sub < TIME_UNIX_RANGE[1]
            ):
                return [*where, key]
            found = _bad_time_unix(sub, [*where, key])
            if found:
                return found
    elif isinstance(value, list):
        for i, sub in enumerate(value):
            found = _bad_time_unix(sub, [*where, i])
            if found:
                return found
    return None


def _check_sample_counts(results: Any) -> None:
    """Before the schema walks them: the samples of one result and of the whole run are bounded."""
    if not isinstance(results, list):
        return
    total = 0
    for i, res in enumerate(results):
        samples = res.get("samples") if isinstance(res, dict) else None
        if not isinstance(samples, dict):
            continue
        count = sum(len(v) for v in samples.values() if isinstance(v, list))
        if count > MAX_SAMPLES_PER_RESULT:
            raise BundleError(
                f"bundle.results[{i}].samples: holds {count:,} samples, more than the limit of "
                f"{MAX_SAMPLES_PER_RESULT:,} per result"
            )
        total += count
        if total > MAX_SAMPLES_PER_RUN:
            raise BundleError(
                f"bundle.results: holds more than the limit of {MAX_SAMPLES_PER_RUN:,} samples per run"
            )


def unusable_duration(name: str, value: Any) -> bool:
    """A duration sample or metric that is zero or negative (no reader can take its logarithm).
    The one rule of both doors and of every reader of stored rows (regress.store.readable)."""
    return _DURATION.search(name) is not None and isinstance(value, int | float) and not value > 0


def _check_durations(res: dict[str, Any], i: int) -> None:
    for name, values in res["samples"].items():
        bad = next((j for j, v in enumerate(values) if unusable_duration(name, v)), None)
        if bad is not None:
            raise BundleError(
                f"bundle.results[{i}].samples[{name!r}][{bad}]: {values[bad]!r} is not a duration "
                "(must be > 0)"
            )
    for name, value in res["metrics"].items():
        if unusable_duration(name, value):
            raise BundleError(
                f"bundle.results[{i}].metrics[{name!r}]: {value!r} is not a duration (must be > 0)"
            )


def check_clock(run: dict[str, Any], now: datetime | None = None) -> None:
    """BundleError when the run started or finished later than now + CLOCK_SKEW (naive UTC)."""
    latest = (now or datetime.now(UTC).replace(tzinfo=None)) + CLOCK_SKEW
    for field in ("started_at", "finished_at"):
        if run.get(field) and parse_timestamp(run[field]) > latest:
            raise BundleError(
                f"bundle.run.{field}: {run[field]!r} is later than the clock "
                f"({latest:%Y-%m-%dT%H:%M:%S}Z, now + {CLOCK_SKEW})"
            )


def _normalise_case_names(results: list[Any]) -> None:
    for res in results:
        if not isinstance(res, dict):
            continue
        fields = [f for f in ("suite", "name", "kernel") if isinstance(res.get(f), str)]
        if all(unicodedata.is_normalized("NFC", res[f]) for f in fields):
            continue
        old_key = _key_or_none(res)
        for f in fields:
            res[f] = unicodedata.normalize("NFC", res[f])
        if old_key is not None and res.get("case_key") == old_key:
            res["case_key"] = _key_or_none(res)  # the key of the name as stored


def _key_or_none(res: dict[str, Any]) -> str | None:
    try:
        return CaseSpec(res["suite"], res["name"], res["params"], res["kernel"]).key
    except Exception:  # a malformed result: the schema names its problem next
        return None


def _json_problem_depth(data: Any) -> tuple[list[str | int], str | None] | None:
    """The path of a value nested deeper than MAX_DEPTH (and None), or of an object that repeats a
    key (and that key), found without recursion."""
    stack: list[tuple[Any, list[str | int]]] = [(data, [])]
    while stack:
        item, where = stack.pop()
        if len(where) > MAX_DEPTH:
            return where, None
        if isinstance(item, _RepeatedKeys):
            return where, item.repeated
        if isinstance(item, dict):
            stack.extend((sub, [*where, str(k)]) for k, sub in item.items() if isinstance(sub, dict | list))
        elif isinstance(item, list):
            stack.extend((sub, [*where, i]) for i, sub in enumerate(item) if isinstance(sub, dict | list))
    return None


def run_fields(run: dict[str, Any]) -> dict[str, Any]:
    """A validated bundle's `run` section as the store keeps it: optional fields given their stored
    defaults, timestamps parsed (naive UTC). The one table of run fields behind both the row an
    upload stores (`store.Run.columns_of_upload`) and the canonical form below; the runner (the
    token's) is the server's to set, so it is not here."""

    def when(value: Any) -> datetime | None:
        return parse_timestamp(str(value)) if value else None

    return {
        "id": run["id"],
        "status": run["status"],
        "trigger": run.get("trigger") or "upload",
        "is_drill": bool(run.get("is_drill", False)),
        "backend": run["backend"],
        "kernel_commit": run.get("kernel_commit"),
        "source_hash": run.get("source_hash"),
        "suites": list(run["suites"]),
        "hostname": run.get("hostname"),
        **{k: run.get(k) or {} for k in ("host", "ci", "gpu_state", "summary")},
        "message": run.get("message") or "",
        "exit_code": run.get("exit_code"),
        "started_at": when(run["started_at"]),
        "finished_at": when(run.get("finished_at")),
    }


def build_fields(build: dict[str, Any]) -> dict[str, Any]:
    """A validated bundle's `build` section as the store keeps it: every field, the optional ones
    given their stored defaults. The one table behind the build row's key (`store.Build.record`:
    the whole record, so no uploader's build facts stand for another's) and the canonical form."""
    return {
        "backend": build["backend"],
        "source_hash": build["source_hash"],
        "git_commit": build.get("git_commit"),
        "git_dirty": bool(build.get("git_dirty", False)),
        "compiler": build["compiler"],
        "compiler_version": build["compiler_version"],
        "flags": list(build["flags"]),
        "artifact_hash": build["artifact_hash"],
        "compile_only": bool(build.get("compile_only", False)),
        "stats": build.get("stats") or {},
        "inject": build.get("inject") or {},
    }


def canonical(bundle: dict[str, Any]) -> dict[str, Any]:
    """A validated bundle as the store holds it: optional fields with their stored defaults,
    timestamps as naive UTC, raw samples as floats, numbers `normalised`, results in case-key order.
    The runner (the token's) and the stack name (the pins') are the server's to set, so they are left
    out. Two bundles are the same run exactly when their canonical forms are equal (idempotent upload)."""
    build = bundle.get("build")
    run = {k: v.isoformat() if isinstance(v, datetime) else v for k, v in run_fields(bundle["run"]).items()}
    results = [
        {**res, "samples": {name: stored_series(v) for name, v in res["samples"].items()}}
        for res in (CaseResult.from_dict(r).to_dict() for r in bundle["results"])
    ]
    stored: dict[str, Any] = normalised(  # a dict stays a dict
        {
            "schema": bundle["schema"],
            "schema_version": bundle["schema_version"],
            "run": run,
            "stack": {k: bundle["stack"][k] for k in ("digest", "schema_version", "keys")},
            "build": build_fields(build) if build else None,
            "results": sorted(results, key=lambda r: str(r["case_key"])),
        }
    )
    return stored


def first_difference(a: Any, b: Any, where: tuple[str | int, ...] = ()) -> str | None:
    """The JSON path of the first place two JSON values differ (None when equal)."""
    if type(a) is not type(b):
        return json_path(where)
    if isinstance(a, dict):
        for key in sorted(set(a) | set(b)):
            if key not in a or key not in b:
                return json_path((*where, key))
            found = first_difference(a[key], b[key], (*where, key))
            if found:
                return found
        return None
    if isinstance(a, list):
        for i, (x, y) in enumerate(zip(a, b, strict=False)):
            found = first_difference(x, y, (*where, i))
            if found:
                return found
        return json_path((*where, min(len(a), len(b)))) if len(a) != len(b) else None
    return None if a == b else json_path(where)


def normalised(value: Any) -> Any:
    """`value` with every integer that a float equals as that float: 3 and 3.0 are the same
    measurement (idempotency). An integer no float equals (2**53 + 1) stays itself: as a float it
    was 2**53, so two bundles that differed only there compared equal."""
    if isinstance(value, dict):
        return {k: normalised(v) for k, v in value.items()}
    if isinstance(value, list):
        return [normalised(v) for v in value]
    if isinstance(value, int) and not isinstance(value, bool):
        try:
            as_float = float(value)
        except OverflowError:  # past 1e308: no float is near it
            return value
        return as_float if as_float == value else value  # int == float compares exactly in Python
    return value


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
        data = loads_bundle(path.read_bytes())
    except (OSError, ValueError, RecursionError) as exc:  # unreadable, not UTF-8, not JSON
        raise BundleError(f"{path}: cannot read bundle: {exc}") from exc
    validate_bundle(data)
    bundle: dict[str, Any] = data  # validate_bundle raised unless it is a bundle object
    return bundle
