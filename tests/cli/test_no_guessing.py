"""Issue 11: commands that only read never create a database, ports are checked, run ids are whole
when piped and prefixes work everywhere, and `regress import` loads real bundles idempotently."""

from __future__ import annotations

import json
import shutil
import sqlite3
from pathlib import Path

import pytest
from click.testing import CliRunner
from committed import headline

from regress.cli import cli, main
from regress.store.repo import open_store
from regress.store.transfer import export_bundle

REAL_BUNDLES = headline()


def _invoke(args: list[str]) -> tuple[int, str]:
    result = CliRunner().invoke(cli, args, catch_exceptions=False, standalone_mode=False)
    return (result.return_value if isinstance(result.return_value, int) else 0), result.output


@pytest.mark.parametrize(
    "argv",
    [
        ["runs", "list"],
        ["runs", "show", "01a2"],
        ["export"],
        ["regressions", "list"],
        ["gate", "--baseline", "a", "--candidate", "b"],
        ["compare", "a", "b"],
    ],
    ids=lambda a: " ".join(a[:2]),
)
def test_read_only_commands_refuse_a_missing_sqlite_file(
    argv: list[str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    target = tmp_path / "no" / "such" / "dir" / "x.db"
    assert main([*argv, "--db", f"sqlite:///{target}"]) == 2
    err = capsys.readouterr().err
    assert f"no database at {target}" in err and err.count("\n") == 1  # one clear line
    assert not target.exists() and not target.parent.exists()


def test_site_refuses_a_typo_database(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["site", "--db", f"sqlite:///{tmp_path / 'typo.db'}", "--out", str(tmp_path / "s")]) == 2
    assert "no database at" in capsys.readouterr().err
    assert not (tmp_path / "typo.db").exists() and not (tmp_path / "s").exists()


def test_read_only_command_refuses_a_file_without_the_schema(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    stray = tmp_path / "stray.db"
    stray.write_bytes(b"")
    assert main(["runs", "list", "--db", f"sqlite:///{stray}"]) == 2
    assert "no regress data" in capsys.readouterr().err


@pytest.mark.parametrize("port", ["0", "99999", "-1"])
def test_serve_refuses_ports_out_of_range(port: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["serve", "--port", port]) == 2
    assert "1<=x<=65535" in capsys.readouterr().err.replace(" ", "")


def test_cuda_without_gpu_gets_a_cuda_hint(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    torch = pytest.importorskip("torch")
    if torch.cuda.is_available():
        pytest.skip("a GPU is present: the refusal this test checks cannot happen here")
    assert main(["nightly", "--backend", "cuda", "--db", f"sqlite:///{tmp_path / 'r.db'}"]) == 2
    err = capsys.readouterr().err
    assert "--backend cuda" in err and "hip" not in err.lower()


@pytest.fixture(scope="module")
def imported_once(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("real") / "real.db"
    assert main(["import", "--db", f"sqlite:///{path}", *map(str, REAL_BUNDLES)]) == 0
    return path


@pytest.fixture
def real_db(imported_once: Path, tmp_path: Path) -> str:
    """Every committed bundle, imported once per module (about 2 s); each test gets its own copy,
    taken with SQLite's backup API (the store runs in WAL mode)."""
    copy = tmp_path / "real.db"
    with sqlite3.connect(imported_once) as src, sqlite3.connect(copy) as dst:
        src.backup(dst)
    src.close()
    dst.close()
    return f"sqlite:///{copy}"


# Every committed bundle imported a second time (about 6 s): the slow tier; plain pytest re-imports
# one real bundle in tests/store/test_transfer.py.
@pytest.mark.slow
def test_import_loads_every_committed_bundle_idempotently(
    real_db: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert len(REAL_BUNDLES) >= 4
    capsys.readouterr()
    assert main(["import", "--db", real_db, *map(str, REAL_BUNDLES)]) == 0
    assert f"0 stored, {len(REAL_BUNDLES)} already stored, 0 refused" in capsys.readouterr().out
    store = open_store(real_db, must_exist=True)
    try:
        from sqlalchemy import func, select

        from regress.store import Result, Run

        with store.reader() as s:
            assert s.scalar(select(func.count()).select_from(Run)) == len(REAL_BUNDLES)
            expected = sum(len(json.loads(p.read_text())["results"]) for p in REAL_BUNDLES)
            assert s.scalar(select(func.count()).select_from(Result)) == expected
    finally:
        store.engine.dispose()


@pytest.mark.slow  # imports 8 bundles through the CLI (3.4 s CPU)
def test_import_refuses_bad_and_conflicting_bundles_and_keeps_the_rest(
    real_db: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    not_json = tmp_path / "junk.json"
    not_json.write_text("{not json")
    binary = tmp_path / "binary.json"
    binary.write_bytes(b"\xff\xfe\x00garbage")
    conflicting = tmp_path / "conflict.json"
    doc = json.loads(REAL_BUNDLES[0].read_text())
    doc["results"][0]["status"] = "fail" if doc["results"][0]["status"] == "pass" else "pass"
    conflicting.write_text(json.dumps(doc))
    fresh = tmp_path / "fresh.json"
    doc2 = json.loads(REAL_BUNDLES[0].read_text())
    doc2["run"]["id"] = "01ffffffffffffffffffffff"
    fresh.write_text(json.dumps(doc2))
    capsys.readouterr()
    assert main(["import", "--db", real_db, str(not_json), str(binary), str(conflicting), str(fresh)]) == 2
    out = capsys.readouterr()
    assert f"refused {not_json}" in out.err and f"refused {conflicting}" in out.err
    assert f"refused {binary}" in out.err
    assert "already stored with different content" in out.err
    assert "1 stored, 0 already stored, 3 refused" in out.out
    store = open_store(real_db, must_exist=True)
    try:
        from regress.store import Run

        with store.reader() as s:
            kept = s.get(Run, doc["run"]["id"])
            assert kept is not None
            assert (
                export_bundle(s, kept.id)["results"][0]["status"]
                == json.loads(REAL_BUNDLES[0].read_text())["results"][0]["status"]
            )
            assert s.get(Run, "01ffffffffffffffffffffff") is not None
    finally:
        store.engine.dispose()


@pytest.mark.slow  # CLI subprocesses (2.4 s CPU)
def test_runs_list_tsv_prints_whole_ids_that_show_accepts(real_db: str) -> None:
    code, out = _invoke(["runs", "list", "--tsv", "--db", real_db])
    assert code == 0
    lines = out.strip().splitlines()
    assert lines[0].split("\t")[0] == "id"
    ids = [ln.split("\t")[0] for ln in lines[1:]]
    stored = {json.loads(p.read_text())["run"]["id"] for p in REAL_BUNDLES}
    assert set(ids) == stored
    for run_id in ids:
        code, shown = _invoke(["runs", "show", run_id[:12], "--db", real_db])
        assert code == 0 and run_id in shown


def test_ambiguous_prefix_is_named(real_db: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["runs", "show", "01a22", "--db", real_db]) == 2
    err = capsys.readouterr().err
    assert "ambiguous" in err and err.count("01a22") >= 3


def test_json_run_list_has_whole_ids(real_db: str) -> None:
    code, out = _invoke(["runs", "list", "--json", "--db", real_db])
    assert code == 0 and all(len(r["id"]) == 24 for r in json.loads(out))


def test_import_with_a_copied_bundle_path_needs_no_checkout(tmp_path: Path, real_db: str) -> None:
    # The bundle's location does not matter: a copy outside the checkout imports the same.
    copy = tmp_path / "elsewhere" / REAL_BUNDLES[0].name
    copy.parent.mkdir()
    shutil.copy(REAL_BUNDLES[0], copy)
    code, out = _invoke(["import", "--db", real_db, str(copy)])
    assert code == 0 and "already stored" in out
