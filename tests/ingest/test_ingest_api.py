"""The results service over real HTTP on 127.0.0.1, on SQLite and on PostgreSQL."""

from __future__ import annotations

import gzip
import hashlib
import json
import threading
from typing import Any

import requests
from ingest_bundles import conflicting, make_bundle
from ingest_server import TEST_LIMIT_BYTES, Service
from sqlalchemy import func, select

from regress.server.tokens import revoke_tokens
from regress.store import Result, Run, RunnerToken

# PostgreSQL copies in plain pytest: these (concurrent inserts of one run);
# the module's others in CI (tests/conftest.py)
POSTGRES_IN_PLAIN = {"test_concurrent_identical_uploads_store_one_run"}


def post(service: Service, bundle: Any, token: str | None, **kw: Any) -> requests.Response:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    body = bundle if isinstance(bundle, bytes) else json.dumps(bundle).encode()
    return requests.post(f"{service.url}/api/v1/runs", data=body, headers=headers, timeout=30, **kw)


def count_runs(service: Service) -> int:
    with service.store.reader() as session:
        return int(session.scalar(select(func.count()).select_from(Run)) or 0)


def test_upload_stores_run_and_reads_back(service: Service) -> None:
    token = service.token("mi300x-01")
    bundle = make_bundle()
    resp = post(service, bundle, token)
    assert resp.status_code == 201, resp.text
    assert resp.json() == {
        "run_id": bundle["run"]["id"],
        "key": bundle["run"]["id"],  # the run's own id: no other runner's run holds it
        "created": True,
        "runner": "mi300x-01",
        "results": 13,
        "sha256": hashlib.sha256(resp.request.body or b"").hexdigest(),  # of the bytes it read
    }
    assert resp.headers["Location"] == f"/api/v1/runs/{bundle['run']['id']}"

    got = requests.get(f"{service.url}{resp.headers['Location']}", timeout=10).json()
    assert got["run"]["runner"] == "mi300x-01"
    assert got["results"][0]["samples"]["time_ms"] == bundle["results"][0]["samples"]["time_ms"]
    listed = requests.get(f"{service.url}/api/v1/runs", params={"runner": "mi300x-01"}, timeout=10).json()
    assert [r["id"] for r in listed["runs"]] == [bundle["run"]["id"]]
    with service.store.reader() as session:
        assert session.scalar(select(func.count()).select_from(Result)) == 13
        assert session.scalars(select(RunnerToken)).one().last_used_at is not None


def test_duplicate_upload_is_accepted_once(service: Service) -> None:
    token = service.token("mi300x-01")
    bundle = make_bundle()
    assert post(service, bundle, token).status_code == 201
    again = post(service, bundle, token)
    assert again.status_code == 200
    assert again.json()["created"] is False
    assert count_runs(service) == 1


