"""`regress token create|revoke|list`: per-runner upload credentials for the results service."""

from __future__ import annotations

import click

from ..errors import UserError
from ..server.tokens import create_token, list_tokens, revoke_tokens
from ..store.db import DatabaseError
from ..store.repo import Store, open_store

_db_option = click.option(
    "--db", "db_url", metavar="URL", help="Database URL (default: $REGRESS_DATABASE_URL or .regress/)."
)


def _store(db_url: str | None) -> Store:
    try:
        return open_store(db_url)
    except DatabaseError as exc:
        raise UserError(str(exc)) from exc


@click.group("token")
def token_group() -> None:
    """Manage the bearer tokens runners upload with (stored hashed; shown once)."""


@token_group.command("create")
@click.argument("runner")
@_db_option
def create(runner: str, db_url: str | None) -> None:
    """Create a token for RUNNER and print it once (give it to the runner as REGRESS_TOKEN)."""
    try:
        info, token = create_token(_store(db_url), runner)
    except ValueError as exc:
        raise UserError(str(exc)) from exc
    click.echo(
        f"token {info.id} for runner {info.runner!r} (shown once, store it as REGRESS_TOKEN):", err=True
    )
    click.echo(token)


@token_group.command("revoke")
@click.argument("runner_or_id")
@_db_option
@click.pass_context
def revoke(ctx: click.Context, runner_or_id: str, db_url: str | None) -> None:
    """Revoke token ID, or every live token of RUNNER. Uploads with it then answer 403."""
    revoked = revoke_tokens(_store(db_url), runner_or_id)
    if not revoked:
        raise UserError(f"no live token matches {runner_or_id!r} (see `regress token list`)")
    for info in revoked:
        click.echo(f"revoked token {info.id} of runner {info.runner!r}")
    ctx.exit(0)


@token_group.command("list")
@_db_option
def list_(db_url: str | None) -> None:
    """List tokens: id, runner, created, last used, revoked. Never the token itself."""
    rows = list_tokens(_store(db_url))
    click.echo(f"{'id':>4}  {'runner':<24} {'created':<19}  {'last used':<19}  revoked")
    for t in rows:
        click.echo(
            f"{t.id:>4}  {t.runner:<24} {t.created_at:%Y-%m-%d %H:%M:%S}  "
            f"{f'{t.last_used_at:%Y-%m-%d %H:%M:%S}' if t.last_used_at else '-':<19}  "
            f"{f'{t.revoked_at:%Y-%m-%d %H:%M:%S}' if t.revoked_at else '-'}"
        )


COMMANDS = [token_group]
