"""The schema exists only through Alembic: from empty to head, back to base, and equal to the models."""

from __future__ import annotations

from pathlib import Path

import pytest
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from sqlalchemy import inspect

from regress.store import Base
from regress.store.db import current_revision, downgrade, head_revision, make_engine, upgrade

TABLES = {
    "stacks",
    "builds",
    "runs",
    "cases",
    "results",
    "samples",
    "regressions",
    "gate_decisions",
    "runner_tokens",
}


def test_upgrade_from_empty_creates_every_table(db_url: str) -> None:
    engine = make_engine(db_url)
    try:
        assert current_revision(engine) is None
        upgrade(engine)
        assert current_revision(engine) == head_revision(engine)
        assert set(inspect(engine).get_table_names()) >= TABLES
    finally:
        engine.dispose()


def test_migrations_match_the_models(db_url: str) -> None:
    """Autogenerate against a migrated database finds nothing: no model change lacks a migration."""
    engine = make_engine(db_url)
    try:
        upgrade(engine)
        with engine.connect() as conn:
            diff = compare_metadata(MigrationContext.configure(conn), Base.metadata)
        assert diff == []
    finally:
        engine.dispose()


def test_downgrade_to_base_removes_everything(db_url: str) -> None:
    engine = make_engine(db_url)
    try:
        upgrade(engine)
        downgrade(engine, "base")
        assert current_revision(engine) is None
        assert not TABLES & set(inspect(engine).get_table_names())
        upgrade(engine)  # and the way back up still works
        assert set(inspect(engine).get_table_names()) >= TABLES
    finally:
        engine.dispose()


def test_quick_head_matches_alembic(tmp_path: Path) -> None:
    """The import-free head read (fast CLI start) must agree with alembic, and give up on a fork."""
    from regress.store.db import MIGRATIONS_DIR, quick_head_revision

    engine = make_engine(f"sqlite:///{tmp_path / 'h.db'}")
    try:
        assert quick_head_revision() == head_revision(engine)
    finally:
        engine.dispose()
    forked = tmp_path / "versions"
    forked.mkdir()
    for p in (MIGRATIONS_DIR / "versions").glob("*.py"):
        (forked / p.name).write_text(p.read_text())
    head = quick_head_revision(forked)
    for name in ("a", "b"):  # two children of the head: two heads, so no quick answer
        (forked / f"fork_{name}.py").write_text(f'revision = "fork{name}"\ndown_revision = "{head}"\n')
    assert quick_head_revision(forked) is None


def test_a_sqlite_path_with_url_escapes_is_one_database(tmp_path: Path) -> None:
    """A ':', '%' or '@' in the SQLite path is percent-encoded in the URL, and Alembic's config read
    the '%' as interpolation: every command on such a path ended in a traceback."""

    from regress.cli import main

    for folder in ("a:b", "50%", "at@x"):
        (tmp_path / folder).mkdir()
        db = f"sqlite:///{tmp_path / folder / 'r.db'}"
        assert main(["db", "upgrade", "--db", db]) == 0, folder
        assert current_revision(make_engine(db)) == head_revision(make_engine(db))


def test_a_schema_this_regress_does_not_know_is_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A database a newer regress upgraded (alembic_version at a revision this code lacks), or a
    revision name that does not exist: one line, exit 2, not Alembic's traceback."""
    from sqlalchemy import text

    from regress.cli import main

    db = f"sqlite:///{tmp_path / 'r.db'}"
    upgrade(make_engine(db))
    with make_engine(db).begin() as conn:
        conn.execute(text("UPDATE alembic_version SET version_num = '0999'"))
    for args in (["runs", "list"], ["db", "upgrade"]):
        assert main([*args, "--db", db]) == 2, args
        err = capsys.readouterr().err
        assert "0999" in err and "Traceback" not in err, err
    fresh = f"sqlite:///{tmp_path / 'f.db'}"
    assert main(["db", "upgrade", "--db", fresh, "--revision", "bogus"]) == 2
    assert "bogus" in capsys.readouterr().err


def test_db_downgrade_command(db_url: str, capsys: pytest.CaptureFixture[str]) -> None:
    """`regress db downgrade`: one revision down (a relative target), then to base (no table left),
    a revision that does not exist is one line and exit 2, and `db upgrade` comes back to head."""
    from regress.cli import main

    engine = make_engine(db_url)
    try:
        assert main(["db", "upgrade", "--db", db_url]) == 0
        head = head_revision(engine)
        assert capsys.readouterr().out.strip() == f"schema at {head}"
        assert main(["db", "downgrade", "--db", db_url, "--", "-1"]) == 0
        below = current_revision(engine)
        assert below is not None and below != head
        assert capsys.readouterr().out.strip() == f"schema at {below}"
        assert main(["db", "downgrade", "--db", db_url, "base"]) == 0
        assert capsys.readouterr().out.strip() == "schema at empty"
        assert current_revision(engine) is None and not TABLES & set(inspect(engine).get_table_names())
        assert main(["db", "downgrade", "--db", db_url, "nonsense"]) == 2
        err = capsys.readouterr().err
        assert "nonsense" in err and err.count("\n") == 1
        assert main(["db", "upgrade", "--db", db_url]) == 0 and current_revision(engine) == head
    finally:
        engine.dispose()
