"""Operating the service: `regress runs delete` removes a run and what refers to it, /healthz says
so when the database answers but cannot write, and run reads are paginated with a size cap (issue
#24). SQLite and PostgreSQL, against the real service on 127.0.0.1 or the real CLI.
"""

from __future__ import annotations

import copy
from typing import Any

import pytest
import requests
from ingest_client import post, undrifted
from ingest_server import Service

from regress.cli import main
from regress.facts.bundle import validate_bundle


def test_runs_delete_removes_a_run_and_what_refers_to_it(service: Service, db_url: str) -> None:
    from sqlalchemy import func, select

    from regress.store import Result, Run, Sample

    bundle = undrifted()
    assert post(service, bundle, service.token("attacker")).status_code == 201
    keep = undrifted()
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


def test_healthz_reports_a_database_that_cannot_write(db_url: str, tmp_path: Any) -> None:
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


@pytest.mark.slow  # a run of 2 pages + 500 results, stored and read page by page
def test_run_reads_are_paginated(service: Service) -> None:
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
