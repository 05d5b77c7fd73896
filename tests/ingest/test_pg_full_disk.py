"""Issue #24 item 16 on PostgreSQL's own disk: a cluster whose filesystem is full refuses a run's
rows (53100, the upload is 503 + Retry-After) but still takes /healthz's probe, one row rewritten in
place. The probe's commit used to clear the upload's recorded fault, so /healthz answered 200 while
every upload got 503 (benchmarks/service/hostile_drills.py, family pgdisk). A real cluster on a real tmpfs."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
import requests
from ingest_bundles import make_bundle
from ingest_server import free_port, start_server, stop_server

from regress.server.tokens import create_token
from regress.store.repo import open_store

PGBIN = Path(os.environ.get("PGBIN", "/usr/lib/postgresql/15/bin"))


def _as_postgres(*argv: str) -> list[str]:
    return ["runuser", "-u", "postgres", "--", *argv]


@pytest.fixture
def cluster_on_tmpfs() -> Iterator[tuple[str, Path]]:
    if os.geteuid() != 0 or not (PGBIN / "initdb").exists() or shutil.which("runuser") is None:
        pytest.skip("needs root (a tmpfs mount, runuser) and PostgreSQL 15 binaries")
    disk = Path(tempfile.mkdtemp(prefix="regress-pgdisk-"))  # not under pytest's 0700 tmp: postgres reads it
    disk.chmod(0o755)
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=96m", "tmpfs", str(disk)], check=False).returncode:
        pytest.skip("cannot mount a tmpfs here")
    data = disk / "data"
    port = free_port()
    pg_ctl = _as_postgres(str(PGBIN / "pg_ctl"), "-D", str(data))
    try:
        data.mkdir()
        shutil.chown(data, "postgres")
        initdb = _as_postgres(str(PGBIN / "initdb"), "-D", str(data), "-U", "postgres", "--auth=trust")
        subprocess.run(initdb, check=True, capture_output=True, timeout=300)
        opts = f"-h 127.0.0.1 -p {port} -k {data} -c fsync=off -c max_wal_size=32MB -c min_wal_size=32MB"
        subprocess.run(
            [*pg_ctl, "-w", "-t", "60", "-o", opts, "-l", str(data / "log"), "start"], check=True, timeout=120
        )
        yield f"postgresql://postgres@127.0.0.1:{port}/postgres", disk
    finally:
        subprocess.run([*pg_ctl, "-m", "immediate", "stop"], check=False, capture_output=True, timeout=120)
        subprocess.run(["umount", "-l", str(disk)], check=False, timeout=30)
        shutil.rmtree(disk, ignore_errors=True)


def _fill(path: Path) -> None:
    with path.open("wb", buffering=0) as f:
        for size in (65536, 1):
            with contextlib.suppress(OSError):
                while True:
                    f.write(b"\0" * size)


@pytest.mark.slow
def test_healthz_is_503_while_a_full_postgresql_disk_refuses_uploads(
    cluster_on_tmpfs: tuple[str, Path],
) -> None:
    db_url, disk = cluster_on_tmpfs
    store = open_store(db_url)
    token = create_token(store, "h200-01")[1]
    server, thread, app = start_server(db_url)
    base = f"http://127.0.0.1:{server.server_port}"
    hdrs = {"Authorization": f"Bearer {token}", "Content-Type": "application/json"}
    try:
        assert requests.get(f"{base}/healthz", timeout=30).status_code == 200
        _fill(disk / "filler")
        refused = requests.post(
            f"{base}/api/v1/runs", data=json.dumps(make_bundle()), headers=hdrs, timeout=60
        )
        assert refused.status_code == 503 and refused.headers.get("Retry-After"), refused.text
        for _ in range(2):  # the probe's own commit must not clear what the upload met
            health = requests.get(f"{base}/healthz", timeout=30)
            assert health.status_code == 503, health.text
            assert "last write failed" in health.json()["database"]
        (disk / "filler").unlink()
        stored = requests.post(
            f"{base}/api/v1/runs", data=json.dumps(make_bundle()), headers=hdrs, timeout=60
        )
        assert stored.status_code == 201, stored.text
        assert requests.get(f"{base}/healthz", timeout=30).status_code == 200
    finally:
        stop_server(server, thread, app)
        store.engine.dispose()
