"""Issue #24's numbered defects (hostile inputs, part 2), each reproduced and kept fixed.

Every test that touches the store runs on SQLite and PostgreSQL (the `db_url` fixture), against the
real service on 127.0.0.1 or the real CLI.
"""

from __future__ import annotations

import copy
import itertools
import json
from typing import Any

import pytest
import requests
from ingest_server import Service
from real_bundles import real_bundles

from regress import bundle as bundle_module
from regress.bundle import BundleError, validate_bundle
from regress.cli import main


def post(service: Service, body: Any, token: str) -> requests.Response:
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    hdrs = {"Authorization": f"Bearer {token}", "Content-Type": "application/json"}
    return requests.post(f"{service.url}/api/v1/runs", data=data, headers=hdrs, timeout=60)


def real() -> dict[str, Any]:
    """A committed real bundle that declares no drift from its pin (some were run with
    --allow-drift; which file sorts first changes as results are committed)."""
    return next(b for b in real_bundles() if not (b["run"].get("host") or {}).get("drift"))


# ---- 1. an integer literal past Python's 4,300-digit limit is a 400 naming its path ----------


@pytest.mark.parametrize(
    "where", ["run.exit_code", "run.summary.n", "results.0.samples.ms.0", "results.0.params.b"]
)
@pytest.mark.parametrize("sign", ["", "-"])
def test_1_huge_integer_literal_is_400_naming_the_field(service: Service, where: str, sign: str) -> None:
    bundle = real()
    parts: list[Any] = [int(p) if p.isdigit() else p for p in where.split(".")]
    target: Any = bundle
    bundle["results"][0]["samples"]["ms"] = [1.0]
    for part in parts[:-1]:
        target = target.setdefault(part, {}) if isinstance(target, dict) else target[part]
    target[parts[-1]] = "@HUGE@"
    body = json.dumps(bundle).replace('"@HUGE@"', sign + "9" * 5000).encode()
    resp = post(service, body, service.token("h200-01"))
    assert resp.status_code == 400, resp.text
    assert str(parts[-1]) in resp.json()["error"] and "5000 digits" in resp.json()["error"]


def test_1_huge_integer_in_a_bundle_file_is_one_line(tmp_path: Any, db_url: str, capsys: Any) -> None:
    path = tmp_path / "huge.json"
    bundle = real()
    bundle["run"]["exit_code"] = "@HUGE@"
    path.write_text(json.dumps(bundle).replace('"@HUGE@"', "1" * 4301))
    assert main(["import", "--db", db_url, str(path)]) != 0
    err = capsys.readouterr().err
    assert "bundle.run.exit_code" in err and "Traceback" not in err


# ---- 2. a whole float where an integer is stored is refused on both databases -----------------


@pytest.mark.parametrize(
    ("path", "value"),
    [
        ("params.b", 1.0),
        ("params.sq", -0.0),
        ("params.d", 128.0),
        ("run.exit_code", 0.0),
        ("stack.schema_version", 1.0),
    ],
)
def test_2_whole_float_in_an_integer_column_is_400(service: Service, path: str, value: float) -> None:
    bundle = real()
    if path.startswith("params."):
        bundle["results"][0]["params"][path.split(".")[1]] = value
    else:
        section, field = path.split(".")
        bundle[section][field] = value
    resp = post(service, bundle, service.token("h200-01"))
    assert resp.status_code == 400, resp.text
    assert path.split(".")[-1] in resp.json()["error"]
    assert "must be integer" in resp.json()["error"]


def test_2_whole_float_import_is_one_line_not_a_traceback(tmp_path: Any, db_url: str, capsys: Any) -> None:
    bundle = real()
    bundle["results"][0]["params"]["b"] = 1.0
    path = tmp_path / "float.json"
    path.write_text(json.dumps(bundle))
    assert main(["import", "--db", db_url, str(path)]) != 0
    err = capsys.readouterr().err
    assert "params.b" in err and "Traceback" not in err


# ---- 3. NUL in any GET parameter is a 400, never a driver error -------------------------------


