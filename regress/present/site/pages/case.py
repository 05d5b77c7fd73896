"""Case pages (case/<key>.html): the trend chart per stack with its p5–p95 band, change points,
stack transitions and regressions, and the ULP and determinism series of the same shape beneath."""

from __future__ import annotations

import functools
import hashlib
from datetime import UTC, datetime
from typing import Any

import numpy as np

from regress.facts.metrics import HEADLINE, SPEEDUP_PREFIX, scaled_ulp_limit
from regress.facts.suite_facts import EXACT_SUITES, is_timed

from ..data import STATUS_CODES, CaseRow
from ..format import clean, epoch, finite_json, script_json
from .common import STATE_ORDER, Pages

MAX_CHANGE_ROWS = 15  # the table under a chart; the chart marks them all
# "Related cases" on a case page: this many links, then a count and a link to the shape's full list
# (shape/<key>.html); this many ULP and determinism charts each. Every case page listed every case of
# its shape, so 1,000 results of one shape made 99 MB of pages and 5,000 made 2.3 GB (issue 24).
MAX_RELATED = 24
MAX_RELATED_CHARTS = 4


def case_payload(c: Pages, case: CaseRow) -> dict[str, Any]:
    t = c.d.table
    stacks = []
    for sid, idx in sorted(c.m.series.get(case.id, {}).items(), key=lambda kv: c.stack_index[kv[0]]):
        # The launch plan each point ran (perf and e2e record it), where any did.
        plans = [c.d.plans.get(rid, "") for rid in t["id"][idx].tolist()]
        stacks.append(
            {
                **({"pl": plans} if any(plans) else {}),
                **c.stack_ref(sid),
                "r": t["run"][idx],  # global run indices; case_pages maps them to the page's run table
                "y": clean(t["value"][idx]),
                "lo": clean(t["lo"][idx]),
                "hi": clean(t["hi"][idx]),
                "sp": clean(t["speedup"][idx], 4),
                "st": t["status"][idx].tolist(),
            }
        )
    present = {s["id"] for s in stacks}
    markers = []
    for tr in c.m.transitions:
        if tr.new in present:
            old, new = c.d.stacks[tr.old], c.d.stacks[tr.new]
            markers.append(
                {
                    "x": int(c.run_epoch[c.m.run_index[tr.run_id]]),
                    "label": f"{old.label} → {new.label}",
                    "href": f"stack/diff-{old.slug}-{new.slug}.html",
                }
            )
    changes = []
    for ch in c.m.changes.get(case.id, []):
        changes.append(
            {
                "stack": ch.stack_id,
                "x": int(c.run_epoch[int(t["run"][ch.row])]),
                "y": float(t["value"][ch.row]),
                "dir": ch.direction,
                "mag": ch.magnitude,
                "p": ch.p_value,
                "run": ch.run_id,
            }
        )
    regs = []
    for reg in c.m.regressions_by_case.get(case.id, []):
        first = c.d.runs.get(reg["first_run_id"])
        if first is not None:
            regs.append(
                {
                    "stack": reg["stack_id"],
                    "x": epoch(first.started_at),
                    "state": reg["state"],
                    "label": f"{reg['state']} {reg['kind']} regression: {reg['metric']}",
                }
            )
    suite = case.suite
    head = HEADLINE.get(suite)
    # The speedup's baseline as the runs of this series name it (sdpa_cudnn on CUDA, aiter on ROCm).
    bases = sorted(
        {
            c.d.speedup_name.get(c.d.run_order[r], "").removeprefix(SPEEDUP_PREFIX)
            for idx in c.m.series.get(case.id, {}).values()
            for r in t["run"][idx].tolist()
        }
        - {""}
    )
    return {
        "name": case.name,
        "suite": suite,
        "unit": head.unit if head else "",
        "label": f"{head.label} ({head.unit})" if head else "value",
        "band": is_timed(suite),
        "limit": scaled_ulp_limit(case.mode) if suite == "ulp" else None,
        "speedup": is_timed(suite),
        "speedup_label": f"speedup vs {' / '.join(bases) or 'the baseline'} (×)",
        "stacks": stacks,
        "plans": any("pl" in s for s in stacks),
        "markers": markers,
        "changes": changes,
        "regressions": regs,
    }


def charted(c: Pages, case: CaseRow) -> list[CaseRow]:
    """The ULP and determinism cases charted beneath a perf or e2e case (bounded)."""
    if not is_timed(case.suite):
        return []
    return [o for suite in EXACT_SUITES for o in c.m.related(case.id, MAX_RELATED_CHARTS, suite)[0]]


def shape_key(case: CaseRow) -> str:
    return hashlib.sha1(
        repr((case.b, case.h, case.sq, case.sk, case.layout, case.mode)).encode()
    ).hexdigest()[:16]


def related_payload(c: Pages, case: CaseRow) -> list[dict[str, Any]]:
    out = []
    for other in charted(c, case):
        p = case_payload(c, other)
        for s in p["stacks"]:  # beneath the main chart only values matter
            for k in ("lo", "hi", "sp"):
                s.pop(k)
        p["href"] = f"{other.key}.html"
        out.append(p)
    return out


