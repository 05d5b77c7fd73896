"""Regressions (list and Atom feed) and gate decisions."""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any

from ..writer import sha
from .common import Pages


def regression_pages(c: Pages) -> None:
    views = c.regression_views()
    key = sha(
        repr([(r["id"], r["state"], r["note"], r["magnitude"], r["updated_at"]) for r in views]),
        c.case_names_hash,
        c.stack_names_hash,
    )
    c.w.page(
        "regressions.html",
        "regressions.html.j2",
        key,
        lambda: {
            "title": "Regressions",
            "regressions": [r for r in views if not r["drill"]],
            "drills": [r for r in views if r["drill"]],
        },
    )
    newest = sorted(views, key=lambda r: r["created_at"] or datetime.min, reverse=True)[:50]
    updated = max(
        (r["updated_at"] or r["created_at"] for r in newest if r["updated_at"] or r["created_at"]),
        default=None,
    )
    c.w.page(
        "feed.xml",
        "feed.xml.j2",
        key,
        lambda: {
            "entries": newest,
            "updated": (updated or datetime(1970, 1, 1)).strftime("%Y-%m-%dT%H:%M:%SZ"),
            "base_url": c.base_url,
        },
    )


def gate_pages(c: Pages) -> None:
    views = []
    for g in c.d.gates:
        views.append(
            {
                **g,
                "baseline": c.d.runs.get(g["baseline_run_id"]),
                "candidate": c.d.runs.get(g["candidate_run_id"]),
                "mode": _gate_mode(g["report"]),
            }
        )
    views.sort(key=lambda g: g["created_at"] or datetime.min, reverse=True)
    key = sha(repr([(g["id"], g["verdict"], g["created_at"]) for g in views]), c.stack_names_hash)
    c.w.page("gates.html", "gates.html.j2", key, lambda: {"title": "Gate decisions", "gates": views})
    for g in views:
        report = g["report"] if isinstance(g["report"], dict) else {"report": g["report"]}
        key = sha(json.dumps(report, sort_keys=True, default=str), repr(g["verdict"]), repr(g["exit_code"]))

        def ctx(g: dict[str, Any] = g, report: dict[str, Any] = report) -> dict[str, Any]:
            return {
                "title": f"Gate decision {g['id']}",
                "gate": g,
                "sections": _report_sections(report),
                "stacks": {
                    k: c.stack_ref(g[k].stack_id) for k in ("baseline", "candidate") if g[k] is not None
                },
                "case_links": {k.name: f"case/{k.key}.html" for k in c.d.cases.values()},
            }

        c.w.page(f"gate/{g['id']}.html", "gate.html.j2", key, ctx)


def _gate_mode(report: Any) -> str:
    """ "A/B" for a gate of one run's two builds timed in the same rounds, else "cross-night"."""
    power = report.get("power") if isinstance(report, dict) else None
    return "A/B" if isinstance(power, dict) and power.get("mode") == "ab" else "cross-night"


def _report_sections(report: dict[str, Any]) -> list[dict[str, Any]]:
    """A gate report of any shape: scalars as a list, lists of dicts as tables, dicts as key/value."""
    scalars, sections = [], []
    for k, v in report.items():
        if isinstance(v, list) and v and all(isinstance(x, dict) for x in v):
            cols: list[str] = []
            for x in v:
                cols += [col for col in x if col not in cols]
            sections.append({"kind": "table", "name": k, "columns": cols, "rows": v})
        elif isinstance(v, dict):
            sections.append({"kind": "dict", "name": k, "items": list(v.items())})
        else:
            scalars.append((k, v))
    return [{"kind": "scalars", "name": "", "items": scalars}, *sections] if scalars else sections
