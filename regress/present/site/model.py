"""What the pages show, derived from SiteData: series per (case, stack), stack transitions, latest
runs, geomeans and change points. No I/O except the change-point cache the caller hands in."""

from __future__ import annotations

import bisect
import hashlib
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any, TypeGuard

import numpy as np

from regress.detect.changepoint import detect_change_points
from regress.facts.metrics import geomean_by_mode, stored_geomean
from regress.facts.stack_keys import HASHED_KEYS
from regress.facts.stats import median

from .data import STATUS_CODES, CaseRow, RunRow, SiteData, StackRow


@dataclass
class ChangeMark:
    stack_id: int
    row: int  # index into the table
    run_id: str
    direction: str  # "up" (worse: value grew) or "down"
    magnitude: float | None  # relative change, +0.12 = 12 % higher
    p_value: float | None


@dataclass
class Transition:
    run_id: str  # first run on the new stack
    old: int
    new: int
    where: str  # runner or host


@dataclass
class Model:
    data: SiteData
    series: dict[int, dict[int, np.ndarray]]  # case id -> stack id -> table rows, oldest first
    transitions: list[Transition]
    successor: dict[int, int]
    changes: dict[int, list[ChangeMark]]  # case id -> marks
    latest_run: dict[int, RunRow]  # stack id -> its newest run
    current_stacks: list[StackRow]
    # case id -> its (b, h, sq, sk, layout, mode); shape -> every case at it, by (suite, name). The
    # groups, never the pairs: 1,000 cases of one shape built a million pairs (issue 24).
    shape_of: dict[int, tuple[Any, ...]]
    rows_by_run: list[np.ndarray]  # run index -> its table rows
    regressions_by_case: dict[int, list[dict[str, Any]]] = field(default_factory=dict)
    detector: str = "none"
    run_index: dict[str, int] = field(default_factory=dict)
    shapes: dict[tuple[Any, ...], list[CaseRow]] = field(default_factory=dict)

    def related(self, case_id: int, limit: int, suite: str | None = None) -> tuple[list[CaseRow], int]:
        """Up to `limit` other cases at this case's shape, layout and mode (of one suite if given),
        and how many there are: O(limit) whatever the size of the group."""
        group = self.shapes.get(self.shape_of.get(case_id, ()), [])
        own = self.data.cases[case_id].suite if case_id in self.data.cases else None
        if suite is not None:
            lo = bisect.bisect_left(group, suite, key=lambda o: o.suite)
            group = group[lo : bisect.bisect_right(group, suite, key=lambda o: o.suite)]
        shown = [o for o in group[: limit + 1] if o.id != case_id][:limit]
        mine = bool(group) and (suite is None or suite == own)
        return shown, len(group) - (1 if mine else 0)


def _direction(raw: Any, before: float, after: float) -> str:
    if isinstance(raw, int | float):
        return "up" if raw > 0 else "down"
    text = str(raw).lower()
    if text in {"up", "increase", "higher", "+", "+1", "regression", "worse", "slower"}:
        return "up"
    if text in {"down", "decrease", "lower", "-", "-1", "improvement", "better", "faster"}:
        return "down"
    return "up" if after > before else "down"


def series_key(values: np.ndarray) -> str:
    return hashlib.sha1(np.ascontiguousarray(values, dtype=np.float64).tobytes()).hexdigest()


def _valid_points(found: object, n: int) -> TypeGuard[list[list[Any]]]:
    """A cached change-point list as build() writes it: [[index, "up"|"down", magnitude, p], ...]."""
    if not isinstance(found, list):
        return False
    for cp in found:
        if not (isinstance(cp, list) and len(cp) == 4):
            return False
        i, direction, mag, p = cp
        if not (type(i) is int and 0 < i < n and direction in ("up", "down")):
            return False
        if not all(v is None or (isinstance(v, int | float) and not isinstance(v, bool)) for v in (mag, p)):
            return False
    return True


