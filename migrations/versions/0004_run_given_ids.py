"""runs: a run is its runner's and the id its runner gave it (given_id)

Revision ID: 0004
Revises: 0003
Create Date: 2026-12-04 19:20:00

`runs.id` was both the run id a runner chose and the key every table refers to, so the first
runner to store a run id owned it: a runner that stored content under another runner's spooled run
id made that runner's genuine upload answer 403 for ever (issue 41 item 14). Now `given_id` holds
the runner's id, unique per runner, and `id` stays the key: the given id, or for a run whose id
another runner's run already held, a qualified key (regress/store/run.py). Every run stored before
this revision is stored under its own id: its given id is its key (the backfill).

Downgrading keeps the given id of each run stored under a qualified key in the side table
`run_given_ids_kept` (0003 has no column for it), and the upgrade puts it back: without it, a
runner's re-send of such a run after a round trip would no longer find its run.
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0004"
down_revision: str | None = "0003"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

KEPT = "run_given_ids_kept"


def _runs() -> sa.Table:
    return sa.table(
        "runs",
        sa.column("id", sa.String()),
        sa.column("given_id", sa.String()),
        sa.column("runner", sa.String()),
    )


def _kept() -> sa.Table:
    return sa.table(KEPT, sa.column("run_id", sa.String()), sa.column("given_id", sa.String()))


def upgrade() -> None:
    # SQLite rebuilds `runs` for the NOT NULL and the constraint (batch mode); regress.store.db runs
    # every migration with foreign keys off, so the rebuild cannot cascade into the results.
    with op.batch_alter_table("runs", schema=None) as batch_op:
        batch_op.add_column(sa.Column("given_id", sa.String(length=32), nullable=True))
    _backfill_given_ids()
    with op.batch_alter_table("runs", schema=None) as batch_op:
        batch_op.alter_column("given_id", existing_type=sa.String(length=32), nullable=False)
        batch_op.create_unique_constraint(batch_op.f("uq_runs_given_id_runner"), ["given_id", "runner"])


def _backfill_given_ids() -> None:
    """Every run's given id is its key, but those a downgrade kept (runs stored under a qualified
    key); one whose (runner, id) was stored again meanwhile keeps its key as its id."""
    bind = op.get_bind()
    runs = _runs()
    bind.execute(sa.update(runs).values(given_id=runs.c.id))
    if not sa.inspect(bind).has_table(KEPT):
        return
    kept = _kept()
    for key, given in bind.execute(sa.select(kept.c.run_id, kept.c.given_id)).all():
        runner = bind.execute(sa.select(runs.c.runner).where(runs.c.id == key)).first()
        if runner is None:
            continue  # deleted while downgraded
        who = runs.c.runner.is_(None) if runner[0] is None else runs.c.runner == runner[0]
        taken = bind.execute(sa.select(runs.c.id).where(runs.c.given_id == given, who)).first()
        if taken is None:
            bind.execute(sa.update(runs).where(runs.c.id == key).values(given_id=given))
    op.drop_table(KEPT)


def downgrade() -> None:
    bind = op.get_bind()
    runs = _runs()
    qualified = bind.execute(sa.select(runs.c.id, runs.c.given_id).where(runs.c.given_id != runs.c.id)).all()
    if qualified:  # 0003 has no column for them; without this the round trip lost whose run they are
        op.create_table(
            KEPT,
            sa.Column("run_id", sa.String(length=32), primary_key=True),
            sa.Column("given_id", sa.String(length=32), nullable=False),
        )
        op.bulk_insert(_kept(), [{"run_id": key, "given_id": given} for key, given in qualified])
    with op.batch_alter_table("runs", schema=None) as batch_op:
        batch_op.drop_constraint(batch_op.f("uq_runs_given_id_runner"), type_="unique")
        batch_op.drop_column("given_id")
