"""runner tokens: the stacks a token may upload onto

Revision ID: 0002
Revises: 0001
Create Date: 2026-12-01 09:20:00

A NULL list means any stack (every token made before this revision); `regress token create
--stacks` sets one (issue #24: a runner could upload onto any pinned stack).
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0002"
down_revision: str | None = "0001"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("runner_tokens", schema=None) as batch_op:
        batch_op.add_column(sa.Column("stacks", sa.JSON(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("runner_tokens", schema=None) as batch_op:
        batch_op.drop_column("stacks")