def series_hash(c: Pages, case: CaseRow, h: Any) -> None:
    """Feeds everything a case's charts show into h, without building the page's JSON."""
    t = c.d.table
    for sid, idx in sorted(c.m.series.get(case.id, {}).items()):
        runs = t["run"][idx]
        h.update(f"{sid}|{len(idx)}|".encode())
        for col in ("value", "lo", "hi", "speedup", "status"):
            h.update(t[col][idx].tobytes())
        h.update("".join([c.d.run_order[i] + c.run_commit[i] for i in runs.tolist()]).encode())
        h.update(c.run_epoch[runs].tobytes())
    marks = [
        (ch.stack_id, ch.run_id, ch.direction, ch.magnitude, ch.p_value)
        for ch in c.m.changes.get(case.id, [])
    ]
    h.update(repr(marks).encode())


def case_key(c: Pages, case: CaseRow) -> str:
    h = hashlib.sha1()
    series_hash(c, case, h)
    shown, total = c.m.related(case.id, MAX_RELATED)
    h.update(repr([(o.key, o.name, o.suite) for o in shown] + [total]).encode())
    for other in charted(c, case):
        h.update(other.key.encode())
        series_hash(c, other, h)
    regs = c.m.regressions_by_case.get(case.id, [])
    h.update(
        repr([(r["id"], r["state"], r["note"], r["magnitude"], r["first_run_id"]) for r in regs]).encode()
    )
    h.update(repr([(tr.run_id, tr.old, tr.new) for tr in c.m.transitions]).encode())
    h.update((c.stack_names_hash + c.m.detector + case.name + repr(case.params)).encode())
    return h.hexdigest()


def case_context(c: Pages, case: CaseRow) -> dict[str, Any]:
    payload = case_payload(c, case)
    related = related_payload(c, case)
    shown, total = c.m.related(case.id, MAX_RELATED)
    # One run table per page (id, commit, time); points refer to it by index, so the ULP and
    # determinism charts beneath do not repeat 24-character run ids.
    series = [s for p in (payload, *related) for s in p["stacks"]]
    used = np.unique(np.concatenate([s["r"] for s in series])) if series else np.zeros(0, np.int64)
    for s in series:
        s["r"] = np.searchsorted(used, s["r"]).tolist()
    ids = used.tolist()
    runs = {
        "id": [c.d.run_order[i] for i in ids],
        "commit": [c.run_commit[i] for i in ids],
        "x": c.run_epoch[used].tolist() if len(used) else [],
    }
    chart = {"runs": runs, "main": payload, "related": related}
    regs = [c.reg_view(r) for r in c.m.regressions_by_case.get(case.id, [])]
    regs.sort(key=lambda r: STATE_ORDER.get(r["state"], 9))
    changes = sorted(payload["changes"], key=lambda ch: ch["x"], reverse=True)
    return {
        "title": case.name,
        "case": case,
        "chart": chart,
        "chart_json": script_json(finite_json(chart)),
        "changes": changes[:MAX_CHANGE_ROWS],
        "more_changes": max(0, len(changes) - MAX_CHANGE_ROWS),
        "regressions": regs,
        "related": [{"case": o, "href": f"{o.key}.html"} for o in shown],
        "related_total": total,
        "related_all": f"../shape/{shape_key(case)}.html" if total > len(shown) else None,
        "latest": latest_rows(c, chart),
        "detector": c.m.detector,
    }


def case_pages(c: Pages) -> None:
    for case in c.d.cases.values():
        c.w.page(
            f"case/{case.key}.html",
            "case.html.j2",
            case_key(c, case),
            functools.partial(functools.partial(case_context, c), case),
        )
    for group in c.m.shapes.values():  # the full lists the case pages link to, one page per shape
        if len(group) - 1 > MAX_RELATED:
            rows = [(o.key, o.name, o.suite) for o in group]
            c.w.page(
                f"shape/{shape_key(group[0])}.html",
                "shape.html.j2",
                hashlib.sha1(repr(rows).encode()).hexdigest(),
                functools.partial(_shape_context, group),
            )


def _shape_context(group: list[CaseRow]) -> dict[str, Any]:
    first = group[0]
    shape = f"b={first.b} h={first.h} sq={first.sq} sk={first.sk} {first.layout} {first.mode}"
    return {"title": f"Cases at {shape}", "shape": shape, "cases": group}


def latest_rows(c: Pages, chart: dict[str, Any], n: int = 5) -> list[dict[str, Any]]:
    """The last n points per stack as a table: the page says the same without JavaScript."""
    rows = []
    runs = chart["runs"]
    for s in chart["main"]["stacks"]:
        for i in range(max(0, len(s["r"]) - n), len(s["r"])):
            r = s["r"][i]
            rows.append(
                {
                    "stack": s,
                    "when": datetime.fromtimestamp(runs["x"][r], UTC).replace(tzinfo=None),
                    "run": runs["id"][r],
                    "commit": runs["commit"][r],
                    "value": s["y"][i],
                    "lo": s["lo"][i],
                    "hi": s["hi"][i],
                    "sp": s["sp"][i],
                    "plan": s["pl"][i] if "pl" in s else "",
                    "status": STATUS_CODES[s["st"][i]],
                }
            )
    return rows
