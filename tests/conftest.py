"""Project-wide fixtures: one database per test (SQLite and PostgreSQL) and the GPU skip.

`db_url` runs a test twice: on a temp SQLite file and on a fresh PostgreSQL database created on the
server named by $REGRESS_TEST_POSTGRES_URL (skipped, with the reason, when it is unset; `.ci/pg.sh`
starts one); `module_db_url` the same, once per module. `store` is `open_store(db_url)`, migrated
to head (a copy of a session's migrated database; PostgreSQL's are pooled, `PgPool`). `gpu_device`
skips without a GPU.
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


# The folder whose tests are about the database itself (the store's door): their PostgreSQL copies
# run in plain pytest too. Elsewhere a test's PostgreSQL copy is marked db_matrix (plain pytest runs
# its SQLite copy; scripts/test.sh and CI run both), unless its module names it in
# POSTGRES_IN_PLAIN (True: every test of the module; else a set of test names): the ingest tests
# whose subject is PostgreSQL's own behaviour (COPY, row locks, concurrent uploads). The ingest's
# other PostgreSQL copies were 37 s of plain pytest's 222 s of tests (issue 43).
_DATABASE_FOLDERS = ("store",)


def _postgres_in_plain(item: pytest.Item) -> bool:
    module = getattr(item, "module", None)
    named = getattr(module, "POSTGRES_IN_PLAIN", False)
    if named is True or not named:
        return bool(named)
    if unknown := set(named) - set(vars(module)):  # a renamed test would leave plain pytest silently
        raise pytest.UsageError(f"{item.path.name}: POSTGRES_IN_PLAIN names no test {sorted(unknown)}")
    return getattr(item, "originalname", item.name) in named


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    tests = Path(__file__).parent
    for item in items:
        callspec = getattr(item, "callspec", None)
        params = callspec.params.values() if callspec is not None else ()
        if not any(isinstance(v, str) and v == "postgresql" for v in params):
            continue
        if item.path.relative_to(tests).parts[0] not in _DATABASE_FOLDERS and not _postgres_in_plain(item):
            item.add_marker(pytest.mark.db_matrix)


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
    """An empty database; for a test that uses `store`, one already at head (a copy of the session's
    migrated database on SQLite, a reused one from `pg_pool` on PostgreSQL): running every migration,
    or CREATE DATABASE (~0.8 s each on the shared 2-core machine), for each of some 250 tests made up
    half of plain pytest's time. tests/store/test_migrations.py covers the migrations themselves."""
    if "store" not in request.fixturenames:
        with database(request.param, tmp_path) as url:
            yield url
        return
    if request.param == "sqlite":
        path = tmp_path / "regress.db"
        template: Path = request.getfixturevalue("migrated_sqlite")
        # SQLite's backup API: the store runs in WAL mode, so a plain file copy could miss pages.
        with sqlite3.connect(template) as src, sqlite3.connect(path) as dst:
            src.backup(dst)
        src.close()
        dst.close()
        yield f"sqlite:///{path}"
        return
    admin = os.environ.get(PG_ENV)
    if not admin:
        pytest.skip(f"no PostgreSQL: set {PG_ENV} (e.g. from `bash .ci/pg.sh`)")
    pool: PgPool = request.getfixturevalue("pg_pool")
    name = pool.take()
    try:
        yield f"{admin.rpartition('/')[0]}/{name}"
    finally:
        pool.give_back(name)


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


# What a database's schema is, read from the catalogue: a database handed back to the pool is reused
# only if this reads as it did on the migrated template (a test that altered a table, downgraded,
# dropped the alembic row or set a database option makes it differ: that database is dropped).
_SCHEMA = """
SELECT string_agg(x, E'\\n' ORDER BY x) FROM (
  SELECT format('col %s.%s.%s %s %s %s', table_schema, table_name, column_name, data_type, is_nullable,
                column_default) AS x
    FROM information_schema.columns WHERE table_schema NOT IN ('pg_catalog', 'information_schema')
  UNION ALL SELECT format('idx %s', indexdef) FROM pg_indexes WHERE schemaname <> 'pg_catalog'
  UNION ALL SELECT format('con %s %s', conname, pg_get_constraintdef(oid)) FROM pg_constraint
    WHERE connamespace = 'public'::regnamespace
  UNION ALL SELECT format('trg %s', tgname) FROM pg_trigger WHERE NOT tgisinternal
  UNION ALL SELECT format('fn %s', proname) FROM pg_proc WHERE pronamespace = 'public'::regnamespace
  UNION ALL SELECT format('typ %s', typname) FROM pg_type
    WHERE typnamespace = 'public'::regnamespace AND typtype = 'e'
  UNION ALL SELECT format('ns %s', nspname) FROM pg_namespace
    WHERE nspname NOT LIKE 'pg\\_%' AND nspname <> 'information_schema'
  UNION ALL SELECT format('seq %s', sequencename) FROM pg_sequences
  UNION ALL SELECT format('set %s', setconfig) FROM pg_db_role_setting
    WHERE setdatabase = (SELECT oid FROM pg_database WHERE datname = current_database())
  UNION ALL SELECT format('ver %s', version_num) FROM alembic_version
) s
"""


