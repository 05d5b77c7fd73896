"""GateDecision: the verdict of one `regress gate` between two runs."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import ForeignKey, String
from sqlalchemy.orm import Mapped

from .base import Base, NotNull, utcnow


class GateDecision(Base):
    __tablename__ = "gate_decisions"

    id: Mapped[int] = NotNull(primary_key=True)
    baseline_run_id: Mapped[str] = NotNull(ForeignKey("runs.id"))
    candidate_run_id: Mapped[str] = NotNull(ForeignKey("runs.id"))
    verdict: Mapped[str] = NotNull(String(16))  # pass | regression | undecided
    exit_code: Mapped[int] = NotNull()
    report: Mapped[dict[str, Any]] = NotNull()
    created_at: Mapped[datetime] = NotNull(default=utcnow)
