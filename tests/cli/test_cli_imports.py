"""Issue 11: the CLI starts fast because each command imports only what it needs. A timing must not
decide a test, so this checks *which* heavy modules a command loads (benchmarks/service/cli_latency.py
measures the seconds)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
HEAVY = ("torch", "scipy", "sqlalchemy", "alembic", "flask", "jinja2", "numpy", "requests", "jsonschema")

PROBE = """
import json, sys
from regress.cli import main
try:
    main(sys.argv[1:])
except SystemExit:
    pass
print(json.dumps(sorted(m for m in {heavy} if m in sys.modules)), file=sys.__stderr__)
"""


def _loaded(args: list[str], cwd: Path) -> set[str]:
    proc = subprocess.run(
        [sys.executable, "-c", PROBE.format(heavy=HEAVY), *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=120,
        env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"},
    )
    return set(json.loads(proc.stderr.strip().splitlines()[-1]))


def test_help_imports_nothing_heavy(tmp_path: Path) -> None:
    assert _loaded(["--help"], tmp_path) == set()


@pytest.mark.parametrize("group", ["runs", "gate", "nightly", "site", "serve", "upload", "detect", "import"])
def test_subcommand_help_imports_nothing_heavy(group: str, tmp_path: Path) -> None:
    assert _loaded([group, "--help"], tmp_path) == set()


def test_detect_needs_numpy_only(tmp_path: Path) -> None:
    csv = tmp_path / "s.csv"
    csv.write_text("value\n" + "\n".join(str(10 + (i >= 20)) for i in range(40)) + "\n")
    assert _loaded(["detect", "--csv", str(csv)], tmp_path) == {"numpy"}


def test_runs_list_needs_only_the_database_layer(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'r.db'}"
    from regress.store.repo import open_store

    open_store(url).engine.dispose()  # migrated to head: the read must not load alembic again
    assert _loaded(["runs", "list", "--db", url], tmp_path) == {"sqlalchemy"}
