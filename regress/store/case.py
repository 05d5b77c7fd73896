"""Case: what is measured. Named by kernel, suite and parameters; the key is stable across runs."""

from __future__ import annotations

from typing import Any

from sqlalchemy import Index, String
from sqlalchemy.orm import Mapped

from .base import Base, NotNull, Nullable


class Case(Base):
    __tablename__ = "cases"
    __table_args__ = (Index("ix_cases_suite_kernel", "suite", "kernel"),)

    id: Mapped[int] = NotNull(primary_key=True)
    key: Mapped[str] = NotNull(String(32), unique=True)
    kernel: Mapped[str] = NotNull(String(64))
    suite: Mapped[str] = NotNull(String(32))
    name: Mapped[str] = NotNull(String(256))
    params: Mapped[dict[str, Any]] = NotNull()
    # Shape columns copied out of params so the site and the export can filter without JSON queries.
    b: Mapped[int | None] = Nullable()
    h: Mapped[int | None] = Nullable()
    sq: Mapped[int | None] = Nullable()
    sk: Mapped[int | None] = Nullable()
    d: Mapped[int | None] = Nullable()
    layout: Mapped[str | None] = Nullable(String(8))
    mode: Mapped[str | None] = Nullable(String(8))
