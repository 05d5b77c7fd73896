"""Issue #13's numbered findings, each reproduced against the real service and kept fixed.

Every test runs on SQLite and PostgreSQL (the `db_url` fixture). Bundles are the committed real H200
runs (trimmed) or the realistic template of ingest_bundles.py.
"""

from __future__ import annotations

import copy
import gzip
import json
import os
import shutil
import socket
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import requests
from ingest_bundles import make_bundle
from ingest_server import TEST_LIMIT_BYTES, Service, start_server, stop_server
from real_bundles import real_bundles
from sqlalchemy import func, select, update
from werkzeug.serving import make_server

from regress.bundle import BundleError, validate_bundle
from regress.cli import main
from regress.server.tokens import create_token
from regress.site import build_site
from regress.site.writer import MANIFEST_VERSION
from regress.stack import Fingerprint, write_pin
from regress.store import Result, Run, Sample, Stack
from regress.store.repo import export_bundle, import_bundle, reap_stale_runs
from regress.upload import RetryPolicy, flush_spool, spooled_files, upload_bundles

FAST = RetryPolicy(attempts=2, base_s=0.01, cap_s=0.02, timeout_s=10)


def post(service: Service, body: Any, token: str, **headers: str) -> requests.Response:
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    hdrs = {"Authorization": f"Bearer {token}", "Content-Type": "application/json", **headers}
    return requests.post(f"{service.url}/api/v1/runs", data=data, headers=hdrs, timeout=60)


def real() -> dict[str, Any]:
    return real_bundles()[0]


def _set(bundle: dict[str, Any], path: str, value: Any) -> dict[str, Any]:
    out = copy.deepcopy(bundle)
    parts: list[Any] = [int(p) if p.isdigit() else p for p in path.split(".")]
    target = out
    for part in parts[:-1]:
        target = target[part]
    target[parts[-1]] = value
    return out


def _deep(n: int) -> str:
    return "[" * n + "]" * n


# ---- 1. every variant the hostile test saw answer 500 now answers 400, naming the field ----------

