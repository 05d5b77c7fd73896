"""The one path from stored results to the pure rule (`regress.detect.verdict.judge`, `paired.judge_ab`).

The nightly analysis (regress/judge/analysis.py) and the gate (regress/judge/gate/) both build their
inputs here, so a night and a gate judging the same pair of runs see the same samples, the same history, the
same noisy nights left out and the same control ratio (tests/test_evidence.py checks it):

- readers: a result's raw samples by name, its location, its scaled-ULP maximum (one name);
- per-case history: the earlier finished, non-drill, passing runs of the baseline's series that
  have samples, oldest first, ending with the baseline itself (never the p50 headline: a different
  statistic from the rule's q = 0.25 location);
- noisy nights: history nights on which the interleaved control (torch's SDPA) moved far from its
  own level on every case at once are the machine's, not the kernel's; they are left out and named;
- the control ratio of a pair; the A/B arms of one run.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy.orm import Session

from regress.detect.paired import ABInput, swap_point
from regress.detect.verdict import CaseInput, noisy_nights
from regress.facts.metrics import percentile
from regress.facts.results import AB_BASELINE_SAMPLE, AB_CANDIDATE_SAMPLE, AB_SWAP_METRIC, PERF_SAMPLE
from regress.facts.stats import median
from regress.store import Case, Result, Run
from regress.store.queries import series_histories

SCALED_ULP = "scaled_ulp_max"  # the one name the ULP suite writes


def samples(res: Result, name: str = PERF_SAMPLE) -> list[float]:
    """The raw samples of one stored result under `name` (empty when it has none)."""
    return next((list(s.values) for s in res.samples if s.name == name), [])


def scaled_ulp(metrics: dict[str, Any]) -> float | None:
    v = metrics.get(SCALED_ULP)
    return float(v) if isinstance(v, int | float) else None


def location(res: Result, q: float, name: str = PERF_SAMPLE) -> float | None:
    """Quantile q of the finite raw samples; None without samples."""
    xs = [v for v in samples(res, name) if math.isfinite(v)]
    return percentile(xs, 100 * q) if xs else None


def _control_name(res: Result) -> str | None:
    names = sorted(
        s.name for s in res.samples if s.name.startswith("baseline:") and s.name.endswith(":time_ms")
    )
    return names[0] if names else None


def control_ratio(b: Result, c: Result, q: float) -> tuple[str, float] | None:
    """(control name, candidate/baseline location ratio) of the first baseline kernel that both
    runs timed interleaved with ours; None when there is none."""
    shared = {s.name for s in b.samples} & {s.name for s in c.samples}
    for name in sorted(n for n in shared if n.startswith("baseline:") and n.endswith(":time_ms")):
        lb, lc = location(b, q, name), location(c, q, name)
        if lb and lc and lb > 0 and lc > 0:
            return name.split(":")[1], lc / lb
    return None


def usable(res: Result) -> bool:
    """A result the perf rule can use: passed, with raw samples."""
    return res.status == "pass" and bool(samples(res))


@dataclass(frozen=True)
class PerfPair:
    """One perf case of a comparison: the baseline run and result, and the candidate's result."""

    case: Case
    base_run: Run
    baseline: Result
    candidate: Result


@dataclass
class PerfEvidence:
    inputs: list[CaseInput]
    pairs: list[PerfPair] = field(default_factory=list)  # the inputs' pairs, in the same order
    dropped_nights: list[str] = field(default_factory=list)  # run ids left out of every history
    reasons: list[str] = field(default_factory=list)