@pytest.mark.parametrize(
    "path",
    [
        "/api/v1/runs?runner=%00",
        "/api/v1/runs?stack=a%00b",
        "/api/v1/runs?status=%00",
        "/api/v1/runs?before=x%00",
        "/api/v1/runs/abc%00def",
        "/api/v1/series?case=%00x&stack=" + "0" * 64,
        "/api/v1/series?case=x&stack=%00",
    ],
)
def test_3_nul_in_get_parameters_is_400(service: Service, path: str) -> None:
    resp = requests.get(service.url + path, timeout=30)
    assert resp.status_code == 400, resp.text
    assert "NUL" in resp.json()["error"]


# ---- 18 (part). repeated keys and Unicode digits in ?limit= ------------------------------------


def test_18_repeated_json_key_is_400_naming_the_object(service: Service) -> None:
    bundle = real()
    text = json.dumps(bundle)
    forged = text.replace('"run": {', '"run": {"id": "aaaaaaaaaaaaaaaaaaaa", ', 1)
    assert forged != text
    resp = post(service, forged.encode(), service.token("h200-01"))
    assert resp.status_code == 400, resp.text
    assert "bundle.run" in resp.json()["error"] and "'id' twice" in resp.json()["error"]


def test_18_repeated_key_in_a_file() -> None:
    with pytest.raises(BundleError, match=r"bundle\.results\[0\]\.metrics: names the key 'x' twice"):
        bundle = real()
        bundle["results"][0]["metrics"] = {"x": 1}
        text = json.dumps(bundle).replace('"metrics": {"x": 1}', '"metrics": {"x": 1, "x": 2}')
        validate_bundle(bundle_module.loads_bundle(text))


@pytest.mark.parametrize("limit", ["\uff11\uff12", "\u0661", "1" * 5000, "+5", " 5", "0"])
def test_18_limit_takes_ascii_digits_only(service: Service, limit: str) -> None:
    resp = requests.get(f"{service.url}/api/v1/runs", params={"limit": limit}, timeout=30)
    assert resp.status_code == 400, resp.text


def test_committed_bundles_still_valid() -> None:
    for bundle in real_bundles():
        validate_bundle(bundle_module.loads_bundle(json.dumps(copy.deepcopy(bundle))))


# ---- 5. shared rows are facts, not first come ---------------------------------------------------


def test_5_a_digest_that_is_not_the_keys_is_400_naming_both(service: Service) -> None:
    from regress.stack_keys import HASHED_KEYS, stack_digest

    bundle = real()
    genuine = bundle["stack"]["digest"]
    bundle["stack"]["keys"]["driver"] = "EVIL-KEYS"
    resp = post(service, bundle, service.token("attacker"))
    assert resp.status_code == 400, resp.text
    forged = stack_digest({k: bundle["stack"]["keys"][k] for k in HASHED_KEYS})
    assert "bundle.stack.digest" in resp.json()["error"]
    assert genuine in resp.json()["error"] and forged in resp.json()["error"]


def test_5_a_pinned_stack_takes_its_pins_keys_only(service: Service) -> None:
    # the committed H200 runs: their digest is the shipped h200 pin's; one that declared no drift
    bundle = next(b for b in real_bundles() if not (b["run"].get("host") or {}).get("drift"))
    bundle["stack"]["keys"]["torch"] = "EVIL 9.9"  # not hashed: the digest still matches
    resp = post(service, bundle, service.token("attacker"))
    assert resp.status_code == 409, resp.text
    assert "bundle.stack.keys.torch" in resp.json()["error"]
    genuine = real()
    assert post(service, genuine, service.token("h200-01")).status_code == 201
    got = requests.get(f"{service.url}/api/v1/runs/{genuine['run']['id']}", timeout=30).json()
    assert got["stack"]["keys"] == genuine["stack"]["keys"]


