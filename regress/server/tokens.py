"""Runner tokens: created once and shown once, stored only as a SHA-256 hash, revocable.

A token is 32 random bytes, so a plain (unsalted) hash is enough: there is nothing to brute-force,
and an indexed lookup by hash keeps authentication O(1) however many runners there are.
"""

from __future__ import annotations

import hashlib
import hmac
import re
import secrets
from dataclasses import dataclass
from datetime import datetime

from sqlalchemy.orm import Session

from regress.store import RunnerToken, queries, utcnow
from regress.store.repo import Store, add_runner_token

TOKEN_PREFIX = "rgr_"  # recognisable in logs and secret scanners


def hash_token(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


@dataclass(frozen=True)
class TokenInfo:
    id: int
    runner: str
    created_at: datetime
    revoked_at: datetime | None
    last_used_at: datetime | None
    stacks: tuple[str, ...] | None = None  # the only stacks it may upload onto; None: any


def _info(row: RunnerToken) -> TokenInfo:
    stacks = tuple(row.stacks) if row.stacks is not None else None
    return TokenInfo(row.id, row.runner, row.created_at, row.revoked_at, row.last_used_at, stacks)


def create_token(store: Store, runner: str, stacks: list[str] | None = None) -> tuple[TokenInfo, str]:
    """Returns the stored record and the clear token; the clear token is never stored. `stacks`
    (pin names or digests) are the only stacks the token may upload onto; None means any."""
    runner = runner.strip()
    if not runner or len(runner) > 128:
        raise ValueError("runner name must be 1-128 characters")
    if not runner.isprintable():  # a newline forged a `token list` row, ESC reached the terminal
        raise ValueError(f"runner name {runner!r} holds a control or format character")
    if stacks is not None:
        stacks = _allowed_stacks(stacks)
    token = TOKEN_PREFIX + secrets.token_urlsafe(32)
    with store.transaction() as session:
        return _info(add_runner_token(session, runner, hash_token(token), stacks)), token


def _allowed_stacks(stacks: list[str]) -> list[str]:
    """The --stacks entries, each a pin name or a digest (lower-cased, as bundles carry it). A typo
    made a token that every upload answered 403, with nothing to say why until the first night."""
    from regress.machine.pins import known_stacks

    wanted = {s.strip() for s in stacks if s.strip()}
    if not wanted:
        raise ValueError("--stacks needs at least one stack name or digest")
    known = set(known_stacks())
    out = set()
    for entry in wanted:
        if re.fullmatch(r"[0-9a-fA-F]{64}", entry):
            out.add(entry.lower())
        elif entry in known:
            out.add(entry)
        else:
            raise ValueError(
                f"--stacks: {entry!r} is neither a pinned stack ({', '.join(sorted(known)) or 'none'}) "
                "nor a stack digest (64 hex)"
            )
    return sorted(out)


def may_upload_onto(token: RunnerToken, digest: str) -> bool:
    """Whether the token may upload a run onto the stack with this digest (by digest or pin name)."""
    if token.stacks is None:
        return True
    from regress.machine.pins import pin_name_for_digest

    return digest in token.stacks or pin_name_for_digest(digest) in token.stacks


def revoke_tokens(store: Store, *, token_id: int | None = None, runner: str | None = None) -> list[TokenInfo]:
    """Revokes the live token `token_id`, or every live token of `runner` (exactly one of them:
    a runner may be named "1", so a bare argument would be ambiguous). Returns those revoked."""
    if (token_id is None) == (runner is None):
        raise ValueError("give exactly one of a token id or a runner name")
    with store.transaction() as session:
        rows = queries.live_runner_tokens(session, token_id=token_id, runner=runner)
        now = utcnow()
        for row in rows:
            row.revoked_at = now
        session.flush()
        return [_info(r) for r in rows]


def list_tokens(store: Store) -> list[TokenInfo]:
    with store.reader() as session:
        return [_info(r) for r in queries.runner_tokens(session)]


def lookup_token(session: Session, token: str) -> RunnerToken | None:
    """The token's row, or None. The hash comparison is constant-time on top of the index lookup."""
    digest = hash_token(token)
    row = queries.runner_token_by_hash(session, digest)
    if row is None or not hmac.compare_digest(row.token_hash, digest):
        return None
    return row
