"""Build: one compiled kernel artifact and the compiler's report on it."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import ForeignKey, String, Text, UniqueConstraint
from sqlalchemy.orm import Mapped

from .base import Base, NotNull, Nullable, utcnow


class Build(Base):
    __tablename__ = "builds"
    __table_args__ = (UniqueConstraint("stack_id", "backend", "artifact_hash"),)

    id: Mapped[int] = NotNull(primary_key=True)
    stack_id: Mapped[int] = NotNull(ForeignKey("stacks.id"))
    backend: Mapped[str] = NotNull(String(16))
    source_hash: Mapped[str] = NotNull(String(64))
    git_commit: Mapped[str | None] = Nullable(String(64))
    git_dirty: Mapped[bool] = NotNull(default=False)
    compiler: Mapped[str] = NotNull(String(256))
    compiler_version: Mapped[str] = NotNull(Text)
    flags: Mapped[list[str]] = NotNull()
    artifact_hash: Mapped[str] = NotNull(String(64))
    compile_only: Mapped[bool] = NotNull(default=False)
    stats: Mapped[dict[str, Any]] = NotNull()
    inject: Mapped[dict[str, Any]] = NotNull()
    created_at: Mapped[datetime] = NotNull(default=utcnow)
