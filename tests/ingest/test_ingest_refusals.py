"""What `POST /api/v1/runs` refuses, and how: every bad value a hostile client sent (issue #13's
500s) is a 400 naming the field, under a fresh and under a stored run id; deep nesting, a repeated
case, odd host and summary objects, an over-long chunked body (413) and a truncated gzip body are
refused; a gzip body of several members is read whole. Also the schema the refusals come from: the
validator's error is a user error, and the OpenAPI request body is the bundle schema.

Every test that posts runs on SQLite and PostgreSQL (the `db_url` fixture)."""

from __future__ import annotations

import copy
import gzip
import json
from collections.abc import Iterator
from typing import Any

import pytest
import requests
from ingest_bundles import make_bundle
from ingest_client import nested, post, real, set_at
from ingest_server import TEST_LIMIT_BYTES, Service

from regress.facts.bundle import BundleError, validate_bundle

BAD_VALUES = [
    ("run.message", float("nan")),
    ("results.0.metrics.p50_ms", float("inf")),
    ("run.backend", "x" * 17),
    ("run.trigger", "x" * 40),
    ("run.kernel_commit", "x" * 65),
    ("run.hostname", "x" * 300),
    ("results.0.name", "x" * 300),
    ("results.0.suite", "x" * 33),
    ("results.0.params.layout", "x" * 9),
    ("stack.name", "x" * 129),
    ("results.0.name", "a\x00b"),
    ("run.message", "a\x00b"),
    ("results.0.message", "\ud800"),
    ("run.started_at", "x"),
    ("run.started_at", "-1"),
    ("run.started_at", "0000-01-01T00:00:00"),
    ("run.started_at", "9999-12-31T23:59:59-12:00"),
    ("run.exit_code", 10**30),
    ("run.exit_code", "x"),
    ("results.0.params.b", 10**30),
    ("results.0.params.sq", "x"),
    ("run.hostname", {"a": 1}),
    ("results.0.device", "x"),
    ("build.inject", [1]),
]


@pytest.mark.parametrize(("path", "value"), BAD_VALUES, ids=[f"{p}={str(v)[:12]!r}" for p, v in BAD_VALUES])
def test_bad_values_are_400_naming_the_field(service: Service, path: str, value: Any) -> None:
    token = service.token("h200-01")
    original = real()
    bad = set_at(original, path, value)
    bad["run"]["id"] = original["run"]["id"] + "b"
    resp = post(service, bad, token)
    assert resp.status_code == 400, resp.text
    assert path.split(".")[-1] in resp.json()["error"]
    # Under the id of a stored run: still 400, never 200 "identical".
    assert post(service, original, token).status_code == 201
    same_id = set_at(original, path, value)
    assert post(service, same_id, token).status_code == 400


def test_deep_nesting_and_repeated_case_are_400(service: Service) -> None:
    token = service.token("h200-01")
    body = json.dumps(set_at(real(), "run.host.x", "@")).replace('"@"', nested(100_000)).encode()
    resp = post(service, body, token)
    assert resp.status_code == 400 and "nest" in resp.json()["error"]
    twice = real()
    twice["results"].append(copy.deepcopy(twice["results"][0]))
    resp = post(service, twice, token)
    assert resp.status_code == 400 and "repeats the case" in resp.json()["error"]


def test_odd_host_and_summary_are_refused(service: Service) -> None:
    token = service.token("h200-01")
    assert post(service, set_at(real(), "run.host", "x"), token).status_code == 400
    assert post(service, set_at(real(), "run.summary", -1), token).status_code == 400


def test_chunked_body_over_the_limit_is_413(service: Service) -> None:
    token = service.token("h200-01")
    chunk = b"[" + b"1.0," * (64 * 1024)

    def body() -> Iterator[bytes]:  # no Content-Length: requests sends Transfer-Encoding: chunked
        sent = 0
        while sent <= TEST_LIMIT_BYTES * 2:
            yield chunk
            sent += len(chunk)

    resp = requests.post(
        f"{service.url}/api/v1/runs",
        data=body(),
        headers={"Authorization": f"Bearer {token}", "Content-Type": "application/json"},
        timeout=60,
    )
    assert resp.status_code == 413, resp.text
    small = json.dumps(make_bundle()).encode()
    ok = requests.post(
        f"{service.url}/api/v1/runs",
        data=iter([small[:1000], small[1000:]]),
        headers={"Authorization": f"Bearer {token}", "Content-Type": "application/json"},
        timeout=60,
    )
    assert ok.status_code == 201, ok.text


def test_gzip_with_several_members_is_read_whole(service: Service) -> None:
    token = service.token("h200-01")
    raw = json.dumps(make_bundle()).encode()
    body = gzip.compress(raw[:500]) + gzip.compress(raw[500:])
    resp = post(service, body, token, **{"Content-Encoding": "gzip"})
    assert resp.status_code == 201, resp.text
    truncated = gzip.compress(raw)[:-20]
    assert post(service, truncated, token, **{"Content-Encoding": "gzip"}).status_code == 400


def test_validate_bundle_error_is_a_user_error() -> None:
    from regress.facts.errors import UserError

    with pytest.raises(BundleError, match=r"bundle\.run\.started_at") as caught:
        validate_bundle(set_at(real(), "run.started_at", "yesterday"))
    assert isinstance(caught.value, UserError)


def test_openapi_request_body_is_the_bundle_schema() -> None:
    from regress.facts.bundle import bundle_schema
    from regress.server.openapi import openapi_document

    doc = openapi_document()
    body = doc["paths"]["/api/v1/runs"]["post"]["requestBody"]["content"]["application/json"]["schema"]
    assert body == {"$ref": "#/components/schemas/Bundle"}
    schemas = doc["components"]["schemas"]
    run = schemas["Bundle_run"]["properties"]
    source = bundle_schema()["$defs"]["run"]["properties"]
    assert run["backend"]["maxLength"] == source["backend"]["maxLength"] == 16
    samples = schemas["Bundle_result"]["properties"]["samples"]["additionalProperties"]
    assert samples["items"]["type"] == "number"  # regress's own keyword, spelled for generic tools
    refs = {v for v in json.dumps(doc).split('"') if v.startswith("#/components/schemas/")}
    assert all(ref.removeprefix("#/components/schemas/") in schemas for ref in refs)
