"""Case: what is measured. Named by kernel, suite and parameters; the key is stable across runs."""

from __future__ import annotations

from typing import Any

from sqlalchemy import Index, String
from sqlalchemy.orm import Mapped, Session

from regress.facts.results import CaseSpec

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

    @staticmethod
    def columns_of(spec: CaseSpec) -> dict[str, Any]:
        """The columns of a case row (the shape columns are copies of params, for filtering)."""
        p = spec.params
        return {
            "key": spec.key,
            "kernel": spec.kernel,
            "suite": spec.suite,
            "name": spec.name,
            "params": p,
            "b": p.get("b"),
            "h": p.get("h"),
            "sq": p.get("sq"),
            "sk": p.get("sk"),
            "d": p.get("d"),
            "layout": p.get("layout"),
            "mode": p.get("mode"),
        }

    @classmethod
    def for_spec(cls, session: Session, spec: CaseSpec) -> Case:
        """The case row of this spec, created if new."""
        values = cls.columns_of(spec)
        return cls.get_or_create(session, {"key": values.pop("key")}, **values)

    def spec(self) -> CaseSpec:
        return CaseSpec(suite=self.suite, name=self.name, params=self.params, kernel=self.kernel)
