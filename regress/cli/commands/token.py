"""`regress token create|revoke|list`: per-runner upload credentials for the results service."""

from __future__ import annotations

from typing import TYPE_CHECKING

import click

from regress.facts.errors import UserError
from regress.facts.escape import visible

from . import options

if TYPE_CHECKING:
    from regress.store.repo import Store


def _store(db_url: str | None) -> Store:
    from regress.store.db import DatabaseError
    from regress.store.repo import open_store

    try:
        return open_store(db_url)
    except DatabaseError as exc:
        raise UserError(str(exc)) from exc


@click.group("token")
def token_group() -> None:
    """Manage the bearer tokens runners upload with (stored hashed; shown once)."""


@token_group.command("create")
@click.argument("runner")
@click.option(
    "--stacks",
    metavar="NAMES",
    help="Comma-separated pinned stack names (or digests) the token may upload onto (default: any).",
)
@options.db
def create(runner: str, stacks: str | None, db_url: str | None) -> None:
    """Create a token for RUNNER and print it once (give it to the runner as REGRESS_TOKEN)."""
    try:
        from regress.server.tokens import create_token

        allowed = None if stacks is None else stacks.split(",")
        info, token = create_token(_store(db_url), runner, allowed)
    except ValueError as exc:
        raise UserError(str(exc)) from exc
    click.echo(
        f"token {info.id} for runner {visible(repr(info.runner))} (shown once, store it as REGRESS_TOKEN):",
        err=True,
    )
    click.echo(token)


@token_group.command("revoke")
@click.option("--id", "token_id", type=int, metavar="N", help="The token with this id (see `token list`).")
@click.option("--runner", metavar="NAME", help="Every live token of this runner.")
@options.db
@click.pass_context
def revoke(ctx: click.Context, token_id: int | None, runner: str | None, db_url: str | None) -> None:
    """Revoke one token (--id N) or every live token of a runner (--runner NAME).

    Uploads with a revoked token then answer 403. Exactly one of --id and --runner.
    """
    if (token_id is None) == (runner is None):
        raise UserError("give exactly one of --id N or --runner NAME (see `regress token list`)")
    from regress.server.tokens import revoke_tokens

    # No token has an id past the column's integer range; the query raised OverflowError (SQLite)
    # or DataError (PostgreSQL) for one.
    out_of_range = token_id is not None and not 1 <= token_id < 2**31
    revoked = [] if out_of_range else revoke_tokens(_store(db_url), token_id=token_id, runner=runner)
    if not revoked:
        which = f"id {token_id}" if token_id is not None else f"runner {runner!r}"
        raise UserError(f"no live token with {which} (see `regress token list`)")
    for info in revoked:
        click.echo(f"revoked token {info.id} of runner {visible(repr(info.runner))}")
    ctx.exit(0)


@token_group.command("list")
@options.db
def list_(db_url: str | None) -> None:
    """List tokens: id, runner, created, last used, revoked, the stacks it may upload onto (any:
    no limit). Never the token itself."""
    from regress.server.tokens import list_tokens

    rows = list_tokens(_store(db_url))
    click.echo(f"{'id':>4}  {'runner':<24} {'created':<19}  {'last used':<19}  {'revoked':<19}  stacks")
    for t in rows:
        click.echo(
            f"{t.id:>4}  {visible(t.runner):<24} {t.created_at:%Y-%m-%d %H:%M:%S}  "
            f"{f'{t.last_used_at:%Y-%m-%d %H:%M:%S}' if t.last_used_at else '-':<19}  "
            f"{f'{t.revoked_at:%Y-%m-%d %H:%M:%S}' if t.revoked_at else '-':<19}  "
            f"{visible(','.join(t.stacks)) if t.stacks is not None else 'any'}"
        )


COMMANDS = [token_group]
