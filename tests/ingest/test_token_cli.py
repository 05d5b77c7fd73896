"""`regress token revoke` is unambiguous: by --id or by --runner, never a bare argument that could be
either. SQLite and PostgreSQL (the `db_url` fixture)."""

from __future__ import annotations

import pytest

from regress.cli import main
from regress.tokens import create_token


def test_token_revoke_by_id_or_runner(db_url: str, capsys: pytest.CaptureFixture[str]) -> None:
    from regress.store.repo import open_store
    from regress.tokens import list_tokens

    store = open_store(db_url)
    alpha = create_token(store, "alpha")[0]
    one = create_token(store, str(alpha.id))[0]  # a runner named like alpha's token id
    assert main(["token", "revoke", str(alpha.id), "--db", db_url]) == 2  # bare argument: usage error
    assert main(["token", "revoke", "--id", str(alpha.id), "--runner", "x", "--db", db_url]) == 2
    assert main(["token", "revoke", "--runner", str(alpha.id), "--db", db_url]) == 0
    revoked = {t.id for t in list_tokens(store) if t.revoked_at is not None}
    assert revoked == {one.id}
    assert main(["token", "revoke", "--id", str(alpha.id), "--db", db_url]) == 0
    assert {t.id for t in list_tokens(store) if t.revoked_at is not None} == {one.id, alpha.id}
    store.engine.dispose()
