"""Result and its raw samples: one case in one run, written together in one transaction."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from sqlalchemy import Float, ForeignKey, Index, String, Text, UniqueConstraint
from sqlalchemy.orm import Mapped, relationship

from regress.facts.metrics import headline_value
from regress.facts.results import CaseResult, stored_series

from .base import Base, NotNull, Nullable

if TYPE_CHECKING:
    from .case import Case


class Result(Base):
    __tablename__ = "results"
    __table_args__ = (
        UniqueConstraint("run_id", "case_id"),
        Index("ix_results_case_run", "case_id", "run_id"),
    )

    id: Mapped[int] = NotNull(primary_key=True)
    run_id: Mapped[str] = NotNull(ForeignKey("runs.id", ondelete="CASCADE"))
    case_id: Mapped[int] = NotNull(ForeignKey("cases.id"))
    status: Mapped[str] = NotNull(String(8))
    # The headline number of the case (p50_ms for perf, max scaled ULP for ulp...), for trend queries.
    value: Mapped[float | None] = Nullable(Float)
    metrics: Mapped[dict[str, Any]] = NotNull()
    device: Mapped[dict[str, Any]] = NotNull()
    message: Mapped[str] = NotNull(Text, default="")

    # In insertion order on every backend (PostgreSQL returns the selectin load in no fixed order),
    # so an exported bundle lists a result's series as the run wrote them.
    samples: Mapped[list[Sample]] = relationship(
        back_populates="result", cascade="all, delete-orphan", lazy="selectin", order_by="Sample.id"
    )

    @classmethod
    def of_case_result(cls, run_id: str, case_id: int, result: CaseResult) -> Result:
        """The row of one result with one samples row per series (headline value from metrics)."""
        row = cls(
            run_id=run_id,
            case_id=case_id,
            status=result.status,
            value=headline_value(result.case.suite, result.metrics),
            metrics=result.metrics,
            device=result.device,
            message=result.message,
        )
        row.samples = [
            Sample(name=name, values=stored_series(values)) for name, values in result.samples.items()
        ]
        return row

    def to_case_result(self, case: Case, samples: bool = True) -> CaseResult:
        """samples=False: without the raw samples (not loaded, if the query did not load them)."""
        return CaseResult(
            case=case.spec(),
            status=self.status,  # type: ignore[arg-type]
            metrics=self.metrics,
            samples={s.name: s.values for s in self.samples} if samples else {},
            message=self.message,
            device=self.device,
        )


class Sample(Base):
    """Raw series of one result, stored verbatim (every timing, in milliseconds)."""

    __tablename__ = "samples"
    __table_args__ = (UniqueConstraint("result_id", "name"),)

    id: Mapped[int] = NotNull(primary_key=True)
    result_id: Mapped[int] = NotNull(ForeignKey("results.id", ondelete="CASCADE"))
    name: Mapped[str] = NotNull(String(128))
    values: Mapped[list[float]] = NotNull()

    result: Mapped[Result] = relationship(back_populates="samples")
