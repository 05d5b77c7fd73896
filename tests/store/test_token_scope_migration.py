"""Issue 41 item 16: `db downgrade 0001` then `db upgrade` widened every stack-limited token to
every stack (0001 has no column for the list). The downgrade now keeps the lists and the upgrade
restores them."""

from __future__ import annotations

import pytest

from regress.cli import main
from regress.server.tokens import list_tokens
from regress.store.repo import open_store


# 0001: 0002's downgrade runs (it drops the column); 0002 and 0004: only later revisions are undone
@pytest.mark.parametrize("below", ["0001", "0002", "0004"])
def test_a_token_scope_survives_a_migration_round_trip(
    db_url: str, below: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["token", "create", "limited", "--stacks", "cpu-local", "--db", db_url]) == 0
    assert main(["token", "create", "free", "--db", db_url]) == 0
    assert main(["db", "downgrade", below, "--db", db_url]) == 0
    assert main(["db", "upgrade", "--db", db_url]) == 0
    store = open_store(db_url)
    try:
        scopes = {t.runner: t.stacks for t in list_tokens(store)}
    finally:
        store.engine.dispose()
    assert scopes["free"] is None
    assert scopes["limited"] is not None and len(scopes["limited"]) == 1
    # and a second round trip, with nothing limited left in between, is still whole
    assert main(["db", "downgrade", below, "--db", db_url]) == 0
    assert main(["db", "upgrade", "--db", db_url]) == 0
