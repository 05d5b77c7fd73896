"""A non-UTF-8 byte in a text argument (a run id, a name, a note, --db) is one line naming the
argument and exit 2, as every other bad input: Python hands it over as a lone surrogate, and `regress
runs show`, `runs delete`, `gate`, `compare`, `export` and `import --db` ended in a UnicodeEncodeError
traceback where the text first met the database (`token create` in a line about a codec). Paths
still take any bytes."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import click
import pytest
from committed import headline_bundle

from regress.cli import cli
from regress.machine.pins import pin_for_digest
from regress.store import queries
from regress.store.repo import open_store
from regress.store.transfer import import_files

ROOT = Path(__file__).resolve().parents[2]
BUNDLE = headline_bundle("h200-shard-gpus0-01a2272c9436d8afa02fc37d")
RUN = json.loads(BUNDLE.read_text())["run"]["id"]
BAD = os.fsdecode(b"\xff")  # what Python makes of the byte 0xff in argv


def _regress(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "regress", *args],
        capture_output=True,
        text=True,
        errors="backslashreplace",
        cwd=cwd,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        timeout=120,
    )


@pytest.fixture
def db(tmp_path: Path) -> str:
    """A SQLite database holding one real run."""
    url = f"sqlite:///{tmp_path / 'regress.db'}"
    store = open_store(url)
    assert [o.state for o in import_files(store, [BUNDLE], pin_for=pin_for_digest)] == ["stored"]
    store.engine.dispose()
    return url


@pytest.mark.parametrize(
    ("argv", "named"),
    [
        pytest.param(["runs", "show", BAD], "'RUN_ID'", id="runs show"),
        pytest.param(["runs", "delete", BAD, "--yes"], "'RUN_ID'", id="runs delete"),
        pytest.param(["gate", "--baseline", RUN, "--candidate", BAD], "'--candidate'", id="gate"),
        pytest.param(["compare", RUN, BAD], "'RUN_B'", id="compare"),
        pytest.param(["export", "--suite", BAD], "'--suite'", id="export"),
        pytest.param(["token", "create", BAD], "'RUNNER'", id="token create"),
    ],
)
def test_a_non_utf8_argument_is_one_line_and_exit_2(
    argv: list[str], named: str, db: str, tmp_path: Path
) -> None:
    done = _regress(*argv, "--db", db, cwd=tmp_path)
    assert (done.returncode, done.stdout) == (2, ""), done.stderr
    assert done.stderr == f"regress: error: {named} is not UTF-8 text: b'\\xff'\n"
    store = open_store(db, must_exist=True)
    with store.reader() as session:  # refused before the command ran: the run is still there
        assert [r.id for r, _ in queries.list_runs(session, limit=5)] == [RUN]
    store.engine.dispose()


def test_a_non_utf8_database_url_is_one_line_and_exit_2(tmp_path: Path) -> None:
    url = os.fsdecode(b"sqlite:///" + os.fsencode(tmp_path) + b"/\xfe.db")
    done = _regress("import", "--db", url, str(BUNDLE), cwd=tmp_path)
    assert done.returncode == 2, done.stderr
    assert done.stderr.startswith("regress: error: '--db' is not UTF-8 text: b'sqlite:///")
    assert done.stderr.count("\n") == 1
    assert list(tmp_path.iterdir()) == []  # no database made


def test_a_path_argument_still_takes_any_bytes(tmp_path: Path) -> None:
    csv = Path(os.fsdecode(os.fsencode(tmp_path) + b"/\xff.csv"))
    csv.write_text("value\n1.0\n1.1\n0.9\n1.0\n")
    done = _regress("detect", "--csv", str(csv), cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["rows"] == 4


def test_no_command_keeps_a_plain_string_parameter() -> None:
    """Every string parameter is checked, whichever command declares it (cli._utf8_strings)."""

    def plain(command: click.Command, path: str) -> list[str]:
        found = [f"{path} {p.name}" for p in command.params if type(p.type) is click.types.StringParamType]
        if isinstance(command, click.Group):
            for name, sub in command.commands.items():
                found += plain(sub, f"{path} {name}")
        return found

    assert plain(cli, "regress") == []
