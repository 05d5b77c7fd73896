"""The PostgreSQL pool behind the `store` fixture (tests/conftest.py): a database handed back is
reused only empty, with ids starting again at 1 and the template's schema; one whose schema a test
changed is dropped, never handed to the next test."""

from __future__ import annotations

from typing import Any

import psycopg
import pytest
from sqlalchemy import func, select

from regress.store import Stack
from regress.store.repo import get_or_create_stack, open_store

pytestmark = pytest.mark.postgres


def _write_a_stack(url: str) -> int:
    """Stores one stack row; the number of stack rows after it."""
    store = open_store(url)
    try:
        with store.transaction() as session:
            get_or_create_stack(session, digest="d" * 64, keys={}, schema_version=1, name="pool")
        with store.transaction() as session:
            return int(session.scalar(select(func.count()).select_from(Stack)) or 0)
    finally:
        store.engine.dispose()


def test_a_reused_database_is_empty_and_a_changed_one_is_dropped(pg_pool: Any) -> None:
    """`pg_pool` is tests/conftest.py's PgPool (not imported: `conftest` names another folder's too)."""
    name = pg_pool.take()
    url = f"{pg_pool.base}/{name}"
    assert _write_a_stack(url) == 1
    pg_pool.give_back(name)
    assert name in pg_pool.free
    again = pg_pool.take()
    assert again == name
    store = open_store(url)
    try:
        with store.transaction() as session:
            assert session.scalar(select(func.count()).select_from(Stack)) == 0
    finally:
        store.engine.dispose()
    assert _write_a_stack(url) == 1  # and its ids start again where a fresh copy's would
    with psycopg.connect(url, autocommit=True) as conn:
        assert conn.execute("SELECT max(id) FROM stacks").fetchone()[0] == 1
        conn.execute("ALTER TABLE stacks ADD COLUMN leftover integer")
    pg_pool.give_back(name)
    assert name not in pg_pool.free and name not in pg_pool.made
    with psycopg.connect(pg_pool.admin, autocommit=True) as conn:
        assert conn.execute("SELECT count(*) FROM pg_database WHERE datname = %s", (name,)).fetchone()[0] == 0
