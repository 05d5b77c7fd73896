"""Build: one compiled kernel artifact and the compiler's report on it."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import ForeignKey, String, Text, UniqueConstraint
from sqlalchemy.orm import Mapped, Session

from .base import Base, NotNull, Nullable, utcnow

# What an artifact hash determines. The git commit is provenance, not content: one artifact is
# rebuilt at every commit that leaves the kernel sources alone (the run carries its kernel_commit).
BUILD_FACTS = ("source_hash", "compiler", "compiler_version", "flags", "compile_only", "stats", "inject")


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

    @classmethod
    def for_artifact(cls, session: Session, stack_id: int, build: dict[str, Any]) -> Build:
        """The build row of a BuildArtifact-shaped dict (backend, source_hash, git_commit, compiler,
        ...) on this stack, created if new."""
        return cls.get_or_create(
            session,
            {"stack_id": stack_id, "backend": build["backend"], "artifact_hash": build["artifact_hash"]},
            source_hash=build["source_hash"],
            git_commit=build.get("git_commit"),
            git_dirty=bool(build.get("git_dirty", False)),
            compiler=build["compiler"],
            compiler_version=build["compiler_version"],
            flags=list(build["flags"]),
            compile_only=bool(build.get("compile_only", False)),
            stats=dict(build.get("stats") or {}),
            inject=dict(build.get("inject") or {}),
        )

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
