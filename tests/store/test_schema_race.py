"""Issue 41 item 17: commands creating a new database's schema at once raced (SQLite: a misleading
"cannot connect"; PostgreSQL: an IntegrityError traceback). Schema changes now take one lock (a
file lock beside a SQLite file, an advisory lock on PostgreSQL): every command succeeds."""

from __future__ import annotations

import subprocess
import sys

import pytest

PROCESSES = 4


# A second draw of the same race is CI's (slow tier): plain pytest keeps one round per database.
@pytest.mark.parametrize("round_", [0, pytest.param(1, marks=pytest.mark.slow)])
def test_concurrent_schema_creation_all_succeed(db_url: str, round_: int) -> None:
    argv = [sys.executable, "-m", "regress", "db", "upgrade", "--db", db_url]
    procs = [
        subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        for _ in range(PROCESSES)
    ]
    results = [p.communicate(timeout=120) for p in procs]
    for proc, (_out, err) in zip(procs, results, strict=True):
        assert proc.returncode == 0, err
        assert "Traceback" not in err
    # And the schema is whole: a command that reads it works.
    subprocess.run(
        [sys.executable, "-m", "regress", "db", "current", "--db", db_url], check=True, capture_output=True
    )
