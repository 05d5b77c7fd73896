"""builds: a build row is keyed by its whole record (record), not by its artifact

Revision ID: 0005
Revises: 0004
Create Date: 2026-12-04 19:30:00

A build row was one per (stack, backend, artifact hash), and the first uploader's facts (compiler,
flags, stats, inject...) stood for every later run of that artifact: a second uploader's genuine
facts answered 409 for good (issue 41 item 13). Now `record` holds the SHA-256 of the whole record
(regress.store.build.record_digest over regress.facts.bundle.build_fields) and (stack, record) is the key:
two records of one artifact are two rows. The backfill computes each stored row's record.

0004 allows one row per artifact. Downgrading keeps every other record of an artifact, and which
runs pointed at it, in the side tables `build_records_kept` and `build_runs_kept`, and points those
runs at the artifact's first row; the upgrade stores the kept records again and points their runs
back, so each run again reads back the build it sent.
"""

import json
from collections.abc import Sequence
from typing import Any

import sqlalchemy as sa
from alembic import op

revision: str = "0005"
down_revision: str | None = "0004"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

KEPT_BUILDS = "build_records_kept"
KEPT_RUNS = "build_runs_kept"
JSON_COLUMNS = ("flags", "stats", "inject")


def _columns() -> list[sa.Column[Any]]:
    """Every column of a build row but its key (`id`) and `record`, as 0004 and 0005 have them."""
    return [
        sa.Column("stack_id", sa.Integer(), nullable=False),
        sa.Column("backend", sa.String(length=16), nullable=False),
        sa.Column("source_hash", sa.String(length=64), nullable=False),
        sa.Column("git_commit", sa.String(length=64), nullable=True),
        sa.Column("git_dirty", sa.Boolean(), nullable=False),
        sa.Column("compiler", sa.String(length=256), nullable=False),
        sa.Column("compiler_version", sa.Text(), nullable=False),
        sa.Column("flags", sa.JSON(), nullable=False),
        sa.Column("artifact_hash", sa.String(length=64), nullable=False),
        sa.Column("compile_only", sa.Boolean(), nullable=False),
        sa.Column("stats", sa.JSON(), nullable=False),
        sa.Column("inject", sa.JSON(), nullable=False),
        sa.Column("created_at", sa.DateTime(), nullable=False),
    ]


NAMES = tuple(c.name for c in _columns())


def _table(name: str, *extra: str) -> sa.Table:
    return sa.table(name, *(sa.column(n) for n in ("id", *NAMES, *extra)))


def _as_text(table: sa.Table) -> list[Any]:
    """The select list of a build's id and columns, JSON ones as their text: a row an older door
    stored may hold text that is no JSON (SQLite), and psycopg would decode the rest itself."""
    return [
        table.c.id,
        *(sa.cast(table.c[n], sa.Text).label(n) if n in JSON_COLUMNS else table.c[n] for n in NAMES),
    ]


def _record(row: Any) -> str:
    """The record digest of a row read through _as_text, as regress.store.build computes it for an
    upload (the same functions: a key the code could not find again would be no key)."""
    from regress.facts.bundle import build_fields
    from regress.store.build import record_digest

    def value(name: str) -> Any:
        text = getattr(row, name)
        if name not in JSON_COLUMNS:
            return text
        try:
            return json.loads(text)
        except ValueError:  # no JSON: a row no reader can use; its text keys it
            return text

    return record_digest(build_fields({name: value(name) for name in NAMES}))


def upgrade() -> None:
    with op.batch_alter_table("builds", schema=None) as batch_op:
        batch_op.add_column(sa.Column("record", sa.String(length=64), nullable=True))
    _backfill_records()
    with op.batch_alter_table("builds", schema=None) as batch_op:
        batch_op.alter_column("record", existing_type=sa.String(length=64), nullable=False)
        batch_op.drop_constraint(batch_op.f("uq_builds_stack_id_backend_artifact_hash"), type_="unique")
        batch_op.create_unique_constraint(batch_op.f("uq_builds_stack_id_record"), ["stack_id", "record"])
    _restore_kept_records()


