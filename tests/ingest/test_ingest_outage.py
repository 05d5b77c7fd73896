"""The service with its database gone (the PostgreSQL database dropped, the SQLite folder removed):
503 with Retry-After on every endpoint, the token lookup included, and /healthz says why."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import requests
from ingest_bundles import make_bundle
from ingest_server import start_server, stop_server

from regress.server.tokens import create_token


def test_database_down_is_503_with_retry_after(db_url: str, tmp_path: Path) -> None:
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
