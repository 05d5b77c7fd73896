"""Stack: one fingerprint digest of the keys that break history (DESIGN §4)."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import String
from sqlalchemy.orm import Mapped

from .base import Base, NotNull, Nullable, utcnow


class Stack(Base):
    __tablename__ = "stacks"

    id: Mapped[int] = NotNull(primary_key=True)
    digest: Mapped[str] = NotNull(String(64), unique=True)
    name: Mapped[str | None] = Nullable(String(128))
    schema_version: Mapped[int] = NotNull()
    keys: Mapped[dict[str, Any]] = NotNull()
    created_at: Mapped[datetime] = NotNull(default=utcnow)
