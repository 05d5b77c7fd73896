"""Run: one invocation of the suites on one stack. A crash leaves it 'incomplete'."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import ForeignKey, Index, String, Text
from sqlalchemy.orm import Mapped

from .base import Base, NotNull, Nullable, utcnow

RUN_STATES = ("running", "complete", "failed", "incomplete")
# A run that ended by itself; "incomplete" runs are never baselines, "running" ones not yet.
FINISHED_STATES = ("complete", "failed")


class Run(Base):
    __tablename__ = "runs"
    __table_args__ = (Index("ix_runs_stack_started", "stack_id", "started_at"),)

    id: Mapped[str] = NotNull(String(32), primary_key=True)
    stack_id: Mapped[int] = NotNull(ForeignKey("stacks.id"))
    build_id: Mapped[int | None] = Nullable(ForeignKey("builds.id"))
    status: Mapped[str] = NotNull(String(16), default="running")
    trigger: Mapped[str] = NotNull(String(32), default="manual")
    is_drill: Mapped[bool] = NotNull(default=False)
    backend: Mapped[str] = NotNull(String(16))
    kernel_commit: Mapped[str | None] = Nullable(String(64))
    source_hash: Mapped[str | None] = Nullable(String(64))
    suites: Mapped[list[str]] = NotNull()
    runner: Mapped[str | None] = Nullable(String(128))
    hostname: Mapped[str | None] = Nullable(String(256))
    pid: Mapped[int | None] = Nullable()
    host: Mapped[dict[str, Any]] = NotNull()
    ci: Mapped[dict[str, Any]] = NotNull()
    gpu_state: Mapped[dict[str, Any]] = NotNull()
    summary: Mapped[dict[str, Any]] = NotNull()
    message: Mapped[str] = NotNull(Text, default="")
    exit_code: Mapped[int | None] = Nullable()
    origin: Mapped[str] = NotNull(String(16), default="local")
    started_at: Mapped[datetime] = NotNull(default=utcnow)
    finished_at: Mapped[datetime | None] = Nullable()
