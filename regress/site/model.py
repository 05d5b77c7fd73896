"""What the pages show, derived from SiteData: series per (case, stack), stack transitions, latest
runs, geomeans and change points. No I/O except the change-point cache the caller hands in."""

from __future__ import annotations

import hashlib
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..detect.changepoint import detect_change_points
from ..metrics import geomean_by_mode, stored_geomean
from ..stack_keys import HASHED_KEYS
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


MAX_RELATED = 12  # related cases a case page lists (and charts); the rest are counted


@dataclass
class Model:
    data: SiteData
    series: dict[int, dict[int, np.ndarray]]  # case id -> stack id -> table rows, oldest first
    transitions: list[Transition]
    successor: dict[int, int]
    changes: dict[int, list[ChangeMark]]  # case id -> marks
    latest_run: dict[int, RunRow]  # stack id -> its newest run
    current_stacks: list[StackRow]
    related: dict[int, list[CaseRow]]  # case id -> same shape/layout/mode in other suites
    rows_by_run: list[np.ndarray]  # run index -> its table rows
    regressions_by_case: dict[int, list[dict[str, Any]]] = field(default_factory=dict)
    detector: str = "none"
    run_index: dict[str, int] = field(default_factory=dict)
    related_total: dict[int, int] = field(default_factory=dict)  # case id -> all of its shape


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
            if found is None:
                try:
                    points = detect(clean.tolist())
                except Exception:  # a detector bug must not take the whole site down
                    points = []
                found = []
                for cp in points:
                    i = int(cp.index)
                    if not 0 < i < len(clean):
                        continue
                    before = float(np.median(clean[max(0, i - 7) : i]))
                    after = float(np.median(clean[i : i + 7]))
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
    for c in data.cases.values():
        if c.b is not None:
            by_shape[(c.b, c.h, c.sq, c.sk, c.layout, c.mode)].append(c)
    # Bounded: every case listing every other of its shape was quadratic (5,000 such results gave
    # 2.3 GB of pages). The numerics and determinism cases come first: the page charts those.
    related: dict[int, list[CaseRow]] = {}
    related_total: dict[int, int] = {}
    for group in by_shape.values():
        group.sort(key=lambda o: (o.suite not in ("ulp", "determinism"), o.suite, o.name, o.id))
        head = group[: MAX_RELATED + 1]
        for c in group:
            related[c.id] = [o for o in head if o.id != c.id][:MAX_RELATED]
            related_total[c.id] = len(group) - 1
    for c in data.cases.values():
        related.setdefault(c.id, [])
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
        related,
        rows_by_run,
        dict(regs),
        f"{detect.__module__}.{detect.__name__}",
        {r: i for i, r in enumerate(data.run_order)},
        related_total,
    )


def run_overview(model: Model, run: RunRow) -> dict[str, Any]:
    """Suite status counts and the geomean speedup per rounding mode against each baseline.

    The geomean is the one the run stored (regress.metrics.summarise, at the end of the run); a run
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
