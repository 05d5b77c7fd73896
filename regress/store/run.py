"""Run: one invocation of the suites on one stack. A crash leaves it 'incomplete'.

A run is identified by its runner and the id its runner gave it (`given_id`, the bundle's run.id):
each runner names its own runs. `id` is the store's key, the one every other table and every reader
refers to; it is the given id unless another runner's run already holds that key, and then
`qualified_key` (issue 41 item 14: a runner that stored content under another runner's spooled run
id locked that runner's genuine upload out with 403 for ever)."""

from __future__ import annotations

import hashlib
from datetime import datetime
from typing import Any

from sqlalchemy import ForeignKey, Index, String, Text, UniqueConstraint
from sqlalchemy.engine.default import DefaultExecutionContext
from sqlalchemy.orm import Mapped

from .base import Base, NotNull, Nullable, utcnow

# 'cancelled': a stop signal ended it like a deadline (every case has a status, the bundle is
# written); like 'incomplete' it is never a baseline. The column is a plain String(16): no migration.
RUN_STATES = ("running", "complete", "failed", "incomplete", "cancelled")
# A run that ended by itself; "incomplete" runs are never baselines, "running" ones not yet.
FINISHED_STATES = ("complete", "failed")
# The note the reaper appends to a local run whose process ended while it was 'running'.
REAPED_NOTE = "process ended before the run finished"


RUN_KEY_LENGTH = 32  # runs.id and every column that refers to it
TRIGGER_LENGTH = 32  # runs.trigger (`regress nightly --trigger` checks against it)


def qualified_key(given_id: str, runner: str | None) -> str:
    """The key of a run whose given id is already another runner's key: the first 12 characters
    of the id (a time-sortable id's milliseconds, so keys still sort by time), '.', and 19 hex digits
    of SHA-256 over (runner, id). The '.' is outside every run id's pattern, so no runner can take
    this key by choosing its run id; the same (runner, id) always gets the same key, so two
    concurrent uploads of it meet on the primary key and the second reads the first."""
    digest = hashlib.sha256(f"{runner or ''}\0{given_id}".encode()).hexdigest()
    return f"{given_id[:12]}.{digest[: RUN_KEY_LENGTH - 13]}"


def _given_id_default(context: DefaultExecutionContext) -> Any:
    params: dict[str, Any] = context.get_current_parameters()  # type: ignore[no-untyped-call]
    return params["id"]  # a run stored under its own id (every local run)


class Run(Base):
    __tablename__ = "runs"
    __table_args__ = (
        Index("ix_runs_stack_started", "stack_id", "started_at"),
        UniqueConstraint("given_id", "runner"),
    )

    id: Mapped[str] = NotNull(String(RUN_KEY_LENGTH), primary_key=True)
    # The run id its runner gave it (the bundle's run.id): with `runner`, what identifies the run.
    given_id: Mapped[str] = NotNull(String(RUN_KEY_LENGTH), default=_given_id_default)
    stack_id: Mapped[int] = NotNull(ForeignKey("stacks.id"))
    build_id: Mapped[int | None] = Nullable(ForeignKey("builds.id"))
    status: Mapped[str] = NotNull(String(16), default="running")
    trigger: Mapped[str] = NotNull(String(TRIGGER_LENGTH), default="manual")
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
    # When this database wrote the row (NULL for rows from before migration 0003): a run deleted and
    # stored again under its id gets a new one, which the site's change check needs (RunRow.fingerprint).
    stored_at: Mapped[datetime | None] = Nullable(default=utcnow)

    def to_bundle(self) -> dict[str, Any]:
        """The bundle's `run` section (pid, origin and stored_at are this database's, not the run's)."""
        return {
            "id": self.given_id,
            "status": self.status,
            "trigger": self.trigger,
            "is_drill": self.is_drill,
            "backend": self.backend,
            "kernel_commit": self.kernel_commit,
            "source_hash": self.source_hash,
            "suites": self.suites,
            "runner": self.runner,
            "hostname": self.hostname,
            "host": self.host,
            "ci": self.ci,
            "gpu_state": self.gpu_state,
            "summary": self.summary,
            "message": self.message,
            "exit_code": self.exit_code,
            "started_at": _iso(self.started_at),
            "finished_at": _iso(self.finished_at),
        }

    @staticmethod
    def owner(run: dict[str, Any], runner: str | None) -> str | None:
        """The runner a validated bundle's run is stored for: the uploading token's, else (`regress
        import`) the one the bundle names."""
        return runner or run.get("runner")

    @staticmethod
    def columns_of_upload(
        run: dict[str, Any], *, key: str, stack_id: int, build_id: int | None, runner: str | None
    ) -> dict[str, Any]:
        """Every column of the row of a validated bundle's `run` section, stored as an upload under
        `key` (`runner`: the uploading token's, else the bundle's)."""
        # regress.facts.bundle (and jsonschema with it) is imported where a bundle is read, not when a
        # command opens the store (issue 11: `regress runs list` pays only for SQLAlchemy).
        from regress.facts.bundle import run_fields

        fields = run_fields(run)
        return {
            **fields,
            "id": key,
            "given_id": run["id"],
            "stack_id": stack_id,
            "build_id": build_id,
            "runner": Run.owner(run, runner),
            "pid": None,
            "origin": "upload",
            "started_at": fields["started_at"] or utcnow(),
        }


def _iso(value: datetime | None) -> str | None:
    return value.isoformat() if value else None
