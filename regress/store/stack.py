"""Stack: one fingerprint digest of the keys that break history (DESIGN §4)."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import String
from sqlalchemy.orm import Mapped, Session

from .base import Base, NotNull, Nullable, utcnow


class Stack(Base):
    __tablename__ = "stacks"

    id: Mapped[int] = NotNull(primary_key=True)
    digest: Mapped[str] = NotNull(String(64), unique=True)
    name: Mapped[str | None] = Nullable(String(128))
    schema_version: Mapped[int] = NotNull()
    keys: Mapped[dict[str, Any]] = NotNull()
    created_at: Mapped[datetime] = NotNull(default=utcnow)

    @classmethod
    def for_digest(
        cls, session: Session, *, digest: str, keys: dict[str, Any], schema_version: int, name: str | None
    ) -> Stack:
        """The stack row of this digest, created if new; a name given later fills a nameless row."""
        stack = cls.get_or_create(
            session, {"digest": digest}, keys=keys, schema_version=schema_version, name=name
        )
        if name and not stack.name:
            stack.name = name
        return stack

    def to_bundle(self) -> dict[str, Any]:
        """The bundle's `stack` section."""
        return {
            "digest": self.digest,
            "name": self.name,
            "schema_version": self.schema_version,
            "keys": self.keys,
        }