def test_5_a_run_that_declared_its_drift_is_stored_under_the_pins_keys(service: Service) -> None:
    """A pinned, unhashed key may drift on a run made with --allow-drift (run.host.drift says so):
    the committed H200 gate-calibration and hang-drill bundles ran on a newer os_kernel than the
    pin's. The run is stored; the stack row keeps the pin's value, so a genuine run reads back as
    pinned; the same drift undeclared is still a conflict."""
    from real_bundles import RESULTS_DIR, _trim

    from regress.store.base import new_run_id

    path = sorted((RESULTS_DIR / "h200-hang-drill").glob("*.json"))[0]
    drifted = _trim(json.loads(path.read_text()), 3, 5)
    drifted["run"]["runner"] = None
    assert drifted["run"]["host"]["drift"], "the committed drill bundle records its drift"
    undeclared = copy.deepcopy(drifted)
    undeclared["run"]["host"].pop("drift")
    undeclared["run"]["id"] = new_run_id()
    resp = post(service, undeclared, service.token("h200-01"))
    assert resp.status_code == 409 and "run.host.drift" in resp.json()["error"], resp.text
    assert post(service, drifted, service.token("h200-01")).status_code == 201
    # Its identical re-send (a lost answer, 20 racing uploads) is "identical", not 409 at
    # bundle.stack.keys.os_kernel (the stored row holds the pin's value).
    again = post(service, drifted, service.token("h200-01"))
    assert again.status_code == 200, again.text
    changed = copy.deepcopy(drifted)
    changed["run"]["host"]["drift"] = ["another drift"]
    assert post(service, changed, service.token("h200-01")).status_code == 409
    genuine = real()
    assert post(service, genuine, service.token("h200-01")).status_code == 201
    for run in (drifted, genuine):
        got = requests.get(f"{service.url}/api/v1/runs/{run['run']['id']}", timeout=30).json()
        assert got["stack"]["keys"] == genuine["stack"]["keys"]


def test_5_an_unpinned_stack_with_other_keys_is_409(service: Service) -> None:
    from ingest_bundles import make_bundle

    first = make_bundle()
    assert post(service, first, service.token("a")).status_code == 201
    other = make_bundle()
    other["stack"]["keys"]["extra"] = "x"  # not hashed, not pinned: only the stored row says
    resp = post(service, other, service.token("b"))
    assert resp.status_code == 409 and "bundle.stack.keys.extra" in resp.json()["error"], resp.text


@pytest.mark.parametrize(
    ("field", "value"),
    [("inject", {"slowdown": 30}), ("flags", ["-O0"]), ("compiler", "evil"), ("stats", {"max_registers": 1})],
)
def test_5_a_build_whose_facts_differ_is_409(service: Service, field: str, value: Any) -> None:
    bundles = [b for b in real_bundles() if b.get("build")]
    first, second = next(  # two committed runs of one artifact
        (a, b)
        for a, b in itertools.combinations(bundles, 2)
        if a["build"]["artifact_hash"] == b["build"]["artifact_hash"]
    )
    assert first["build"]["artifact_hash"] == second["build"]["artifact_hash"]
    evil = copy.deepcopy(first)
    evil["build"][field] = value
    assert post(service, evil, service.token("attacker")).status_code == 201  # the first of its kind...
    resp = post(service, second, service.token("h200-01"))
    assert resp.status_code == 409, resp.text  # ...cannot speak for the genuine run
    assert f"bundle.build.{field}" in resp.json()["error"]


def test_5_token_stacks_limit_where_a_runner_uploads(service: Service, db_url: str, capsys: Any) -> None:
    assert main(["token", "create", "mi300x-01", "--stacks", "mi300x-rocm6.4", "--db", db_url]) == 0
    limited = capsys.readouterr().out.strip()
    resp = post(service, real(), limited)  # an H200 run: not this token's stack
    assert resp.status_code == 403 and "may not upload onto stack" in resp.json()["error"], resp.text
    assert main(["token", "create", "h200-01", "--stacks", "h200-cuda13.0", "--db", db_url]) == 0
    allowed = capsys.readouterr().out.strip()
    assert post(service, real(), allowed).status_code == 201


# ---- 6. no run from the future; an admin can remove a run -------------------------------------


