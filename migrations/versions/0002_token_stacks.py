"""runner tokens: the stacks a token may upload onto

Revision ID: 0002
Revises: 0001
Create Date: 2026-12-01 09:20:00

A NULL list means any stack (every token made before this revision); `regress token create
--stacks` sets one (issue #24: a runner could upload onto any pinned stack).

Downgrading keeps each limited token's list in the side table `runner_token_stacks_kept`, and the
upgrade puts it back: before, `db downgrade 0001` then `db upgrade` widened every stack-limited
token to every stack (issue 41 item 16).
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0002"
down_revision: str | None = "0001"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


KEPT = "runner_token_stacks_kept"


def _kept_table() -> sa.Table:
    return sa.table(KEPT, sa.column("token_id", sa.Integer()), sa.column("stacks", sa.JSON()))


def _tokens() -> sa.Table:
    return sa.table("runner_tokens", sa.column("id", sa.Integer()), sa.column("stacks", sa.JSON()))


def upgrade() -> None:
    with op.batch_alter_table("runner_tokens", schema=None) as batch_op:
        batch_op.add_column(sa.Column("stacks", sa.JSON(), nullable=True))
    bind = op.get_bind()
    if sa.inspect(bind).has_table(KEPT):  # a downgrade kept the scopes: restore them
        kept, tokens = _kept_table(), _tokens()
        for token_id, stacks in bind.execute(sa.select(kept.c.token_id, kept.c.stacks)).all():
            bind.execute(sa.update(tokens).where(tokens.c.id == token_id).values(stacks=stacks))
        op.drop_table(KEPT)


def downgrade() -> None:
    bind = op.get_bind()
    tokens = _tokens()
    limited = bind.execute(sa.select(tokens.c.id, tokens.c.stacks).where(tokens.c.stacks.is_not(None))).all()
    if limited:  # 0001 has no column for them; without this the upgrade read them as "any stack"
        op.create_table(
            KEPT, sa.Column("token_id", sa.Integer(), primary_key=True), sa.Column("stacks", sa.JSON())
        )
        op.bulk_insert(_kept_table(), [{"token_id": i, "stacks": s} for i, s in limited])
    with op.batch_alter_table("runner_tokens", schema=None) as batch_op:
        batch_op.drop_column("stacks")
