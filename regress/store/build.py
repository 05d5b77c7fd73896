"""Build: one compiled kernel artifact and the compiler's report on it, as one runner recorded it.

A build row is keyed by its whole record (`record`, the SHA-256 of every field: source hash, git
commit, compiler, flags, artifact hash, stats, inject...), not by its artifact hash alone: when the
artifact was the key, the first uploader's facts stood for every later run of that artifact, so a
runner that wrote different ones (a mutant that dropped one `stats` key) made 714 later genuine
uploads answer 409 for good (issue 41 item 13). Two records of one artifact are two rows; each run
points at its own, and reads back the build it sent.
"""

from __future__ import annotations

import hashlib
import json
from datetime import datetime
from typing import Any

from sqlalchemy import ForeignKey, String, Text, UniqueConstraint
from sqlalchemy.orm import Mapped, Session

from .base import Base, NotNull, Nullable, utcnow


def record_digest(fields: dict[str, Any]) -> str:
    """The key of a build record (regress.facts.bundle.build_fields): SHA-256 of its canonical JSON, numbers
    `normalised` (a re-sent 128.0 is the stored 128, as the idempotency check reads them)."""
    from regress.facts.bundle import normalised

    text = json.dumps(normalised(fields), sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()


class Build(Base):
    __tablename__ = "builds"
    __table_args__ = (UniqueConstraint("stack_id", "record"),)

    id: Mapped[int] = NotNull(primary_key=True)
    stack_id: Mapped[int] = NotNull(ForeignKey("stacks.id"))
    record: Mapped[str] = NotNull(String(64))  # record_digest of every field below but created_at
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

    @classmethod
    def for_artifact(cls, session: Session, stack_id: int, build: dict[str, Any]) -> Build:
        """The build row of a BuildArtifact-shaped dict (backend, source_hash, git_commit, compiler,
        ...) on this stack: the row of exactly this record, created if new."""
        from regress.facts.bundle import build_fields

        fields = build_fields(build)
        return cls.get_or_create(session, {"stack_id": stack_id, "record": record_digest(fields)}, **fields)

    def to_bundle(self) -> dict[str, Any]:
        """The bundle's `build` section."""
        return {
            "backend": self.backend,
            "source_hash": self.source_hash,
            "git_commit": self.git_commit,
            "git_dirty": self.git_dirty,
            "compiler": self.compiler,
            "compiler_version": self.compiler_version,
            "flags": self.flags,
            "artifact_hash": self.artifact_hash,
            "compile_only": self.compile_only,
            "stats": self.stats,
            "inject": self.inject,
        }