@pytest.mark.parametrize("field", ["started_at", "finished_at"])
def test_6_a_run_from_the_future_is_400(service: Service, field: str) -> None:
    bundle = real()
    bundle["run"].update(started_at="2026-01-01T00:00:00", finished_at=None)
    bundle["run"][field] = "2999-12-30T00:00:00"
    resp = post(service, bundle, service.token("attacker"))
    assert resp.status_code == 400 and f"bundle.run.{field}" in resp.json()["error"], resp.text
    assert "later than the server's clock" in resp.json()["error"]


def test_6_runs_delete_removes_a_run_and_what_refers_to_it(service: Service, db_url: str) -> None:
    from sqlalchemy import func, select

    from regress.store import Result, Run, Sample

    bundle = real()
    assert post(service, bundle, service.token("attacker")).status_code == 201
    keep = real()
    assert post(service, keep, service.token("h200-01")).status_code == 201
    run_id = bundle["run"]["id"]
    assert main(["runs", "delete", run_id[:8], "--yes", "--db", db_url]) == 2  # a prefix is not enough
    assert main(["runs", "delete", run_id, "--yes", "--db", db_url]) == 0
    with service.store.reader() as s:
        assert s.get(Run, run_id) is None and s.get(Run, keep["run"]["id"]) is not None
        assert s.scalar(select(func.count()).select_from(Result)) == len(keep["results"])
        assert s.scalar(select(func.count()).select_from(Sample)) == sum(
            len(r["samples"]) for r in keep["results"]
        )
    assert requests.get(f"{service.url}/api/v1/runs/{run_id}", timeout=30).status_code == 404


# ---- 7. idempotency compares the whole canonical bundle ----------------------------------------

CHANGES = [
    ("run.is_drill", True),
    ("run.started_at", "2026-11-01T00:00:00"),
    ("run.kernel_commit", "f" * 40),
    ("run.summary", {"failed": 0, "forged": 1}),
    ("run.message", "changed"),
    ("run.trigger", "forged"),
    ("run.host", {"forged": 1}),
    ("build.flags", ["-O0"]),
    ("results.0.name", "renamed"),
    ("results.0.device", {"index": 7}),
    ("results.0.message", "changed"),
    ("results.0.metrics.extra", 1.0),
]


@pytest.mark.parametrize(("path", "value"), CHANGES, ids=[p for p, _ in CHANGES])
def test_7_any_change_under_a_stored_id_is_409_naming_the_path(
    service: Service, path: str, value: Any
) -> None:
    token = service.token("h200-01")
    original = real()
    assert post(service, original, token).status_code == 201
    changed = copy.deepcopy(original)
    parts: list[Any] = [int(p) if p.isdigit() else p for p in path.split(".")]
    target: Any = changed
    for part in parts[:-1]:
        target = target[part]
    target[parts[-1]] = value
    changed["results"][0].pop("case_key", None)  # derived from the name: checked on its own (18)
    resp = post(service, changed, token)
    assert resp.status_code == 409, resp.text
    assert "bundle." + path.split(".")[0] in resp.json()["error"]
    assert post(service, original, token).status_code == 200  # the same again: identical


@pytest.mark.slow  # 20 threads x every committed bundle
def test_7_twenty_parallel_uploads_of_each_committed_bundle_store_one_run(service: Service) -> None:
    """The race of docs/reliability.md: 20 threads send one bundle at once, for every committed
    real bundle. One stores it (201), the others are told it is identical (200). A run that
    declared drift from its pin got 1 x 201 and 19 x 409 (its stored stack holds the pin's keys)."""
    import threading

    token = service.token("h200-01")
    for bundle in real_bundles():
        body = json.dumps(bundle).encode()
        barrier = threading.Barrier(20)
        codes: list[int] = []

        def send(body: bytes = body, barrier: threading.Barrier = barrier, codes: list[int] = codes) -> None:
            barrier.wait(timeout=60)
            codes.append(post(service, body, token).status_code)

        threads = [threading.Thread(target=send) for _ in range(20)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=120)
        assert sorted(codes) == [200] * 19 + [201], (bundle["run"]["id"], sorted(codes))