class PgPool:
    """PostgreSQL databases at head for the tests that use `store`, made once from the session's
    migrated template and reused: a test's database is handed back emptied (TRUNCATE ... RESTART
    IDENTITY, so ids start again at 1: the state of a fresh copy) when its schema still reads as the
    template's, and dropped otherwise."""

    def __init__(self, admin: str, template: str) -> None:
        self.admin, self.template = admin, template
        self.base = admin.rpartition("/")[0]
        self.free: list[str] = []
        self.made: list[str] = []
        self.schema = self._schema(template)

    def _connect(self, name: str) -> Any:
        return _pg_admin_connect(f"{self.base}/{name}")

    def _schema(self, name: str) -> str:
        with self._connect(name) as conn:
            return str(conn.execute(_SCHEMA).fetchone()[0])

    def take(self) -> str:
        if self.free:
            return self.free.pop()
        name = f"regress_test_{secrets.token_hex(6)}"
        with _pg_admin_connect(self.admin) as conn:
            conn.execute(f'CREATE DATABASE "{name}" TEMPLATE "{self.template}"')
        self.made.append(name)
        return name

    def give_back(self, name: str) -> None:
        with _pg_admin_connect(self.admin) as conn:  # connections the test left open
            conn.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
                " WHERE datname = %s AND pid <> pg_backend_pid()",
                (name,),
            )
        try:
            if self._schema(name) == self.schema:
                with self._connect(name) as conn:
                    tables = [
                        r[0]
                        for r in conn.execute(
                            "SELECT tablename FROM pg_tables WHERE schemaname = 'public'"
                            " AND tablename <> 'alembic_version'"
                        )
                    ]
                    conn.execute(
                        "TRUNCATE " + ", ".join(f'"{t}"' for t in tables) + " RESTART IDENTITY CASCADE"
                    )
                self.free.append(name)
                return
        except Exception:  # gone, renamed or unreadable: not reused
            pass
        self._drop(name)

    def _drop(self, name: str) -> None:
        with _pg_admin_connect(self.admin) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        self.made.remove(name)

    def close(self) -> None:
        for name in list(self.made):
            self._drop(name)


@pytest.fixture(scope="session")
def pg_pool(migrated_postgres: str) -> Iterator[PgPool]:
    pool = PgPool(os.environ[PG_ENV], migrated_postgres)
    try:
        yield pool
    finally:
        pool.close()


@pytest.fixture(scope="session")
def migrated_postgres(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """One PostgreSQL database migrated to head by Alembic, once per session: the template each
    pooled database is created from (CREATE DATABASE ... TEMPLATE copies its files)."""
    with database("postgresql", tmp_path_factory.getbasetemp()) as url:
        open_store(url).engine.dispose()  # a template takes no session while it is copied
        yield url.rpartition("/")[2]


@pytest.fixture
def store(db_url: str) -> Iterator[Store]:
    """`open_store(db_url)` on a database already at head (db_url made it so); open_store still checks
    the revision."""
    opened = open_store(db_url)
    try:
        yield opened
    finally:
        opened.engine.dispose()  # the pool's reset would otherwise end pooled connections


@pytest.fixture
def gpu_device() -> str:
    """The torch device string of the first GPU; skips the test when there is none."""
    import torch  # a dependency: a broken install fails the test rather than skipping it

    if not torch.cuda.is_available():
        pytest.skip("no CUDA/ROCm GPU: torch.cuda.is_available() is False")
    return "cuda:0"
