"""Stack pages: the list, one page per stack, and the key-by-key diff of two stacks."""

from __future__ import annotations

import functools
from typing import Any

from .. import predicted
from ..data import RunRow, StackRow
from ..model import stack_diff
from ..writer import sha
from .common import Pages


def stack_pages(c: Pages) -> None:
    stacks = sorted(c.d.stacks.values(), key=lambda s: s.label)
    counts = {s.id: 0 for s in stacks}
    first: dict[int, RunRow] = {}
    last: dict[int, RunRow] = {}
    for rid in c.d.run_order:
        r = c.d.runs[rid]
        counts[r.stack_id] = counts.get(r.stack_id, 0) + 1
        first.setdefault(r.stack_id, r)
        last[r.stack_id] = r  # drills included: the span of the stack's runs, not its latest result
    pairs: list[tuple[StackRow, StackRow]] = []
    seen = set()
    for tr in c.m.transitions:
        if (tr.old, tr.new) not in seen:
            seen.add((tr.old, tr.new))
            pairs.append((c.d.stacks[tr.old], c.d.stacks[tr.new]))
    if len(stacks) <= 12:  # every pair is cheap while there are few stacks
        for a in stacks:
            for b in stacks:
                if a.id < b.id and (a.id, b.id) not in seen and (b.id, a.id) not in seen:
                    seen.add((a.id, b.id))
                    pairs.append((a, b))
    views: list[dict[str, Any]] = [
        {
            "stack": s,
            "ref": c.stack_ref(s.id),
            "runs": counts.get(s.id, 0),
            "first": first.get(s.id),
            "last": last.get(s.id),
        }
        for s in stacks
    ]
    diff_links = [
        {
            "a": c.stack_ref(a.id),
            "b": c.stack_ref(b.id),
            "href": f"stack/diff-{a.slug}-{b.slug}.html",
            "n": sum(1 for row in stack_diff(a, b) if row["differs"]),
        }
        for a, b in pairs
    ]
    transitions: list[dict[str, Any]] = [
        {
            "old": c.stack_ref(tr.old),
            "new": c.stack_ref(tr.new),
            "run": c.d.runs[tr.run_id],
            "where": tr.where,
            "href": f"stack/diff-{c.d.stacks[tr.old].slug}-{c.d.stacks[tr.new].slug}.html",
        }
        for tr in c.m.transitions
    ]
    key = sha(
        repr([(v["stack"].digest, v["stack"].label, v["runs"]) for v in views]),
        repr(diff_links),
        repr([(t["run"].id, t["where"]) for t in transitions]),
    )
    ctx = {"title": "Stacks", "stacks": views, "diffs": diff_links, "transitions": transitions}
    c.w.page("stacks.html", "stacks.html.j2", key, lambda: ctx)
    pred = predicted.load(predicted.latest_file())
    by_stack: dict[int, list[RunRow]] = {}
    for rid in reversed(c.d.run_order):  # newest first
        by_stack.setdefault(c.d.runs[rid].stack_id, []).append(c.d.runs[rid])
    for v in views:
        s = v["stack"]
        v["recent"] = [_run_line(r) for r in by_stack.get(s.id, [])[:STACK_RUNS]]
        v["verdicts"] = _verdicts(c, s.id)
        v["predicted"] = pred if s.keys.get("backend") == predicted.BACKEND else None
        key = sha(
            repr(v["predicted"]),
            s.digest,
            s.label,
            repr(s.keys),
            repr(v["runs"]),
            repr(v["first"] and v["first"].id),
            repr(v["last"] and v["last"].id),
            repr(diff_links),
            repr(v["recent"]),
            repr(v["verdicts"]),
        )
        c.w.page(
            f"stack/{s.slug}.html",
            "stack.html.j2",
            key,
            functools.partial(functools.partial(stack_context, c), v, diff_links),
        )
    for a, b in pairs:
        rows = stack_diff(a, b)
        key = sha(a.digest, b.digest, a.label, b.label, repr(rows))
        c.w.page(
            f"stack/diff-{a.slug}-{b.slug}.html",
            "stack_diff.html.j2",
            key,
            functools.partial(functools.partial(diff_context, c), a, b, rows),
        )


STACK_RUNS = 30  # the newest runs a stack page lists (all of them: the runs page)
STACK_VERDICTS = 10


def _run_line(r: RunRow) -> dict[str, Any]:
    """One row of a stack page's run list; the counts are the run's own summary (a stored value
    that is not a count reads as 0: a reader never trusts a row's shape)."""
    suites = r.summary.get("suites") if isinstance(r.summary, dict) else None
    per_suite = [per for per in suites.values() if isinstance(per, dict)] if isinstance(suites, dict) else []

    def count(*statuses: str) -> int:
        return sum(n for per in per_suite for k in statuses if isinstance(n := per.get(k), int) and n > 0)

    return {
        "id": r.id,
        "started_at": r.started_at,
        "status": r.status,
        "trigger": r.trigger,
        "drill": r.is_drill,
        "commit": (r.kernel_commit or "")[:12],
        "results": r.n_results,
        "passed": count("pass"),
        "failed": count("fail", "error", "timeout"),
    }


def _verdicts(c: Pages, sid: int) -> list[dict[str, Any]]:
    """The newest gate decisions this stack took part in (as baseline or candidate)."""
    out = []
    for g in c.d.gates:
        base, cand = c.d.runs.get(g["baseline_run_id"]), c.d.runs.get(g["candidate_run_id"])
        if sid not in {r.stack_id for r in (base, cand) if r is not None}:
            continue
        out.append(
            {
                "id": g["id"],
                "verdict": g["verdict"],
                "created_at": g["created_at"],
                "baseline": g["baseline_run_id"],
                "candidate": g["candidate_run_id"],
                "role": "candidate" if cand is not None and cand.stack_id == sid else "baseline",
            }
        )
    out.sort(key=lambda g: str(g["created_at"] or ""), reverse=True)
    return out[:STACK_VERDICTS]


def stack_context(c: Pages, v: dict[str, Any], diff_links: list[dict[str, Any]]) -> dict[str, Any]:
    sid = v["stack"].id
    return {
        "title": f"Stack {v['stack'].label}",
        **v,
        "diffs": [d for d in diff_links if sid in (d["a"]["id"], d["b"]["id"])],
    }


def diff_context(c: Pages, a: StackRow, b: StackRow, rows: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "title": f"{a.label} vs {b.label}",
        "a": c.stack_ref(a.id),
        "b": c.stack_ref(b.id),
        "rows": rows,
        "ndiff": sum(1 for r in rows if r["differs"]),
    }
