"""Project-wide fixtures: one database per test (SQLite and PostgreSQL) and the GPU skip.

`db_url` runs a test twice: on a temp SQLite file and on a fresh PostgreSQL database created on the
server named by $REGRESS_TEST_POSTGRES_URL (skipped, with the reason, when it is unset; `.ci/pg.sh`
starts one); `module_db_url` the same, once per module. `store` is `open_store(db_url)`, migrated
to head. `gpu_device` skips without a GPU.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from regress.store.repo import Store, open_store

PG_ENV = "REGRESS_TEST_POSTGRES_URL"


def _pg_admin_connect(url: str) -> Any:
    import psycopg

    # CREATE/DROP DATABASE cannot run inside a transaction block.
    return psycopg.connect(url.replace("postgresql+psycopg://", "postgresql://"), autocommit=True)


# Every database test runs on both; PostgreSQL is marked so `-m "not postgres"` can leave it out.
DATABASES = ["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)]


@contextlib.contextmanager
def database(kind: str, tmp: Path) -> Iterator[str]:
    """The URL of an empty database: a SQLite file in `tmp`, or a fresh PostgreSQL database on the
    server of $REGRESS_TEST_POSTGRES_URL (the test skips, with the reason, when it is unset), dropped
    at the end."""
    if kind == "sqlite":
        yield f"sqlite:///{tmp / 'regress.db'}"
        return
    admin = os.environ.get(PG_ENV)
    if not admin:
        pytest.skip(f"no PostgreSQL: set {PG_ENV} (e.g. from `bash .ci/pg.sh`)")
    name = f"regress_test_{secrets.token_hex(6)}"
    with _pg_admin_connect(admin) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    base, _, _ = admin.rpartition("/")
    try:
        yield f"{base}/{name}"
    finally:
        with _pg_admin_connect(admin) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@pytest.fixture(params=DATABASES)
def db_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    with database(request.param, tmp_path) as url:
        yield url


@pytest.fixture(scope="module", params=DATABASES)
def module_db_url(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """As db_url, one database for all the tests of a module (one costly fill, read by many)."""
    with database(request.param, tmp_path_factory.mktemp("module-db")) as url:
        yield url


@pytest.fixture(scope="session")
def migrated_sqlite(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One SQLite database migrated to head by Alembic, once per session."""
    path = tmp_path_factory.mktemp("migrated") / "regress.db"
    open_store(f"sqlite:///{path}").engine.dispose()
    return path


@pytest.fixture(scope="session")
def migrated_postgres(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """One PostgreSQL database migrated to head by Alembic, once per session: the template each
    test's store database is created from (CREATE DATABASE ... TEMPLATE copies its files)."""
    with database("postgresql", tmp_path_factory.getbasetemp()) as url:
        open_store(url).engine.dispose()  # a template takes no session while it is copied
        yield url.rpartition("/")[2]


@pytest.fixture
def store(db_url: str, request: pytest.FixtureRequest) -> Iterator[Store]:
    if db_url.startswith("postgresql"):
        # As for SQLite below: the test's (still unopened, empty) database made again as a copy of
        # the session's migrated one instead of running every migration for each test.
        pg_template: str = request.getfixturevalue("migrated_postgres")
        name = db_url.rpartition("/")[2]
        with _pg_admin_connect(os.environ[PG_ENV]) as conn:
            conn.execute(f'DROP DATABASE "{name}"')
            conn.execute(f'CREATE DATABASE "{name}" TEMPLATE "{pg_template}"')
    elif db_url.startswith("sqlite:///") and not Path(db_url.removeprefix("sqlite:///")).exists():
        # A copy of the session's migrated database (SQLite's backup API: the store runs in WAL
        # mode) instead of running every migration again for each of some 200 tests; open_store
        # below still checks it is at head. tests/store/test_migrations.py covers the migrations.
        template: Path = request.getfixturevalue("migrated_sqlite")
        with (
            sqlite3.connect(template) as src,
            sqlite3.connect(db_url.removeprefix("sqlite:///")) as dst,
        ):
            src.backup(dst)
        src.close()
        dst.close()
    opened = open_store(db_url)
    try:
        yield opened
    finally:
        opened.engine.dispose()  # else DROP DATABASE waits on pooled connections


@pytest.fixture
def gpu_device() -> str:
    """The torch device string of the first GPU; skips the test when there is none."""
    import torch  # a dependency: a broken install fails the test rather than skipping it

    if not torch.cuda.is_available():
        pytest.skip("no CUDA/ROCm GPU: torch.cuda.is_available() is False")
    return "cuda:0"
