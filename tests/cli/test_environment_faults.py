"""Issue #24 items 15, 16, 18: an environment fault is one line, exit 2 and the hint that fixes it,
never a traceback: a corrupt SQLite file, a full disk, a missing PostgreSQL driver."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from committed import headline

import regress

ROOT = Path(regress.__file__).resolve().parents[1]
# Each is a process of its own (about 1.5 s); plain pytest checks the first three, the slow tier all.
READERS = [
    ["runs", "list"],
    ["site", "--out", "{tmp}/site"],
    ["gate", "--baseline", "x", "--candidate", "y"],
]
SLOW_READERS = [
    ["export"],
    ["db", "current"],
    ["import", str(headline()[0])],
    ["demo-history", "--nights", "2"],
    ["serve", "--port", "18996"],
    ["nightly", "--backend", "cpu", "--quick", "--suites", "ulp"],  # builds the kernel first (8 s)
]


def _regress(args: list[str], cwd: Path, prelude: str = "") -> subprocess.CompletedProcess[str]:
    code = f"{prelude}\nimport sys\nfrom regress.cli import main\nsys.exit(main(sys.argv[1:]))"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run(
        [sys.executable, "-c", code, *args], capture_output=True, text=True, timeout=300, cwd=cwd, env=env
    )


@pytest.mark.parametrize(
    "args",
    [*READERS, *(pytest.param(a, marks=pytest.mark.slow) for a in SLOW_READERS)],
    ids=[a[0] for a in (*READERS, *SLOW_READERS)],
)
def test_a_corrupt_sqlite_file_is_one_line_and_exit_2(tmp_path: Path, args: list[str]) -> None:
    db = tmp_path / "r.db"
    db.write_bytes(os.urandom(20_000))
    done = _regress([*(a.format(tmp=tmp_path) for a in args), "--db", f"sqlite:///{db}"], tmp_path)
    assert done.returncode == 2, done.stderr
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "Traceback" not in done.stderr, done.stderr
    assert "corrupt" in lines[0] and "backup" in lines[0]


def test_postgres_url_without_psycopg_names_the_extra(tmp_path: Path) -> None:
    # The driver made unimportable the way a missing package is (sys.modules[name] = None).
    prelude = "import sys\nsys.modules['psycopg'] = None"
    done = _regress(["runs", "list", "--db", "postgresql://u@127.0.0.1:1/x"], tmp_path, prelude)
    assert done.returncode == 2, done.stderr
    assert "regress[postgres]" in done.stderr and "Traceback" not in done.stderr


@pytest.fixture
def full_disk(tmp_path: Path) -> Path:
    """A 256 KiB tmpfs filled to the last byte (needs root to mount)."""
    mount = tmp_path / "full"
    mount.mkdir()
    if subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=256k", "tmpfs", str(mount)], capture_output=True
    ).returncode:
        pytest.skip("cannot mount a tmpfs here (needs root)")
    try:
        try:
            with open(mount / "filler", "wb") as f:
                while True:
                    f.write(b"\0" * 4096)
                    f.flush()
        except OSError:  # ENOSPC: the disk is full, as wanted
            pass
        yield mount
    finally:
        subprocess.run(["umount", str(mount)], check=False)


@pytest.mark.slow
def test_nightly_on_a_full_disk_is_exit_2_and_keeps_its_results(tmp_path: Path, full_disk: Path) -> None:
    db = tmp_path / "r.db"
    args = ["nightly", "--backend", "cpu", "--quick", "--suites", "ulp", "--db", f"sqlite:///{db}"]
    done = _regress([*args, "--out", str(full_disk / "out")], tmp_path)
    assert done.returncode == 2, done.stderr
    assert "no space left" in done.stderr and "Traceback" not in done.stderr, done.stderr
    from sqlalchemy import func, select

    from regress.store import Result
    from regress.store.repo import open_store

    store = open_store(f"sqlite:///{db}")
    with store.reader() as s:
        assert (s.scalar(select(func.count()).select_from(Result)) or 0) > 0  # nothing measured is lost
    store.engine.dispose()
