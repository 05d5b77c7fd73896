"""The pieces the service drills share (hostile_drills.py, results_limit.py, ingest.py): a free
loopback port, the wait for a service to come up, a fresh database per drill, a POST of one bundle
with a runner token, the stored counts read back through the store's reads, and the report printed
and written."""

from __future__ import annotations

import json
import secrets
import socket
import time
from pathlib import Path
from typing import Any

import requests

from regress.server.tokens import create_token
from regress.store import queries
from regress.store.repo import open_store


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def wait_up(url: str, limit_s: float) -> bool:
    """Whether the service at `url` answers /healthz (any status) within `limit_s`."""
    deadline = time.monotonic() + limit_s
    while time.monotonic() < deadline:
        try:
            requests.get(f"{url}/healthz", timeout=2)
            return True
        except requests.ConnectionError:
            time.sleep(0.2)
    return False


def fresh_db(kind: str, work: Path, pg: str | None, tag: str) -> str:
    """A new SQLite file `work/TAG.db`, or a new database named after `tag` on the admin URL `pg`."""
    if kind == "sqlite":
        work.mkdir(parents=True, exist_ok=True)
        return f"sqlite:///{work / f'{tag}.db'}"
    import psycopg

    assert pg is not None
    name = f"drill_{tag.replace('-', '_')}_{secrets.token_hex(4)}"
    with psycopg.connect(pg, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    return f"{pg.rpartition('/')[0]}/{name}"


def runner_token(db_url: str, name: str) -> str:
    """A new runner token in the database (opening it migrates it, so a service starts on a ready
    database)."""
    store = open_store(db_url)
    token = create_token(store, name)[1]
    store.engine.dispose()
    return token


def post_bundle(url: str, token: str, body: bytes, timeout: float) -> requests.Response:
    """POST /api/v1/runs of one bundle's bytes, as the upload client sends it."""
    return requests.post(
        f"{url}/api/v1/runs",
        data=body,
        headers={"Authorization": f"Bearer {token}", "Content-Type": "application/json"},
        timeout=timeout,
    )


def stored_counts(db_url: str, run_id: str | None = None) -> tuple[int, int]:
    """(runs, results) in the database, or for `run_id` (1 or 0, and its results); read through
    the store's reads (tests/store/test_store_door.py)."""
    store = open_store(db_url)
    with store.reader() as s:
        if run_id is None:
            out = (queries.count_runs(s), queries.count_results(s))
        else:
            out = (int(queries.run_by_id(s, run_id) is not None), queries.run_result_count(s, run_id))
    store.engine.dispose()
    return out


def stored_run_ids(db_url: str) -> list[str]:
    """Every run id in the database, oldest first."""
    store = open_store(db_url)
    with store.reader() as s:
        ids = queries.run_ids(s)
    store.engine.dispose()
    return ids


def emit(report: dict[str, Any], path: Path | None) -> None:
    """The report on stdout, and in `path` when given."""
    text = json.dumps(report, indent=1)
    print(text)
    if path:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text + "\n")