def perf_evidence(
    session: Session, pairs: Sequence[PerfPair], *, q: float, history_runs: int, with_control: bool
) -> PerfEvidence:
    """The rule's inputs for these pairs: samples, histories (noisy nights left out), controls."""
    # Each pair's series before its baseline run, fetched per baseline run (a night's pairs share one).
    by_base: dict[str, tuple[Run, list[int]]] = {}
    for p in pairs:
        by_base.setdefault(p.base_run.id, (p.base_run, []))[1].append(p.case.id)
    before = {
        (rid, cid): hist
        for rid, (base, case_ids) in by_base.items()
        for cid, hist in series_histories(session, base, case_ids, history_runs - 1).items()
    }
    histories: list[list[tuple[str, Result]]] = []
    for p in pairs:
        past = [(r.id, res) for r, res in before[(p.base_run.id, p.case.id)] if usable(res)]
        histories.append([*past[::-1], (p.base_run.id, p.baseline)])
    # Per night, the control's shift from its own level, as the median over the cases that have one.
    by_night: dict[str, list[float]] = {}
    for hist in histories:
        name = next((n for _, res in hist if (n := _control_name(res))), None)
        night_levels = {rid: v for rid, res in hist if name and (v := location(res, q, name))}
        if len(night_levels) < 4:
            continue
        mid = median(list(night_levels.values()))
        for rid, v in night_levels.items():
            by_night.setdefault(rid, []).append(math.log(v / mid))
    shifts = {rid: median(v) for rid, v in by_night.items()}
    base_ids = {p.base_run.id for p in pairs}
    dropped = [rid for rid in noisy_nights(shifts) if rid not in base_ids]
    inputs = []
    for p, hist in zip(pairs, histories, strict=True):
        levels = [v for rid, res in hist if rid not in dropped and (v := location(res, q)) is not None]
        inputs.append(
            CaseInput(
                p.case.key,
                samples(p.baseline),
                samples(p.candidate),
                levels,
                control_ratio(p.baseline, p.candidate, q) if with_control else None,
                f"{p.case.suite}/{p.case.name}",
            )
        )
    ev = PerfEvidence(inputs, list(pairs), dropped)
    if dropped:
        moved = ", ".join(f"{rid[:12]} ({math.expm1(shifts[rid]) * 100:+.0f}%)" for rid in dropped[:8])
        ev.reasons.append(
            f"{len(dropped)} noisy night(s) left out of the history (the interleaved control moved on "
            f"every case at once): {moved}"
        )
    return ev


def ab_inputs(rows: Sequence[tuple[Case, Result]]) -> list[ABInput]:
    """Both arms of an A/B run, per perf case that recorded them."""
    out = []
    for case, res in rows:
        base, cand = samples(res, AB_BASELINE_SAMPLE), samples(res, AB_CANDIDATE_SAMPLE)
        if res.status == "pass" and base and cand:
            swap_at = swap_point((res.metrics or {}).get(AB_SWAP_METRIC))
            out.append(ABInput(case.key, base, cand, f"{case.suite}/{case.name}", swap_at=swap_at))
    return out


def alternating_inputs(
    arms: Sequence[tuple[Sequence[tuple[Case, Result]], Sequence[tuple[Case, Result]]]], q: float
) -> list[ABInput]:
    """A/B from runs alternated as processes (A B A B ...: two containers that cannot share one
    process, on one device): per (A_i, B_i) pair of adjacent runs, each run's location of a perf
    case (quantile q of its samples, the rule's statistic) is one paired block. Only cases that
    passed with samples in every run of both arms are judged."""
    per_case: dict[str, tuple[str, list[float], list[float]]] = {}
    keys: set[str] | None = None
    for a_rows, b_rows in arms:
        locs: dict[str, tuple[str, float, float]] = {}
        a = {c.key: (c, r) for c, r in a_rows}
        for case, rb in b_rows:
            if case.key not in a:
                continue
            ra = a[case.key][1]
            la = location(ra, q) if ra.status == "pass" else None
            lb = location(rb, q) if rb.status == "pass" else None
            if la and lb:
                locs[case.key] = (f"{case.suite}/{case.name}", la, lb)
        keys = set(locs) if keys is None else keys & set(locs)
        for key, (name, la, lb) in locs.items():
            entry = per_case.setdefault(key, (name, [], []))
            entry[1].append(la)
            entry[2].append(lb)
    return [ABInput(k, v[1], v[2], v[0], block=1) for k, v in sorted(per_case.items()) if k in (keys or ())]


def is_ab_result(res: Result) -> bool:
    return bool(samples(res, AB_BASELINE_SAMPLE))


__all__ = [
    "AB_BASELINE_SAMPLE",
    "AB_CANDIDATE_SAMPLE",
    "PERF_SAMPLE",
    "SCALED_ULP",
    "PerfEvidence",
    "PerfPair",
    "ab_inputs",
    "alternating_inputs",
    "control_ratio",
    "location",
    "perf_evidence",
    "samples",
    "scaled_ulp",
]
