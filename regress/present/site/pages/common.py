"""What every page writer shares: the model, the writer, and the references pages make to each
other (a stack's swatch and slug, a case's href, a regression's view)."""

from __future__ import annotations

from datetime import datetime
from typing import Any

import numpy as np

from ..data import CaseRow, SiteData
from ..format import epoch
from ..model import Model
from ..writer import SiteWriter, sha

STATE_ORDER = {"open": 0, "acknowledged": 1, "resolved": 2}


class Pages:
    def __init__(
        self, model: Model, writer: SiteWriter, *, base_url: str | None, generated: datetime
    ) -> None:
        self.m = model
        self.d: SiteData = model.data
        self.w = writer
        self.base_url = base_url
        self.generated = generated
        self.stack_index = {sid: i for i, sid in enumerate(sorted(self.d.stacks))}
        self.run_epoch = np.asarray(
            [epoch(self.d.runs[r].started_at) for r in self.d.run_order], dtype=np.int64
        )
        self.run_commit = [(self.d.runs[r].kernel_commit or "")[:10] for r in self.d.run_order]
        self.case_names_hash = sha(*(f"{c.id}:{c.key}:{c.name}" for c in self.d.cases.values()))
        ranked = sorted(self.d.cases.values(), key=lambda c: (c.suite, c.name))
        self.case_ids = np.asarray([c.id for c in ranked], dtype=np.int64)
        self.case_rank = np.zeros(max(self.d.cases, default=0) + 1, dtype=np.int64)
        for k, c in enumerate(ranked):
            self.case_rank[c.id] = k
        self.stack_names_hash = sha(*(f"{s.id}:{s.label}:{s.digest}" for s in self.d.stacks.values()))

    # common bits
    def stack_ref(self, sid: int) -> dict[str, Any]:
        s = self.d.stacks[sid]
        return {
            "id": sid,
            "name": s.label,
            "digest": s.digest[:12],
            "slug": s.slug,
            "color": self.stack_index[sid],
            "current": sid not in self.m.successor,
        }

    def case_href(self, case: CaseRow) -> str:
        return f"case/{case.key}.html"

    def reg_view(self, reg: dict[str, Any]) -> dict[str, Any]:
        case = self.d.cases.get(reg["case_id"])
        first = self.d.runs.get(reg["first_run_id"])
        return {
            **reg,
            "case": case,
            "stack": self.stack_ref(reg["stack_id"]) if reg["stack_id"] in self.d.stacks else None,
            "since": first.started_at if first else None,
            "title": (reg.get("details") or {}).get("title", ""),
            # A fire drill's finding: stored acknowledged on purpose, shown apart from real ones.
            "drill": bool((reg.get("details") or {}).get("drill")) or bool(first and first.is_drill),
        }

    def regression_views(self) -> list[dict[str, Any]]:
        views = [self.reg_view(r) for r in self.d.regressions]
        views.sort(key=lambda r: (STATE_ORDER.get(r["state"], 9), -(r["since"] or datetime.min).timestamp()))
        return views
