"""Bulk writes for many finished runs at once (the demo history): Core inserts with ids assigned
here, in foreign-key order, inside the caller's one transaction.

Why not repo.add_result: one ORM flush per result makes 365 nights x 3 stacks x 300 cases take
minutes instead of seconds. The rows are the same ones repo writes for a nightly — a result's
headline value, metrics, device state and message, one samples row per series — so every reader
sees a bulk-written run exactly as a nightly's. (The ingest service keeps its own writer in
ingest.py; this one serves the demo.)
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import Table, func, insert, select
from sqlalchemy.orm import Session

from ..metrics import headline_value
from ..results import CaseResult
from .gate import GateDecision
from .regression import Regression
from .result import Result, Sample
from .run import Run


def _table(model: type[Any]) -> Table:
    table = model.__table__
    assert isinstance(table, Table)
    return table


class BulkWriter:
    """Queues run, result and sample rows; flush() inserts them (also every `flush_every` results)."""

    def __init__(self, session: Session, *, flush_every: int = 20_000) -> None:
        self.session = session
        self.flush_every = flush_every
        self.next_result = (session.scalar(select(func.max(Result.id))) or 0) + 1
        self.next_sample = (session.scalar(select(func.max(Sample.id))) or 0) + 1
        self.runs: list[dict[str, Any]] = []
        self.results: list[dict[str, Any]] = []
        self.samples: list[dict[str, Any]] = []
        self.written = 0

    def run(self, row: dict[str, Any]) -> None:
        """A finished run: every column of runs (id, stack_id, status, summary, ...)."""
        self.runs.append(row)

    def result(self, run_id: str, case_id: int, result: CaseResult) -> int:
        rid = self.next_result
        self.next_result += 1
        self.results.append(
            {
                "id": rid,
                "run_id": run_id,
                "case_id": case_id,
                "status": result.status,
                "value": headline_value(result.case.suite, result.metrics),
                "metrics": result.metrics,
                "device": result.device,
                "message": result.message,
            }
        )
        for name, values in result.samples.items():
            self.samples.append({"id": self.next_sample, "result_id": rid, "name": name, "values": values})
            self.next_sample += 1
        if len(self.results) >= self.flush_every:
            self.flush()
        return rid

    def flush(self) -> None:
        # A result's run must be in before it: runs first, then results, then their samples.
        for model, rows in ((Run, self.runs), (Result, self.results), (Sample, self.samples)):
            if rows:
                self.session.execute(insert(_table(model)), rows)
        self.written += len(self.results)
        self.runs, self.results, self.samples = [], [], []

    def regressions(self, rows: list[dict[str, Any]]) -> None:
        self.flush()
        if rows:
            self.session.execute(insert(_table(Regression)), rows)

    def gate_decision(self, row: dict[str, Any]) -> None:
        self.flush()
        self.session.execute(insert(_table(GateDecision)), [row])
