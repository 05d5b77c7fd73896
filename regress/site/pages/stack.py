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
    for v in views:
        s = v["stack"]
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
