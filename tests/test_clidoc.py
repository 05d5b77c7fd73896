"""docs/cli.md is generated from the commands; this fails when someone forgot to regenerate it."""

from __future__ import annotations

from pathlib import Path

from regress.cli.clidoc import render

DOC = Path(__file__).resolve().parents[1] / "docs" / "cli.md"


def test_cli_reference_is_current() -> None:
    assert DOC.read_text() == render(), (
        "docs/cli.md is stale: run `python -m regress.cli.clidoc > docs/cli.md`"
    )
