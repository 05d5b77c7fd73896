"""`--limit` of `regress runs list` and `regress regressions list`: a positive 64-bit count, the
same answer on SQLite and PostgreSQL. -1 listed every run on SQLite (its "no limit") and was a
traceback on PostgreSQL; a count past 64 bits was an OverflowError traceback on both."""

from __future__ import annotations

from pathlib import Path

import pytest
from committed import headline_bundle

from regress.cli import main

ROOT = Path(__file__).resolve().parents[2]
BUNDLE = headline_bundle("h200-shard-gpus0-01a2272c9436d8afa02fc37d")


@pytest.mark.parametrize("command", [["runs", "list"], ["regressions", "list"]])
@pytest.mark.parametrize("limit", ["-1", "0", str(2**63)])
def test_a_limit_out_of_range_is_refused(
    db_url: str, capsys: pytest.CaptureFixture[str], command: list[str], limit: str
) -> None:
    assert main(["import", "--db", db_url, str(BUNDLE)]) == 0
    capsys.readouterr()
    assert main([*command, "--db", db_url, "--limit", limit]) == 2
    assert "--limit" in capsys.readouterr().err


def test_the_largest_limit_lists_every_run(db_url: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["import", "--db", db_url, str(BUNDLE)]) == 0
    capsys.readouterr()
    assert main(["runs", "list", "--db", db_url, "--limit", str(2**63 - 1)]) == 0
    assert "01a2272c9436d8afa02fc37d" in capsys.readouterr().out
