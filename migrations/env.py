"""Alembic environment: the only path by which the schema is created or changed."""

from __future__ import annotations

from alembic import context
from sqlalchemy import engine_from_config, pool

from regress.store import Base
from regress.store.db import database_url, migration_connection

config = context.config
target_metadata = Base.metadata


def run_migrations_offline() -> None:
    context.configure(
        url=config.get_main_option("sqlalchemy.url") or database_url(),
        target_metadata=target_metadata,
        literal_binds=True,
        render_as_batch=True,
    )
    with context.begin_transaction():
        context.run_migrations()


def run_migrations_online() -> None:
    connection = config.attributes.get("connection")
    if connection is not None:
        _run(connection)
        return
    section = config.get_section(config.config_ini_section, {})
    section["sqlalchemy.url"] = config.get_main_option("sqlalchemy.url") or database_url()
    engine = engine_from_config(section, prefix="sqlalchemy.", poolclass=pool.NullPool)
    with migration_connection(engine) as conn:  # the `alembic` command itself: as regress db does
        _run(conn)


def _run(connection: object) -> None:
    # render_as_batch: SQLite cannot ALTER most things; batch mode rebuilds tables there.
    context.configure(connection=connection, target_metadata=target_metadata, render_as_batch=True)
    with context.begin_transaction():
        context.run_migrations()


if context.is_offline_mode():
    run_migrations_offline()
else:
    run_migrations_online()
