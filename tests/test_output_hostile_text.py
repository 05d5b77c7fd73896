"""Issue 41 item 22: `token list` printed runner names raw (a newline forged a row, an OSC escape
reached the terminal); `export --format csv` wrote `=cmd|...` formulas as they were; Markdown kept
`_x_` as emphasis and passed bidi overrides (U+202E) through."""

from __future__ import annotations

import csv
import io
import json
import sqlite3
import sys
from pathlib import Path

import pytest

from regress.cli import main
from regress.facts.escape import csv_cell, markdown, visible

sys.path.insert(0, str(Path(__file__).parent / "ingest"))
from ingest_bundles import make_bundle

HOSTILE_RUNNER = "evil\n  99  forged-row\x1b]0;owned\x07\u202e"


def test_token_list_escapes_stored_runner_names(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    db_file = tmp_path / "t.db"
    url = f"sqlite:///{db_file}"
    assert main(["token", "create", "plain", "--db", url]) == 0
    with sqlite3.connect(db_file) as conn:  # what an older door stored
        conn.execute("UPDATE runner_tokens SET runner = ?", (HOSTILE_RUNNER,))
    capsys.readouterr()
    assert main(["token", "list", "--db", url]) == 0
    out = capsys.readouterr().out
    assert len(out.splitlines()) == 2  # the header and one row: no forged line
    assert "\x1b" not in out and "\u202e" not in out and "\\x1b" in out


@pytest.mark.parametrize("name", ["a\nb", "a\x1b]0;x\x07", "a\u202eb"])
def test_token_create_refuses_control_and_format_characters(
    name: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["token", "create", name, "--db", f"sqlite:///{tmp_path / 't.db'}"]) == 2
    assert "control or format character" in capsys.readouterr().err


def test_csv_export_writes_no_formula(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bundle = make_bundle()
    bundle["results"][0]["name"] = "=cmd|' /C calc'!A0"
    bundle["results"][1]["name"] = "@SUM(1+1)"
    for res in bundle["results"][:2]:
        res.pop("case_key", None)
    path = tmp_path / "b.json"
    path.write_text(json.dumps(bundle))
    url = f"sqlite:///{tmp_path / 'e.db'}"
    assert main(["import", str(path), "--db", url]) == 0
    capsys.readouterr()
    assert main(["export", "--format", "csv", "--db", url]) == 0
    rows = list(csv.reader(io.StringIO(capsys.readouterr().out)))
    cells = [cell for row in rows[1:] for cell in row]
    assert "'=cmd|' /C calc'!A0" in cells and "'@SUM(1+1)" in cells
    assert not any(cell.startswith(("=", "+", "@")) for cell in cells)
    assert csv_cell(-1.5) == -1.5  # numbers stay numbers


def test_markdown_escapes_emphasis_and_bidi_overrides() -> None:
    assert markdown("_x_") == "\\_x\\_"
    assert "\u202e" not in markdown("a\u202eb") and "\u202e" not in visible("a\u202eb")
    assert "\u2066" not in visible("a\u2066b")
