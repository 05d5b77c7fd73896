"""`regress token revoke` is unambiguous: by --id or by --runner, never a bare argument that could be
either. SQLite and PostgreSQL (the `db_url` fixture)."""

from __future__ import annotations

import pytest

from regress.cli import main
from regress.server.tokens import create_token


def test_token_revoke_by_id_or_runner(db_url: str, capsys: pytest.CaptureFixture[str]) -> None:
    from regress.server.tokens import list_tokens
    from regress.store.repo import open_store

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


def test_token_revoke_id_past_the_integer_range(db_url: str, capsys: pytest.CaptureFixture[str]) -> None:
    # The lookup raised OverflowError (SQLite) or DataError (PostgreSQL): a traceback, not a line.
    assert main(["token", "revoke", "--id", str(2**64), "--db", db_url]) == 2
    assert "no live token with id" in capsys.readouterr().err


def test_token_stacks_must_name_a_pin_or_a_digest(db_url: str, capsys: pytest.CaptureFixture[str]) -> None:
    from regress.machine.pins import load_pin
    from regress.server.tokens import may_upload_onto
    from regress.store import RunnerToken
    from regress.store.repo import open_store

    # A typo made a token that every upload answered 403.
    assert main(["token", "create", "h200-01", "--stacks", "h200-cuda13", "--db", db_url]) == 2
    err = capsys.readouterr().err
    assert "'h200-cuda13' is neither a pinned stack" in err and "h200-cuda13.0" in err
    digest = load_pin("h200-cuda13.0").digest
    store = open_store(db_url)
    try:
        create_token(store, "h200-01", [digest.upper()])  # bundles carry the digest lower-case
        with store.reader() as session:
            [row] = session.query(RunnerToken).all()
            assert row.stacks == [digest] and may_upload_onto(row, digest)
    finally:
        store.engine.dispose()


def test_token_list_shows_the_stacks_a_token_may_upload_onto(
    db_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """An operator can see what a token is limited to (the list showed no stacks at all)."""
    assert main(["token", "create", "h200-01", "--stacks", "h200-cuda13.0", "--db", db_url]) == 0
    assert main(["token", "create", "anywhere", "--db", db_url]) == 0
    capsys.readouterr()
    assert main(["token", "list", "--db", db_url]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split()[-1] == "stacks"
    rows = {line.split()[1]: line.split()[-1] for line in lines[1:]}
    assert rows == {"h200-01": "h200-cuda13.0", "anywhere": "any"}