FINDING_1 = [
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


@pytest.mark.parametrize(("path", "value"), FINDING_1, ids=[f"{p}={str(v)[:12]!r}" for p, v in FINDING_1])
def test_1_bad_values_are_400_naming_the_field(service: Service, path: str, value: Any) -> None:
    token = service.token("h200-01")
    original = real()
    bad = _set(original, path, value)
    bad["run"]["id"] = original["run"]["id"] + "b"
    resp = post(service, bad, token)
    assert resp.status_code == 400, resp.text
    assert path.split(".")[-1] in resp.json()["error"]
    # Under the id of a stored run: still 400, never 200 "identical".
    assert post(service, original, token).status_code == 201
    same_id = _set(original, path, value)
    assert post(service, same_id, token).status_code == 400


def test_1_deep_nesting_and_repeated_case_are_400(service: Service) -> None:
    token = service.token("h200-01")
    body = json.dumps(_set(real(), "run.host.x", "@")).replace('"@"', _deep(100_000)).encode()
    resp = post(service, body, token)
    assert resp.status_code == 400 and "nest" in resp.json()["error"]
    twice = real()
    twice["results"].append(copy.deepcopy(twice["results"][0]))
    resp = post(service, twice, token)
    assert resp.status_code == 400 and "repeats the case" in resp.json()["error"]


# ---- 2. accepted runs never break readers ----------------------------------------------------------


def test_2_odd_host_and_summary_are_refused(service: Service) -> None:
    token = service.token("h200-01")
    assert post(service, _set(real(), "run.host", "x"), token).status_code == 400
    assert post(service, _set(real(), "run.summary", -1), token).status_code == 400


def test_2_readers_survive_odd_stored_runs(service: Service, db_url: str, tmp_path: Path) -> None:
    bundle = real()
    assert post(service, bundle, service.token("h200-01")).status_code == 201
    with service.store.transaction() as session:  # what an older server let in
        session.execute(
            update(Run).where(Run.id == bundle["run"]["id"]).values(host="x", summary=-1, gpu_state=[1])
        )
    build_site(service.store, tmp_path / "site")
    assert main(["runs", "list", "--db", db_url, "--json"]) == 0
    assert main(["runs", "list", "--db", db_url]) == 0
    assert main(["runs", "show", bundle["run"]["id"], "--db", db_url]) == 0
    assert main(["export", "--db", db_url, "-o", str(tmp_path / "x.jsonl")]) == 0


# ---- 3. one poison bundle never blocks the spool ------------------------------------------------


@pytest.fixture
def poisoned(db_url: str) -> Iterator[tuple[str, str]]:
    """The real service behind a fault injector that answers 500 to one run id, every time."""
    server, thread, app = start_server(db_url)
    poison = "poison00poison00"

    def injector(environ: dict[str, Any], start_response: Any) -> Any:
        body = environ["wsgi.input"].read(int(environ.get("CONTENT_LENGTH") or 0))
        raw = gzip.decompress(body) if environ.get("HTTP_CONTENT_ENCODING") == "gzip" else body
        if poison.encode() in raw:
            start_response("500 INTERNAL SERVER ERROR", [("Content-Type", "application/json")])
            return [b'{"error": "injected fault", "status": 500}']
        import io

        environ["wsgi.input"] = io.BytesIO(body)
        return app(environ, start_response)

    front = make_server("127.0.0.1", 0, injector, threaded=True)
    front_thread = threading.Thread(target=front.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    front_thread.start()
    try:
        yield f"http://127.0.0.1:{front.server_port}", poison
    finally:
        front.shutdown()
        front.server_close()
        stop_server(server, thread, app)


def test_3_poison_bundle_does_not_block_the_others(
    poisoned: tuple[str, str], db_url: str, tmp_path: Path
) -> None:
    from regress.store.repo import open_store

    url, poison = poisoned
    store = open_store(db_url)
    token = create_token(store, "h200-01")[1]
    spool = tmp_path / "spool"
    bad, good, later = make_bundle(poison), make_bundle(), make_bundle()
    paths = [p for b in (bad, good) for p in [tmp_path / f"{b['run']['id']}.json"]]
    for b, p in zip((bad, good), paths, strict=True):
        p.write_text(json.dumps(b))
    report = upload_bundles(paths, url, token, spool, policy=FAST)
    assert [o.state for o in report.outcomes] == ["spooled", "stored"]
    assert [p.stem for p in spooled_files(spool)] == [poison]
    # The next night: the poison bundle is inside its backoff, the new one goes straight out.
    (tmp_path / "later.json").write_text(json.dumps(later))
    assert upload_bundles([tmp_path / "later.json"], url, token, spool, policy=FAST).ok
    waiting = flush_spool(url, token, spool, policy=FAST)
    assert [o.state for o in waiting.outcomes] == ["spooled"] and "waiting" in waiting.outcomes[0].message
    forced = flush_spool(url, token, spool, policy=FAST, force=True)  # `regress upload --flush`
    assert [(o.run_id, o.state) for o in forced.outcomes] == [(poison, "spooled")]
    assert "try 2" in forced.outcomes[0].message
    with store.reader() as session:
        assert sorted(session.scalars(select(Run.id))) == sorted([good["run"]["id"], later["run"]["id"]])
    store.engine.dispose()


def test_3_refused_bundle_moves_to_rejected_with_the_reason(service: Service, tmp_path: Path) -> None:
    token = service.token("h200-01")
    spool = tmp_path / "spool"
    good = make_bundle()
    stored = make_bundle()
    assert post(service, stored, token).status_code == 201
    clash = copy.deepcopy(stored)
    clash["results"][0]["metrics"]["p50_ms"] += 1.0
    paths = []
    for i, b in enumerate((clash, good)):
        paths.append(tmp_path / f"{i}.json")
        paths[-1].write_text(json.dumps(b))
    report = upload_bundles(paths, service.url, token, spool, policy=FAST)
    assert [(o.state, o.status) for o in report.outcomes] == [("rejected", 409), ("stored", 201)]
    reason = (spool / "rejected" / f"{stored['run']['id']}.reason.txt").read_text()
    assert reason.startswith("HTTP 409") and "different content" in reason
    assert spooled_files(spool) == []


def test_3_upload_checks_the_schema_before_sending(service: Service, tmp_path: Path) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps(_set(real(), "run.backend", "x" * 17)))
    report = upload_bundles([bad], service.url, service.token("h200-01"), tmp_path / "spool", policy=FAST)
    assert [o.state for o in report.outcomes] == ["invalid"]
    assert "bundle.run.backend" in report.outcomes[0].message
    with service.store.reader() as session:
        assert session.scalar(select(func.count()).select_from(Run)) == 0


# ---- 4. database down: 503 + Retry-After everywhere, token lookup included -----------------------


def test_4_database_down_is_503_with_retry_after(db_url: str, tmp_path: Path) -> None:
    server, thread, app = start_server(db_url)
    url = f"http://127.0.0.1:{server.server_port}"
    try:
        token = create_token(app.extensions["regress.store"], "h200-01")[1]
        assert requests.get(f"{url}/healthz", timeout=10).json()["database"] == "ok"
        app.extensions["regress.store"].engine.dispose()
        _take_database_away(db_url)
        auth = {"Authorization": f"Bearer {token}"}
        answers = [
            requests.post(f"{url}/api/v1/runs", json=make_bundle(), headers=auth, timeout=30),
            requests.get(f"{url}/api/v1/runs", timeout=30),
            requests.get(f"{url}/api/v1/runs/0123456789abcdef", timeout=30),
            requests.get(f"{url}/api/v1/series", params={"case": "a" * 32, "stack": "b" * 64}, timeout=30),
        ]
        for resp in answers:
            assert resp.status_code == 503, (resp.request.url, resp.text)
            assert int(resp.headers["Retry-After"]) > 0
            assert "database unavailable" in resp.json()["error"]
        health = requests.get(f"{url}/healthz", timeout=30)
        assert health.status_code == 503 and health.json()["status"] == "unavailable"
        assert health.json()["database"]
    finally:
        stop_server(server, thread, app)


def _take_database_away(db_url: str) -> None:
    if db_url.startswith("sqlite"):
        shutil.rmtree(Path(db_url.removeprefix("sqlite:///")).parent)  # "unable to open database file"
        return
    import psycopg

    admin, name = os.environ["REGRESS_TEST_POSTGRES_URL"], db_url.rpartition("/")[2]
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE "{name}" WITH (FORCE)')


# ---- 5. token revoke is unambiguous ------------------------------------------------------------


def test_5_token_revoke_by_id_or_runner(db_url: str, capsys: pytest.CaptureFixture[str]) -> None:
    from regress.server.tokens import list_tokens
    from regress.store.repo import open_store

    store = open_store(db_url)
    alpha = create_token(store, "alpha")[0]
    one = create_token(store, str(alpha.id))[0]  # a runner named like alpha's token id
    assert main(["token", "revoke", str(alpha.id), "--db", db_url]) == 2  # bare argument: usage error
    assert main(["token", "revoke", "--id", str(alpha.id), "--runner", "x", "--db", db_url]) == 2
    assert main(["token", "revoke", "--runner", str(alpha.id), "--db", db_url]) == 0
    revoked = {t.id for t in list_tokens(store) if t.revoked_at is not None}
    assert revoked == {one.id}
    assert main(["token", "revoke", "--id", str(alpha.id), "--db", db_url]) == 0
    assert {t.id for t in list_tokens(store) if t.revoked_at is not None} == {one.id, alpha.id}
    store.engine.dispose()


# ---- 6. the site never deletes outside its output folder ----------------------------------------


def test_6_site_manifest_cannot_delete_outside_the_output(service: Service, tmp_path: Path) -> None:
    out = tmp_path / "site"
    build_site(service.store, out)
    victim = tmp_path / "victim.txt"
    victim.write_text("keep me")
    manifest = out / ".regress-site" / "manifest.json"
    doc = json.loads(manifest.read_text())
    assert doc["version"] == MANIFEST_VERSION
    doc["pages"]["../victim.txt"] = ["k", "d"]
    doc["pages"][str(victim)] = ["k", "d"]
    manifest.write_text(json.dumps(doc))
    build_site(service.store, out)
    assert victim.read_text() == "keep me"


# ---- 7. the smaller ones -----------------------------------------------------------------------


def test_7_resend_with_integer_samples_is_identical(service: Service) -> None:
    token = service.token("h200-01")
    bundle = make_bundle()
    bundle["results"][0]["samples"]["time_ms"] = [1, 2, 3]
    bundle["results"][0]["metrics"]["p50_ms"] = 2
    assert post(service, bundle, token).status_code == 201
    assert post(service, bundle, token).status_code == 200


def test_7_uploaded_running_run_is_not_reaped(service: Service) -> None:
    bundle = make_bundle()
    bundle["run"].update(status="running", hostname=socket.gethostname(), finished_at=None)
    assert post(service, bundle, service.token("h200-01")).status_code == 201
    assert reap_stale_runs(service.store) == []
    with service.store.reader() as session:
        assert session.get(Run, bundle["run"]["id"]).status == "running"


def test_7_stack_name_comes_from_the_pin(
    service: Service, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    token = service.token("h200-01")
    fp = Fingerprint(keys={k: f"value-{k}" for k in _all_keys()})
    monkeypatch.setenv("REGRESS_STACKS_DIR", str(tmp_path / "stacks"))
    first = make_bundle()
    first["stack"].update(digest=fp.digest, keys=fp.keys, name="whoever-came-first")
    assert post(service, first, token).status_code == 201
    with service.store.reader() as session:
        assert session.scalars(select(Stack.name).where(Stack.digest == fp.digest)).one() is None
    write_pin("team-pin", fp, stacks_dir=tmp_path / "stacks")
    other_fp_bundle = make_bundle()
    other_fp_bundle["stack"].update(digest=fp.digest, keys=fp.keys, name="yet-another")
    assert post(service, other_fp_bundle, token).status_code == 201
    with service.store.reader() as session:
        assert session.scalars(select(Stack.name).where(Stack.digest == fp.digest)).one() == "team-pin"


def _all_keys() -> tuple[str, ...]:
    from regress.stack import HASHED_KEYS, PINNED_KEYS

    return (*HASHED_KEYS, *PINNED_KEYS)


def test_7_chunked_body_over_the_limit_is_413(service: Service) -> None:
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


def test_7_gzip_with_several_members_is_read_whole(service: Service) -> None:
    token = service.token("h200-01")
    raw = json.dumps(make_bundle()).encode()
    body = gzip.compress(raw[:500]) + gzip.compress(raw[500:])
    resp = post(service, body, token, **{"Content-Encoding": "gzip"})
    assert resp.status_code == 201, resp.text
    truncated = gzip.compress(raw)[:-20]
    assert post(service, truncated, token, **{"Content-Encoding": "gzip"}).status_code == 400


# ---- 8. bulk ingest stores exactly what the row-by-row path stored -------------------------------


def test_8_bulk_and_row_by_row_store_the_same(store: Any) -> None:
    bundles = real_bundles(results=40, samples=50)
    for i, bundle in enumerate(bundles):
        twin = copy.deepcopy(bundle)
        twin["run"]["id"] = bundle["run"]["id"][:-1] + "x"
        with store.transaction() as session:
            import_bundle(session, bundle, row_by_row=i % 2 == 0)
        with store.transaction() as session:
            import_bundle(session, twin, row_by_row=i % 2 == 1)
        with store.reader() as session:
            a, b = export_bundle(session, bundle["run"]["id"]), export_bundle(session, twin["run"]["id"])
        b["run"]["id"] = a["run"]["id"]
        assert a == b
        assert len(a["results"]) == len(bundle["results"])
        validate_bundle(a)
    with store.reader() as session:
        assert session.scalar(select(func.count()).select_from(Sample)) == 2 * sum(
            len(r["samples"]) for b in bundles for r in b["results"]
        )
        assert session.scalar(select(func.count()).select_from(Result)) == 2 * sum(
            len(b["results"]) for b in bundles
        )


def test_validate_bundle_error_is_a_user_error() -> None:
    from regress.errors import UserError

    with pytest.raises(BundleError, match=r"bundle\.run\.started_at") as caught:
        validate_bundle(_set(real(), "run.started_at", "yesterday"))
    assert isinstance(caught.value, UserError)


def test_openapi_request_body_is_the_bundle_schema() -> None:
    from regress.bundle import bundle_schema
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
