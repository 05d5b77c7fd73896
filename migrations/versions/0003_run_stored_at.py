"""runs: when this database stored the run (stored_at)

Revision ID: 0003
Revises: 0002
Create Date: 2026-12-02 10:00:00

A run deleted and imported again under its id, with as many results, got the deleted results' ids
back on SQLite, so the site's change check (status, result count, largest result id) saw the old run
and kept its pages. The time the row was stored tells the two apart; NULL for runs stored before.
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0003"
down_revision: str | None = "0002"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("runs", schema=None) as batch_op:
        batch_op.add_column(sa.Column("stored_at", sa.DateTime(), nullable=True))


def downgrade() -> None:
    # Not in batch mode: that rebuilds `runs` on SQLite, and dropping the old table with foreign keys
    # on deletes every result and sample through their ON DELETE CASCADE. SQLite >= 3.35 drops a
    # column in place.
    op.drop_column("runs", "stored_at")
