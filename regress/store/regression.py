"""Regression: a detected change with a lifecycle (open -> acknowledged -> resolved)."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import Float, ForeignKey, Index, String, Text
from sqlalchemy.orm import Mapped

from .base import Base, NotNull, Nullable, utcnow


class Regression(Base):
    __tablename__ = "regressions"
    __table_args__ = (Index("ix_regressions_state_case", "state", "case_id"),)

    id: Mapped[int] = NotNull(primary_key=True)
    case_id: Mapped[int] = NotNull(ForeignKey("cases.id"))
    stack_id: Mapped[int] = NotNull(ForeignKey("stacks.id"))
    kind: Mapped[str] = NotNull(String(16))  # perf | numerics | determinism | build
    metric: Mapped[str] = NotNull(String(64))
    state: Mapped[str] = NotNull(String(16), default="open")
    first_run_id: Mapped[str] = NotNull(ForeignKey("runs.id"))
    baseline_run_id: Mapped[str | None] = Nullable(ForeignKey("runs.id"))
    last_run_id: Mapped[str] = NotNull(ForeignKey("runs.id"))
    magnitude: Mapped[float | None] = Nullable(Float)
    p_value: Mapped[float | None] = Nullable(Float)
    details: Mapped[dict[str, Any]] = NotNull()
    note: Mapped[str] = NotNull(Text, default="")
    created_at: Mapped[datetime] = NotNull(default=utcnow)
    updated_at: Mapped[datetime] = NotNull(default=utcnow)
    resolved_at: Mapped[datetime | None] = Nullable()