def test_7_equal_content_written_differently_is_identical(service: Service) -> None:
    token = service.token("h200-01")
    original = real()
    assert post(service, original, token).status_code == 201
    same = copy.deepcopy(original)
    same["results"].reverse()  # order is not content
    same["run"]["started_at"] = original["run"]["started_at"] + "+00:00"  # the same instant
    assert post(service, same, token).status_code == 200


# ---- 18 (part). finished before started; a case_key that is not the case's ----------------------


def test_18_finished_before_started_is_400(service: Service) -> None:
    bundle = real()
    bundle["run"].update(started_at="2026-11-02T00:00:00", finished_at="2026-11-01T00:00:00")
    resp = post(service, bundle, service.token("h200-01"))
    assert resp.status_code == 400 and "bundle.run.finished_at" in resp.json()["error"], resp.text


def test_18_a_forged_case_key_is_400(service: Service) -> None:
    bundle = real()
    bundle["results"][0]["case_key"] = "0" * 32
    resp = post(service, bundle, service.token("h200-01"))
    assert resp.status_code == 400 and "bundle.results[0].case_key" in resp.json()["error"], resp.text


# ---- 8/9 at the door: short fields take no control character ----------------------------------


@pytest.mark.parametrize(
    ("path", "value"),
    [
        ("results.0.name", "a\nb"),
        ("run.trigger", "x\tfake"),
        ("run.backend", "\x1b[2J"),
        ("stack.name", "\x7f"),
    ],
)
def test_8_9_control_characters_in_short_fields_are_400(service: Service, path: str, value: str) -> None:
    bundle = real()
    section, *rest = path.split(".")
    target: Any = bundle[section]
    for part in rest[:-1]:
        target = target[int(part)] if part.isdigit() else target[part]
    target[rest[-1]] = value
    target.pop("case_key", None)
    resp = post(service, bundle, service.token("h200-01"))
    assert resp.status_code == 400, resp.text
    assert rest[-1] in resp.json()["error"] and "control character" in resp.json()["error"]


def test_8_9_messages_may_hold_newlines_and_tabs(service: Service) -> None:
    bundle = real()
    bundle["run"]["message"] = "line one\n\tline two\r\n\x1b[0m"  # a log: readers escape it
    assert post(service, bundle, service.token("h200-01")).status_code == 201


# ---- 11, 12. times a reader cannot show and floats it cannot square are refused at the door ---


@pytest.mark.parametrize(
    ("where", "value"),
    [("before", 1e300), ("before", -1e12), ("after", "x"), ("workers.worker0.before", 4e10)],
)
def test_11_gpu_state_time_unix_out_of_range_is_400(service: Service, where: str, value: Any) -> None:
    bundle = real()
    target = bundle["run"]["gpu_state"]
    for part in where.split("."):
        target = target.setdefault(part, {})
    target["time_unix"] = value
    resp = post(service, bundle, service.token("h200-01"))
    assert resp.status_code == 400, resp.text
    assert f"bundle.run.gpu_state.{where}.time_unix" in resp.json()["error"]


@pytest.mark.parametrize(
    ("path", "value"),
    [("metrics.scaled_ulp_max", 1.7e308), ("metrics.p50_ms", -1e101), ("samples.time_ms", [1.0, 1e308])],
)
def test_12_huge_finite_numbers_are_400(service: Service, path: str, value: Any) -> None:
    bundle = real()
    section, key = path.split(".")
    bundle["results"][0][section][key] = value
    resp = post(service, bundle, service.token("h200-01"))
    assert resp.status_code == 400, resp.text
    assert key in resp.json()["error"] and "1e+100" in resp.json()["error"]


# ---- 16. /healthz says so when the database answers but cannot write --------------------------


