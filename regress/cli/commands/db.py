"""`regress db upgrade|current|downgrade`: the schema, only ever through Alembic."""

from __future__ import annotations

import click

from . import options


@click.group()
def db() -> None:
    """Database schema management."""


@db.command("upgrade")
@options.db
@click.option("--revision", default="head", show_default=True)
def upgrade_cmd(db_url: str | None, revision: str) -> None:
    """Create or migrate the schema."""
    from regress.store.db import current_revision, make_engine, upgrade

    engine = make_engine(db_url)
    upgrade(engine, revision)
    click.echo(f"schema at {current_revision(engine)}")


@db.command("current")
@options.db
@click.option("--check-heads", is_flag=True, help="Exit 1 unless the database is at the newest revision.")
@click.pass_context
def current_cmd(ctx: click.Context, db_url: str | None, check_heads: bool) -> None:
    """Print the schema revision of the database and of the code."""
    from regress.store.db import current_revision, head_revision, make_engine

    engine = make_engine(db_url)
    cur, head = current_revision(engine), head_revision(engine)
    click.echo(f"database {cur or 'empty'}; code head {head}")
    if check_heads and cur != head:
        ctx.exit(1)


@db.command("downgrade")
@options.db
@click.argument("revision")
def downgrade_cmd(db_url: str | None, revision: str) -> None:
    """Migrate the schema down to REVISION ('base' empties it)."""
    from regress.store.db import current_revision, downgrade, make_engine

    engine = make_engine(db_url)
    downgrade(engine, revision)
    click.echo(f"schema at {current_revision(engine) or 'empty'}")


COMMANDS = [db]