def build(data: SiteData, cp_cache: dict[str, list[list[Any]]]) -> Model:
    t = data.table
    runs = data.runs
    run_rows = [runs[r] for r in data.run_order]
    run_stack = np.asarray([r.stack_id for r in run_rows], dtype=np.int64)
    drill = np.asarray([r.is_drill for r in run_rows], dtype=bool)

    # Series: drills are rehearsals with injected faults, kept off the trends.
    keep = ~drill[t["run"]] if len(t["run"]) else np.zeros(0, dtype=bool)
    rows = np.nonzero(keep)[0]
    stack_of = run_stack[t["run"][rows]]
    order = np.lexsort((t["run"][rows], stack_of, t["case"][rows]))
    rows, stack_of = rows[order], stack_of[order]
    case_of = t["case"][rows]
    series: dict[int, dict[int, np.ndarray]] = defaultdict(dict)
    if len(rows):
        cut = np.nonzero((np.diff(case_of) != 0) | (np.diff(stack_of) != 0))[0] + 1
        for chunk in np.split(np.arange(len(rows)), cut):
            series[int(case_of[chunk[0]])][int(stack_of[chunk[0]])] = rows[chunk]

    # Stack transitions: one pin (its name) on one runner (else host) moving to another digest, as
    # when a toolkit is upgraded. Two pins on one runner (the CPU and the emulator stack of a CI
    # host, say) are neighbours, not successors; an unnamed stack has no lineage to follow.
    transitions: list[Transition] = []
    last_on: dict[tuple[str, str], int] = {}
    for r in run_rows:
        name = data.stacks[r.stack_id].name if r.stack_id in data.stacks else ""
        if r.is_drill or not name:
            continue
        where = r.runner or r.host.get("hostname") or "?"
        prev = last_on.get((name, where))
        if prev is not None and prev != r.stack_id:
            transitions.append(Transition(r.id, prev, r.stack_id, where))
        last_on[(name, where)] = r.stack_id
    still_run = set(last_on.values())  # some runner's latest run of its pin is on it
    successor = {tr.old: tr.new for tr in transitions if tr.old not in still_run}

    # A drill is a rehearsal with an injected fault: never a stack's latest run.
    latest_run: dict[int, RunRow] = {}
    for r in run_rows:
        if not r.is_drill:
            latest_run[r.stack_id] = r
    current = [data.stacks[s] for s in latest_run if s not in successor]
    current.sort(key=lambda s: s.label)

    # Change points per series, cached by the series' values.
    detect = detect_change_points
    changes: dict[int, list[ChangeMark]] = defaultdict(list)
    used: dict[str, list[list[Any]]] = {}
    for case_id, per_stack in series.items():
        for stack_id, idx in per_stack.items():
            vals = t["value"][idx]
            ok = ~np.isnan(vals)
            if ok.sum() < 8 or np.nanmax(vals) == np.nanmin(vals):
                continue
            clean_idx, clean = idx[ok], vals[ok]
            key = series_key(clean)
            found = cp_cache.get(key)
            if not _valid_points(found, len(clean)):  # none cached, or a damaged cache entry
                try:
                    points = detect(clean.tolist())
                except Exception:  # a detector bug must not take the whole site down
                    points = []
                found = []
                for cp in points:
                    i = int(cp.index)
                    if not 0 < i < len(clean):
                        continue
                    before = median(clean[max(0, i - 7) : i])
                    after = median(clean[i : i + 7])
                    mag = getattr(cp, "magnitude", None)  # relative, (after - before) / |before|
                    if not isinstance(mag, int | float):
                        mag = (after - before) / abs(before) if before else None
                    p = getattr(cp, "p_value", None)
                    found.append([i, _direction(getattr(cp, "direction", None), before, after), mag, p])
            used[key] = found
            for i, direction, mag, p in found:
                row = int(clean_idx[i])
                changes[case_id].append(
                    ChangeMark(
                        stack_id,
                        row,
                        data.run_order[int(t["run"][row])],
                        direction,
                        None if mag is None else float(mag),
                        None if p is None else float(p),
                    )
                )
    cp_cache.clear()
    cp_cache.update(used)

    by_shape: dict[tuple[Any, ...], list[CaseRow]] = defaultdict(list)
    shape_of: dict[int, tuple[Any, ...]] = {}
    for c in data.cases.values():
        if c.b is not None:
            shape_of[c.id] = (c.b, c.h, c.sq, c.sk, c.layout, c.mode)
            by_shape[shape_of[c.id]].append(c)
    shapes = {k: sorted(v, key=lambda o: (o.suite, o.name)) for k, v in by_shape.items() if len(v) > 1}
    by_run = np.argsort(t["run"], kind="stable")
    bounds = np.searchsorted(t["run"][by_run], np.arange(len(run_rows) + 1))
    rows_by_run = [by_run[bounds[i] : bounds[i + 1]] for i in range(len(run_rows))]
    regs: dict[int, list[dict[str, Any]]] = defaultdict(list)
    for reg in data.regressions:
        regs[reg["case_id"]].append(reg)
    return Model(
        data,
        dict(series),
        transitions,
        successor,
        dict(changes),
        latest_run,
        current,
        shape_of,
        rows_by_run,
        dict(regs),
        f"{detect.__module__}.{detect.__name__}",
        {r: i for i, r in enumerate(data.run_order)},
        shapes,
    )


def run_overview(model: Model, run: RunRow) -> dict[str, Any]:
    """Suite status counts and the geomean speedup per rounding mode against each baseline.

    The geomean is the one the run stored (regress.facts.metrics.summarise, at the end of the run); a run
    still going has none yet, so it is computed by the same function from the speedups stored so far.
    """
    data = model.data
    t = data.table
    rows = model.rows_by_run[model.run_index[run.id]]
    suites: dict[str, dict[str, int]] = defaultdict(lambda: defaultdict(int))
    partial: list[tuple[str, dict[str, float]]] = []
    name = data.speedup_name.get(run.id, "")
    for row in rows:
        case = data.cases.get(int(t["case"][row]))
        if case is None:
            continue
        status = STATUS_CODES[int(t["status"][row])]
        suites[case.suite][status] += 1
        if case.suite == "perf" and case.mode and status == "pass" and name:
            partial.append((case.mode, {name: float(t["speedup"][row])}))
    geo = stored_geomean(run.summary) or geomean_by_mode(partial)
    workers = run.gpu_state.get("workers") if isinstance(run.gpu_state, dict) else None
    return {
        "suites": {s: dict(c) for s, c in sorted(suites.items())},
        "geomean": geo,
        "baselines": sorted({b for per in geo.values() for b in per}),
        "workers": sorted(workers) if isinstance(workers, dict) else [],
        "n_results": len(rows),
    }


def stack_diff(a: StackRow, b: StackRow) -> list[dict[str, Any]]:
    keys = sorted(set(a.keys) | set(b.keys), key=lambda k: (k not in HASHED_KEYS, k))
    return [
        {
            "key": k,
            "a": a.keys.get(k),
            "b": b.keys.get(k),
            "differs": a.keys.get(k) != b.keys.get(k),
            "hashed": k in HASHED_KEYS,
        }
        for k in keys
    ]
