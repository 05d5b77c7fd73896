"""What the gate and `compare` return: the table's rows and the report around them.

Plain data, so the core that decides (`core.py`) and the renderers that write it (`render.py`)
both import it and neither imports the other for its types.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any


@dataclass
class GateRow:
    """One case of the table. mark: + slower, - faster, ~ unclear, ? missing/insufficient, x failed.

    mde: the smallest slowdown this comparison would have caught (perf only; None elsewhere);
    advice: for a case too noisy to pass, why and what would make it decidable."""

    suite: str
    case: str
    case_key: str
    mark: str
    status: str  # regression | improvement | same | undecided
    metric: str
    baseline: float | None = None
    candidate: float | None = None
    ratio: float | None = None
    p_value: float | None = None
    threshold: float | None = None
    note: str = ""
    mde: float | None = None
    limited_by: str = ""
    noise: float | None = None
    advice: str = ""


@dataclass
class GateReport:
    baseline_run: str | None
    candidate_run: str | None
    verdict: str | None  # None for `compare`
    exit_code: int
    reasons: list[str] = field(default_factory=list)
    rows: list[GateRow] = field(default_factory=list)
    baseline_info: dict[str, Any] = field(default_factory=dict)
    candidate_info: dict[str, Any] = field(default_factory=dict)
    reports: dict[str, str] = field(default_factory=dict)
    decision_id: int | None = None
    aggregate: dict[str, Any] = field(default_factory=dict)
    power: dict[str, Any] = field(default_factory=dict)

    @property
    def regressions(self) -> list[GateRow]:
        return [r for r in self.rows if r.status == "regression"]

    @property
    def too_noisy(self) -> list[GateRow]:
        return [r for r in self.rows if r.advice]

    def to_dict(self) -> dict[str, Any]:
        return {
            "baseline_run": self.baseline_run,
            "candidate_run": self.candidate_run,
            "verdict": self.verdict,
            "exit_code": self.exit_code,
            "reasons": self.reasons,
            "baseline": self.baseline_info,
            "candidate": self.candidate_info,
            "aggregate": self.aggregate,
            "power": self.power,
            "rows": [asdict(r) for r in self.rows],
            "reports": self.reports,
        }