def _backfill_records() -> None:
    bind = op.get_bind()
    builds = _table("builds", "record")
    for row in bind.execute(sa.select(*_as_text(builds))).all():
        bind.execute(sa.update(builds).where(builds.c.id == row.id).values(record=_record(row)))


def _restore_kept_records() -> None:
    """The records a downgrade kept, stored again (or found, when stored meanwhile), and their runs
    pointed back at them."""
    bind = op.get_bind()
    if not sa.inspect(bind).has_table(KEPT_BUILDS):
        return
    builds, kept = _table("builds", "record"), _table(KEPT_BUILDS)
    new_id: dict[int, int] = {}
    for row in bind.execute(sa.select(*_as_text(kept)).order_by(kept.c.id)).all():
        record = _record(row)
        where = (builds.c.stack_id == row.stack_id, builds.c.record == record)
        if bind.execute(sa.select(builds.c.id).where(*where)).first() is None:
            columns = [kept.c[n] for n in NAMES]
            bind.execute(
                sa.insert(builds).from_select(
                    [*NAMES, "record"],
                    sa.select(*columns, sa.literal(record)).where(kept.c.id == row.id),
                )
            )
        new_id[row.id] = bind.execute(sa.select(builds.c.id).where(*where)).scalar_one()
    runs = sa.table("runs", sa.column("id"), sa.column("build_id"))
    pointers = sa.table(KEPT_RUNS, sa.column("run_id"), sa.column("build_id"))
    for run_id, build_id in bind.execute(sa.select(pointers.c.run_id, pointers.c.build_id)).all():
        bind.execute(sa.update(runs).where(runs.c.id == run_id).values(build_id=new_id[build_id]))
    op.drop_table(KEPT_RUNS)
    op.drop_table(KEPT_BUILDS)


def downgrade() -> None:
    bind = op.get_bind()
    builds = _table("builds")
    first: dict[tuple[Any, ...], int] = {}
    others: dict[int, int] = {}  # a later record's id -> the id of its artifact's first row
    for row in bind.execute(
        sa.select(builds.c.id, builds.c.stack_id, builds.c.backend, builds.c.artifact_hash).order_by(
            builds.c.id
        )
    ):
        artifact = (row.stack_id, row.backend, row.artifact_hash)
        if artifact in first:
            others[row.id] = first[artifact]
        else:
            first[artifact] = row.id
    if others:  # 0004 allows one row per artifact: keep the others aside, with their runs
        _keep_other_records(list(others))
        runs = sa.table("runs", sa.column("build_id"))
        for build_id, first_id in others.items():
            bind.execute(sa.update(runs).where(runs.c.build_id == build_id).values(build_id=first_id))
        bind.execute(sa.delete(builds).where(builds.c.id.in_(list(others))))
    with op.batch_alter_table("builds", schema=None) as batch_op:
        batch_op.drop_constraint(batch_op.f("uq_builds_stack_id_record"), type_="unique")
        batch_op.create_unique_constraint(
            batch_op.f("uq_builds_stack_id_backend_artifact_hash"), ["stack_id", "backend", "artifact_hash"]
        )
        batch_op.drop_column("record")


def _keep_other_records(ids: list[int]) -> None:
    bind = op.get_bind()
    op.create_table(KEPT_BUILDS, sa.Column("id", sa.Integer(), primary_key=True), *_columns())
    op.create_table(
        KEPT_RUNS,
        sa.Column("run_id", sa.String(length=32), primary_key=True),
        sa.Column("build_id", sa.Integer(), nullable=False),
    )
    builds, kept = _table("builds"), _table(KEPT_BUILDS)
    bind.execute(
        sa.insert(kept).from_select(
            ["id", *NAMES], sa.select(builds.c.id, *(builds.c[n] for n in NAMES)).where(builds.c.id.in_(ids))
        )
    )
    runs = sa.table("runs", sa.column("id"), sa.column("build_id"))
    pointers = sa.table(KEPT_RUNS, sa.column("run_id"), sa.column("build_id"))
    bind.execute(
        sa.insert(pointers).from_select(
            ["run_id", "build_id"], sa.select(runs.c.id, runs.c.build_id).where(runs.c.build_id.in_(ids))
        )
    )
