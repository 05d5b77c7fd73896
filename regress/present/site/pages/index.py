"""The index: open regressions, the latest run per stack (suite status, geomean speedup per mode
against each baseline, device state before and after per worker), recent change points, the case table."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import numpy as np

from regress.facts.metrics import HEADLINE, SPEEDUP_PREFIX
from regress.facts.stats import median

from ..data import STATUS_CODES, StackRow
from ..format import device_rows
from ..model import run_overview
from ..writer import sha
from .common import Pages


def index_rows(c: Pages) -> tuple[list[dict[str, Any]], list[StackRow]]:
    t = c.d.table
    cur = c.m.current_stacks
    rows = []
    open_cases = {r["case_id"]: r["state"] for r in c.d.regressions if r["state"] in ("open", "acknowledged")}
    recent_x = int(c.run_epoch.max()) - 14 * 86400 if len(c.run_epoch) else 0
    for case in sorted(c.d.cases.values(), key=lambda x: (x.suite != "perf", x.suite, x.name)):
        per = c.m.series.get(case.id, {})
        cells: list[dict[str, Any] | None] = []
        for s in cur:
            idx = per.get(s.id)
            if idx is None or not len(idx):
                cells.append(None)
                continue
            vals = t["value"][idx]
            last = float(vals[-1])
            prev = vals[max(0, len(vals) - 8) : len(vals) - 1]
            prev = prev[~np.isnan(prev)]
            delta = (last / median(prev) - 1.0) if len(prev) and median(prev) else None
            sp = float(t["speedup"][idx[-1]])
            cells.append(
                {
                    "v": last,
                    "d": delta,
                    "sp": None if np.isnan(sp) else sp,
                    "st": STATUS_CODES[int(t["status"][idx[-1]])],
                }
            )
        recent = [
            ch
            for ch in c.m.changes.get(case.id, [])
            if c.run_epoch[int(t["run"][ch.row])] >= recent_x and ch.stack_id in {s.id for s in cur}
        ]
        rows.append(
            {
                "case": case,
                "metric": _metric(case.suite),
                "href": c.case_href(case),
                "stacks": " ".join(str(s.id) for s in cur if per.get(s.id) is not None),
                "cells": cells,
                "reg": open_cases.get(case.id),
                "change": recent[-1] if recent else None,
            }
        )
    return rows, cur


def _metric(suite: str) -> str:
    head = HEADLINE.get(suite)
    return f"{head.label} ({head.unit})" if head else ""


def columns(c: Pages, stacks: list[StackRow]) -> list[dict[str, Any]]:
    """One value column and one speedup column per current stack; the speedup's baseline is the
    one its latest run measured against."""
    out = []
    for s in stacks:
        run = c.m.latest_run.get(s.id)
        base = c.d.speedup_name.get(run.id, "") if run else ""
        out.append({**c.stack_ref(s.id), "baseline": base.removeprefix(SPEEDUP_PREFIX)})
    return out


def index(c: Pages) -> None:
    latest = []
    for sid, run in sorted(c.m.latest_run.items(), key=lambda kv: kv[1].started_at, reverse=True):
        latest.append(
            {
                "stack": c.stack_ref(sid),
                "run": run,
                "overview": run_overview(c.m, run),
                "devices": device_rows(run.gpu_state),
                "retired_by": c.stack_ref(c.m.successor[sid]) if sid in c.m.successor else None,
            }
        )
    live = [r for r in c.regression_views() if r["state"] in ("open", "acknowledged")]
    regs = [r for r in live if not r["drill"]]
    drills = [r for r in live if r["drill"]]
    rows, cur = index_rows(c)
    shapes = sorted({r["case"].shape for r in rows if r["case"].shape})
    recent_changes = []
    t = c.d.table
    for case_id, marks in c.m.changes.items():
        for ch in marks:
            recent_changes.append((int(c.run_epoch[int(t["run"][ch.row])]), case_id, ch))
    recent_changes.sort(key=lambda x: x[0], reverse=True)
    ctx = {
        "title": "Overview",
        "latest": latest,
        "regressions": regs,
        "drills": drills,
        "rows": rows,
        "columns": columns(c, cur),
        "filters": {
            "suite": sorted({r["case"].suite for r in rows}),
            "shape": shapes,
            "mode": sorted({r["case"].mode for r in rows if r["case"].mode}),
            "layout": sorted({r["case"].layout for r in rows if r["case"].layout}),
        },
        "changes": [
            {
                "case": c.d.cases[cid],
                "mark": ch,
                "stack": c.stack_ref(ch.stack_id),
                "when": datetime.fromtimestamp(x, UTC).replace(tzinfo=None),
            }
            for x, cid, ch in recent_changes[:12]
        ],
        "detector": c.m.detector,
        "generated": c.generated,
        "counts": {"runs": len(c.d.runs), "cases": len(c.d.cases), "stacks": len(c.d.stacks)},
    }
    # The "generated" stamp is left out of the key: an unchanged store keeps the index unchanged.
    key_ctx = {k: v for k, v in ctx.items() if k != "generated"}
    c.w.page("index.html", "index.html.j2", sha(repr(key_ctx)), lambda: ctx)
