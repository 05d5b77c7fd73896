"""Issue 41 items 6 and 7: a stored row no reader can use (a JSON column holding no JSON, which
SQLite keeps; a duration <= 0, which both doors refused only from now on) is named and skipped
with a count by `runs list/show`, `export`, the API, the gate and the site; none crashes on it and
the gate never turns it into a verdict (exit 1 means "regression"). On main: tracebacks, exit 1,
and 500 from the API."""

from __future__ import annotations

import json
import sqlite3
import sys
from pathlib import Path

import pytest

from regress.cli import main
from regress.server import create_app
from regress.server.tokens import create_token

sys.path.insert(0, str(Path(__file__).parents[1] / "ingest"))
from ingest_bundles import make_bundle


def _two_runs(tmp_path: Path) -> tuple[str, str, str, Path]:
    paths, ids = [], []
    for day in (1, 2):
        bundle = make_bundle()
        bundle["run"]["started_at"] = f"2026-11-0{day}T00:00:00"
        bundle["run"]["finished_at"] = f"2026-11-0{day}T01:00:00"
        path = tmp_path / f"b{day}.json"
        path.write_text(json.dumps(bundle))
        paths.append(str(path))
        ids.append(bundle["run"]["id"])
    db_file = tmp_path / "rows.db"
    url = f"sqlite:///{db_file}"
    assert main(["import", *paths, "--db", url]) == 0
    return url, ids[0], ids[1], db_file


def test_json_columns_holding_no_json_are_skipped_by_every_reader(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    url, good, bad, db_file = _two_runs(tmp_path)
    with sqlite3.connect(db_file) as conn:
        conn.execute("UPDATE runs SET summary = '{bad' WHERE id = ?", (bad,))
        conn.execute(
            "UPDATE results SET metrics = 'nope' WHERE id = (SELECT min(id) FROM results WHERE run_id = ?)",
            (good,),
        )
    capsys.readouterr()
    assert main(["runs", "list", "--db", url]) == 0
    out = capsys.readouterr()
    assert good in out.out and bad not in out.out
    assert f"skipped 1 unreadable run: {bad} (summary holds no JSON" in out.err
    assert main(["runs", "show", bad, "--db", url]) == 2
    assert f"run {bad} is an unreadable row: summary holds no JSON" in capsys.readouterr().err
    assert main(["runs", "show", good, "--db", url]) == 0
    assert "skipped 1 unreadable result" in capsys.readouterr().err
    for fmt in ("jsonl", "csv"):
        assert main(["export", "--format", fmt, "--db", url]) == 0
        err = capsys.readouterr().err
        assert "unreadable results" in err and "Traceback" not in err
    # The gate: never a verdict of 1 from a row it cannot read.
    code = main(["gate", "--baseline", good, "--candidate", bad, "--db", url])
    assert code == 2
    assert "Traceback" not in capsys.readouterr().err
    assert main(["site", "--out", str(tmp_path / "site"), "--db", url]) == 0
    capsys.readouterr()
    client = create_app({"DATABASE_URL": url}).test_client()
    listed = client.get("/api/v1/runs")
    assert listed.status_code == 200
    assert [r["id"] for r in listed.json["runs"]] == [good]
    assert listed.json["unreadable"][0]["id"] == bad
    assert client.get(f"/api/v1/runs/{bad}").status_code == 422
    one = client.get(f"/api/v1/runs/{good}")
    assert one.status_code == 200 and one.headers["X-Unreadable-Results"] == "1"


def test_stored_durations_of_zero_or_less_are_skipped_not_judged(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    url, base, cand, db_file = _two_runs(tmp_path)
    with sqlite3.connect(db_file) as conn:  # what an older door let in
        conn.execute(
            "UPDATE samples SET \"values\" = '[-1.0, -2.0, 0.0]' WHERE name LIKE '%time_ms' "
            "AND result_id IN (SELECT id FROM results WHERE run_id = ?)",
            (base,),
        )
    capsys.readouterr()
    assert main(["gate", "--baseline", base, "--candidate", cand, "--db", url]) == 2
    assert "Traceback" not in capsys.readouterr().err
    assert main(["runs", "show", base, "--db", url]) == 0
    assert "unreadable results" in capsys.readouterr().err


@pytest.mark.parametrize("value", [-1.0, 0.0])
def test_durations_of_zero_or_less_are_refused_at_both_doors(
    tmp_path: Path, value: float, capsys: pytest.CaptureFixture[str]
) -> None:
    bundle = make_bundle()
    res = next(r for r in bundle["results"] if "baseline:aiter:time_ms" in r["samples"])
    res["samples"]["baseline:aiter:time_ms"][0] = value
    path = tmp_path / "neg.json"
    path.write_text(json.dumps(bundle))
    url = f"sqlite:///{tmp_path / 'neg.db'}"
    assert main(["import", str(path), "--db", url]) == 2
    assert "is not a duration (must be > 0)" in capsys.readouterr().err
    app = create_app({"DATABASE_URL": url})
    token = create_token(app.extensions["regress.store"], "runner-1")[1]
    resp = app.test_client().post("/api/v1/runs", json=bundle, headers={"Authorization": f"Bearer {token}"})
    assert resp.status_code == 400 and "is not a duration (must be > 0)" in resp.json["error"]
