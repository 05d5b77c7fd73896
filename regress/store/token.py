"""RunnerToken: an ingest credential, stored only as a hash."""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import String
from sqlalchemy.orm import Mapped

from .base import Base, NotNull, Nullable, utcnow


class RunnerToken(Base):
    __tablename__ = "runner_tokens"

    id: Mapped[int] = NotNull(primary_key=True)
    runner: Mapped[str] = NotNull(String(128), index=True)
    token_hash: Mapped[str] = NotNull(String(128), unique=True)
    created_at: Mapped[datetime] = NotNull(default=utcnow)
    revoked_at: Mapped[datetime | None] = Nullable()
    last_used_at: Mapped[datetime | None] = Nullable()
    # The stack names (pins) or digests this token may upload onto; None: any (tokens before 0002).
    stacks: Mapped[list[str] | None] = Nullable()