def test_concurrent_identical_uploads_store_one_run(service: Service) -> None:
    token = service.token("mi300x-01")
    bundle = make_bundle()
    codes: list[int] = []

    def send() -> None:
        codes.append(post(service, bundle, token).status_code)

    threads = [threading.Thread(target=send) for _ in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(codes) == [200] * 5 + [201]
    assert count_runs(service) == 1


def test_conflicting_run_id_is_refused(service: Service) -> None:
    token = service.token("mi300x-01")
    bundle = make_bundle()
    assert post(service, bundle, token).status_code == 201
    resp = post(service, conflicting(bundle), token)
    assert resp.status_code == 409
    assert "different content" in resp.json()["error"]


def test_missing_and_wrong_token_are_401(service: Service) -> None:
    service.token("mi300x-01")
    bundle = make_bundle()
    missing = post(service, bundle, None)
    assert missing.status_code == 401
    assert missing.headers["WWW-Authenticate"].startswith("Bearer")
    assert post(service, bundle, "rgr_not-a-real-token").status_code == 401
    basic = requests.post(f"{service.url}/api/v1/runs", json=bundle, auth=("u", "p"), timeout=10)
    assert basic.status_code == 401
    assert count_runs(service) == 0


def test_revoked_token_is_403(service: Service) -> None:
    token = service.token("mi300x-01")
    revoke_tokens(service.store, runner="mi300x-01")
    resp = post(service, make_bundle(), token)
    assert resp.status_code == 403
    assert "revoked" in resp.json()["error"]
    assert count_runs(service) == 0


def test_token_uploads_only_as_its_own_runner(service: Service) -> None:
    token_a, token_b = service.token("runner-a"), service.token("runner-b")
    assert post(service, make_bundle(runner="runner-b"), token_a).status_code == 403
    owned = make_bundle(runner=None)
    assert post(service, owned, token_a).status_code == 201
    # runner-b cannot claim (or even re-confirm) a run that runner-a uploaded: the same run id
    # from runner-b is runner-b's own run, under a key of its own (issue 41 item 14).
    resp = post(service, owned, token_b)
    assert resp.status_code == 201 and resp.json()["key"] != owned["run"]["id"], resp.text
    assert count_runs(service) == 2
    got = requests.get(f"{service.url}/api/v1/runs/{owned['run']['id']}", timeout=10).json()
    assert got["run"]["runner"] == "runner-a"


def test_malformed_bundles_are_400_and_write_nothing(service: Service) -> None:
    token = service.token("mi300x-01")
    assert post(service, b"{not json", token).status_code == 400
    assert post(service, b"[1, 2]", token).status_code == 400
    broken = make_bundle()
    del broken["stack"]["digest"]
    resp = post(service, broken, token)
    assert resp.status_code == 400
    assert "stack.digest" in resp.json()["error"]
    nan = make_bundle()
    nan["results"][0]["samples"]["time_ms"][3] = "fast"
    assert "samples" in post(service, nan, token).json()["error"]
    assert count_runs(service) == 0


def test_oversized_bundle_is_413(service: Service) -> None:
    token = service.token("mi300x-01")
    big = make_bundle()
    big["results"][0]["samples"]["time_ms"] = [0.123456789] * (TEST_LIMIT_BYTES // 8)
    body = json.dumps(big).encode()
    assert len(body) > TEST_LIMIT_BYTES
    resp = post(service, body, token)
    assert resp.status_code == 413
    assert str(TEST_LIMIT_BYTES) in resp.json()["error"]
    # A gzip body that would inflate past the limit is refused too, not inflated into memory.
    bomb = requests.post(
        f"{service.url}/api/v1/runs",
        data=gzip.compress(body),
        headers={"Authorization": f"Bearer {token}", "Content-Encoding": "gzip"},
        timeout=30,
    )
    assert bomb.status_code == 413
    assert count_runs(service) == 0


def test_gzip_body_is_accepted(service: Service) -> None:
    token = service.token("mi300x-01")
    bundle = make_bundle()
    resp = requests.post(
        f"{service.url}/api/v1/runs",
        data=gzip.compress(json.dumps(bundle).encode()),
        headers={"Authorization": f"Bearer {token}", "Content-Encoding": "gzip"},
        timeout=30,
    )
    assert resp.status_code == 201, resp.text


def test_series_healthz_and_openapi(service: Service) -> None:
    token = service.token("mi300x-01")
    first, second = make_bundle(), make_bundle()
    for b in (first, second):
        assert post(service, b, token).status_code == 201
    case_key = first["results"][0]["case_key"]
    digest = first["stack"]["digest"]
    series = requests.get(
        f"{service.url}/api/v1/series", params={"case": case_key, "stack": digest}, timeout=10
    ).json()
    # Same started_at (one template), so the run id (time-sortable) orders them.
    assert [p["run_id"] for p in series["points"]] == sorted([first["run"]["id"], second["run"]["id"]])
    assert series["points"][0]["value"] == first["results"][0]["metrics"]["p50_ms"]
    assert requests.get(f"{service.url}/api/v1/series", timeout=10).status_code == 400
    missing = requests.get(f"{service.url}/api/v1/series", params={"case": "x", "stack": digest}, timeout=10)
    assert missing.status_code == 404
    assert requests.get(f"{service.url}/api/v1/runs/nope", timeout=10).status_code == 404
    assert requests.get(f"{service.url}/healthz", timeout=10).json()["status"] == "ok"
    doc = requests.get(f"{service.url}/api/v1/openapi.json", timeout=10).json()
    assert doc["openapi"].startswith("3.")
    assert {"/api/v1/runs", "/api/v1/runs/{run_id}", "/api/v1/series", "/healthz"} <= set(doc["paths"])
    assert set(doc["paths"]["/api/v1/runs"]["post"]["responses"]) >= {
        "200",
        "201",
        "400",
        "401",
        "403",
        "409",
        "413",
    }


def test_run_list_pages(service: Service) -> None:
    token = service.token("mi300x-01")
    ids = sorted(make_bundle()["run"]["id"] for _ in range(3))
    for run_id in ids:
        assert post(service, make_bundle(run_id=run_id), token).status_code == 201
    page = requests.get(f"{service.url}/api/v1/runs", params={"limit": 2}, timeout=10).json()
    assert [r["id"] for r in page["runs"]] == ids[::-1][:2]
    rest = requests.get(f"{service.url}/api/v1/runs", params={"limit": 2, "before": page["next"]}, timeout=10)
    assert [r["id"] for r in rest.json()["runs"]] == ids[:1]
    assert rest.json()["next"] is None
    assert requests.get(f"{service.url}/api/v1/runs", params={"limit": 0}, timeout=10).status_code == 400