def test_16_healthz_reports_a_database_that_cannot_write(db_url: str, tmp_path: Any) -> None:
    import subprocess

    from ingest_server import start_server, stop_server

    from regress.store.repo import open_store

    if db_url.startswith("sqlite"):
        mount = tmp_path / "disk"
        mount.mkdir()
        mounted = subprocess.run(
            ["mount", "-t", "tmpfs", "-o", "size=2m", "tmpfs", str(mount)], capture_output=True
        )
        if mounted.returncode:
            pytest.skip("cannot mount a tmpfs here (needs root)")
        db_url = f"sqlite:///{mount / 'regress.db'}"
    store = open_store(db_url)
    server, thread, app = start_server(db_url)
    url = f"http://127.0.0.1:{server.server_port}/healthz"
    try:
        assert requests.get(url, timeout=30).json() == {"status": "ok", "database": "ok"}
        if db_url.startswith("sqlite"):
            try:  # fill the disk to its last byte
                with open(mount / "filler", "wb") as f:
                    while True:
                        f.write(b"\0" * 4096)
                        f.flush()
            except OSError:
                pass
        else:
            with store.engine.connect() as conn:
                name = conn.exec_driver_sql("SELECT current_database()").scalar()
                conn.exec_driver_sql(f'ALTER DATABASE "{name}" SET default_transaction_read_only = on')
                conn.commit()
            app.extensions["regress.store"].engine.dispose()  # new sessions take the setting
        resp = requests.get(url, timeout=30)
        assert resp.status_code == 503, resp.text
        assert resp.json()["status"] == "unavailable" and ("full" in resp.text or "read-only" in resp.text)
    finally:
        stop_server(server, thread, app)
        store.engine.dispose()
        if db_url.startswith("sqlite"):
            subprocess.run(["umount", str(mount)], check=False)


@pytest.mark.parametrize("run_id", ["--------", "-abcdefgh", "--db=x-------"])
def test_18_a_run_id_must_not_look_like_an_option(service: Service, run_id: str) -> None:
    bundle = real()
    bundle["run"]["id"] = run_id
    resp = post(service, bundle, service.token("h200-01"))
    assert resp.status_code == 400 and "bundle.run.id" in resp.json()["error"], resp.text


def test_18_empty_suites_is_refused_before_anything_is_stored(tmp_path: Any, capsys: Any) -> None:
    db = tmp_path / "r.db"
    assert main(["nightly", "--backend", "cpu", "--suites", "", "--db", f"sqlite:///{db}"]) == 2
    assert "no suites" in capsys.readouterr().err
    assert not db.exists()


# ---- 14 (part). API run reads are paginated with a size cap -----------------------------------


@pytest.mark.slow  # a run of 2 pages + 500 results, stored and read page by page
def test_14_run_reads_are_paginated(service: Service) -> None:
    from ingest_bundles import make_bundle

    from regress.server.runs import RESULTS_PAGE
    from regress.store.transfer import import_bundle

    bundle = make_bundle()
    template = bundle["results"][0]
    bundle["results"] = []
    for i in range(2 * RESULTS_PAGE + 500):
        res = copy.deepcopy(template)
        res.pop("case_key", None)
        res["name"] = f"case-{i:05d}"
        res["samples"] = {"time_ms": [1.0, 2.0]}
        bundle["results"].append(res)
    with service.store.transaction() as s:
        run_id, _ = import_bundle(s, bundle, pin=None)  # a made-up stack: unpinned
    url = f"{service.url}/api/v1/runs/{run_id}"
    names: list[str] = []
    page = requests.get(url, timeout=60)
    while True:
        assert page.status_code == 200, page.text
        assert page.headers["X-Total-Results"] == str(len(bundle["results"]))
        body = page.json()
        assert len(body["results"]) <= RESULTS_PAGE
        validate_bundle(body)  # every page is itself a valid bundle
        names += [r["name"] for r in body["results"]]
        if "Link" not in page.headers:
            break
        page = requests.get(service.url + page.headers["Link"].split(">")[0].lstrip("<"), timeout=60)
    assert names == [r["name"] for r in bundle["results"]]
    assert requests.get(url, params={"limit": RESULTS_PAGE + 1}, timeout=30).status_code == 400
    assert requests.get(url, params={"offset": "-1"}, timeout=30).status_code == 400
    assert requests.get(url, params={"offset": 10**6}, timeout=30).json()["results"] == []
