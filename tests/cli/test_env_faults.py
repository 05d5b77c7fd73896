"""Environment faults (issue 24, items 15 and 16): a damaged database file and a full disk give one
line naming the problem and exit 2 from every command, never a traceback; /healthz says when the
database cannot take a write. The full disk is real: a small tmpfs mounted for the test (skipped,
with the reason, where mounting is not allowed)."""

from __future__ import annotations

import json
import os
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from committed import headline_bundle

from regress.cli import main
from regress.present.demo import demo_history
from regress.server import create_app
from regress.server.tokens import create_token
from regress.store.repo import open_store

REPO = Path(__file__).resolve().parents[2]
NIGHTLY = ["python", "-m", "regress", "nightly", "--quick", "--backend", "cpu", "--suites", "ulp"]
BUNDLE = headline_bundle("h200-nightly-01a227263a5bf313a6c4ef19")


def _one_line(capsys: pytest.CaptureFixture[str]) -> str:
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1, err  # one line, no traceback
    assert err[0].startswith("regress: error: ")
    return err[0]


@pytest.fixture
def random_file(tmp_path: Path) -> Path:
    path = tmp_path / "regress.db"
    path.write_bytes(os.urandom(64 * 1024))
    return path


def _commands(db: str, tmp: Path) -> list[list[str]]:
    return [
        ["runs", "list", "--db", db],
        ["runs", "show", "x", "--db", db],
        ["export", "--db", db],
        ["site", "--out", str(tmp / "site"), "--db", db],
        ["gate", "--baseline", "a", "--candidate", "b", "--db", db],
        ["db", "current", "--db", db],
        ["db", "upgrade", "--db", db],
        ["import", str(BUNDLE), "--db", db],
        ["demo-history", "--nights", "2", "--cases", "12", "--db", db],
        ["regressions", "list", "--db", db],
        ["serve", "--port", "1", "--db", db],
    ]


def test_random_bytes_database_is_one_line_on_every_command(
    random_file: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    db = f"sqlite:///{random_file}"
    for argv in _commands(db, tmp_path):
        rc = main(argv)
        line = _one_line(capsys)
        assert rc == 2, (argv, line)
        assert str(random_file) in line and "not an SQLite database" in line, (argv, line)
        assert "restore it from a backup" in line


def test_damaged_pages_are_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "regress.db"
    store = open_store(f"sqlite:///{path}")
    demo_history(store, nights=3, stacks=1, cases=12, samples=3)
    store.engine.dispose()
    size = path.stat().st_size
    with path.open("r+b") as fh:  # keep the header page, damage the rest
        fh.seek(4096 * 2)
        fh.write(os.urandom(size - 4096 * 3))
    for argv in (["runs", "list"], ["site", "--out", str(tmp_path / "site")], ["export"]):
        rc = main([*argv, "--db", f"sqlite:///{path}"])
        line = _one_line(capsys)
        assert rc == 2 and str(path) in line and "damaged" in line, (argv, line)


@pytest.mark.slow
def test_nightly_on_a_random_bytes_database(random_file: Path, tmp_path: Path) -> None:
    proc = subprocess.run(
        [*NIGHTLY, "--out", str(tmp_path / "out"), "--db", f"sqlite:///{random_file}"],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )
    err = [line for line in proc.stderr.splitlines() if line.strip()]
    assert proc.returncode == 2, proc.stderr
    assert "Traceback" not in proc.stderr and len(err) == 1, proc.stderr
    assert str(random_file) in err[0]


def test_unreachable_postgresql_is_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    db = "postgresql://postgres@127.0.0.1:1/none"  # port 1: nothing listens
    for argv in (["runs", "list"], ["db", "current"], ["db", "upgrade"], ["export"]):
        rc = main([*argv, "--db", db])
        line = _one_line(capsys)
        assert rc == 2 and "cannot connect to" in line and "127.0.0.1" in line, (argv, line)


# --- a full disk, for real ----------------------------------------------------------------------


@pytest.fixture
def full_disk(tmp_path: Path) -> Iterator[Path]:
    """A 2 MiB tmpfs, filled to the last block after `prepare` (see fill())."""
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    proc = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=2m", "tmpfs", str(mnt)], capture_output=True)
    if proc.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {proc.stderr.decode().strip() or proc.returncode}")
    try:
        yield mnt
    finally:
        subprocess.run(["umount", "-l", str(mnt)], check=False)


def fill(mnt: Path) -> None:
    """Writes until the filesystem refuses (ENOSPC), so the next write of any size fails."""
    with (mnt / f"fill-{uuid.uuid4().hex}").open("wb", buffering=0) as fh:
        try:
            while True:
                fh.write(b"\0" * 4096)
        except OSError:
            pass
    assert os.statvfs(mnt).f_bavail == 0


def _no_temporaries(root: Path) -> list[str]:
    return [str(p) for p in root.rglob("*") if p.is_file() and ("tmp" in p.name) and "fill-" not in p.name]


def test_site_on_a_full_disk_is_one_line_and_leaves_no_temporaries(
    full_disk: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    db = f"sqlite:///{tmp_path / 'regress.db'}"
    store = open_store(db)
    demo_history(store, nights=3, stacks=1, cases=12, samples=3)
    store.engine.dispose()
    out = full_disk / "site"
    assert main(["site", "--out", str(out), "--db", db]) == 0  # a first render fits
    capsys.readouterr()
    fill(full_disk)
    rc = main(["site", "--out", str(out), "--db", db, "--full"])
    line = _one_line(capsys)
    assert rc == 2 and "no space left" in line, line
    assert _no_temporaries(full_disk) == []  # results.tmp.npz and page temporaries were removed


def test_sqlite_on_a_full_disk_is_one_line(full_disk: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = full_disk / "regress.db"
    open_store(f"sqlite:///{path}").engine.dispose()
    fill(full_disk)
    rc = main(["demo-history", "--nights", "5", "--cases", "40", "--db", f"sqlite:///{path}"])
    line = _one_line(capsys)
    assert rc == 2 and str(path) in line and "disk is full" in line, line


@pytest.mark.slow
def test_nightly_with_its_output_on_a_full_disk_exits_2(full_disk: Path, tmp_path: Path) -> None:
    fill(full_disk)
    proc = subprocess.run(
        [*NIGHTLY, "--out", str(full_disk / "out"), "--db", f"sqlite:///{tmp_path / 'regress.db'}"],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )
    assert proc.returncode == 2, proc.stderr
    assert "Traceback" not in proc.stderr and "no space left" in proc.stderr, proc.stderr


def test_healthz_reports_a_database_that_cannot_write(full_disk: Path) -> None:
    path = full_disk / "regress.db"
    app = create_app({"DATABASE_URL": f"sqlite:///{path}"})
    store = app.extensions["regress.store"]
    token = create_token(store, "h200-lent")[1]
    client = app.test_client()
    ok = client.get("/healthz")
    assert ok.status_code == 200 and ok.get_json()["database"] == "ok"
    fill(full_disk)
    sick = client.get("/healthz")
    assert sick.status_code == 503, sick.get_json()
    assert "cannot write" in sick.get_json()["database"] or "full" in sick.get_json()["database"]
    bundle = json.loads(BUNDLE.read_text())
    sent = client.post("/api/v1/runs", json=bundle, headers={"Authorization": f"Bearer {token}"})
    assert sent.status_code == 503 and sent.headers["Retry-After"]
    store.engine.dispose()
