"""`regress demo-history` into a database that already holds its runs: one line, nothing written."""

from __future__ import annotations

from pathlib import Path

import pytest

from regress.cli import main
from regress.store import queries
from regress.store.repo import open_store


def test_demo_again_with_force_is_a_one_line_refusal(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    url = f"sqlite:///{tmp_path / 'demo.db'}"
    argv = ["demo-history", "--nights", "2", "--stacks", "1", "--cases", "12", "--db", url]
    assert main(argv) == 0
    store = open_store(url)
    with store.reader() as s:
        before = (queries.count_runs(s), queries.count_results(s))
    capsys.readouterr()
    # The same seed on the same day makes the same run ids: refused before anything is written
    # (it was an IntegrityError traceback).
    assert main([*argv, "--force"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("regress: error:") and err.count("\n") == 1, err
    assert "already holds 2 of these demo runs" in err and "--seed" in err
    with store.reader() as s:
        assert (queries.count_runs(s), queries.count_results(s)) == before
    # Another seed is another history: written beside the first.
    assert main([*argv, "--force", "--seed", "1"]) == 0
    with store.reader() as s:
        assert queries.count_runs(s) == 2 * before[0]
