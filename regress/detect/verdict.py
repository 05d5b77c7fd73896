"""The rule that judges one run against another over all its perf cases, with its power.

Pure: numbers in, a `Judgement` out; no database, no files. The upgrade gate (regress/judge/gate/) and the
analysis after every nightly (regress/judge/analysis.py) both call `judge`, so a night and a gate cannot
disagree about the same pair of runs.

Per case
    `compare_samples` (rank test AND effect floor AND noise band). The noise band's sigma is the
    case's own night-to-night sigma (history of at least `min_history` nights), floored by the
    median of the other cases' (pooled); with too short a history, the pooled sigma, else the
    backend's stated prior (`RuleConfig.prior_sigma`, measured: docs/detection.md), else it is
    unknown and the case is undecided, naming how many nights would decide. Never the spread of
    the pair under test: a real regression, rarely uniform, would widen the band meant to catch it.
    Same stack: a case whose interleaved control kernel moved as much is the machine, not the
    kernel (`control_ratio`).
Stack-wide
    A shift of every case is one event: cases flagged only by the common shift are left to the
    aggregate test (geomean ratio AND one-sided Wilcoxon AND the stack's night-to-night band).
Power
    Every case gets its minimum detectable effect (`power.minimum_detectable_effect`), the stack its
    own (the smallest common shift the aggregate test would catch). A run passes only when nothing
    regressed AND every case's MDE is within `max_mde` AND the stack's within `max_stack_mde`;
    otherwise it is undecided and says which cases are too noisy and what would make them decidable.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np
from scipy import stats

from regress.facts.stats import geomean, mad_sigma, median

from .config import MAX_MDE, MAX_STACK_MDE
from .pairwise import PairwiseConfig, compare_samples, historical_noise
from .pairwise import Verdict as PairVerdict
from .power import MIN_PAIR_CASES, minimum_detectable_effect, pair_noise

Status = Literal["regression", "improvement", "same", "undecided"]
Verdict = Literal["regression", "pass", "undecided"]


@dataclass(frozen=True)
class RuleConfig:
    """Thresholds of `judge`. The gate's defaults; the nightly analysis uses a tighter floor.

    Attributes
    ----------
    pairwise : per-case test (floor, noise multiple, significance, location quantile).
    power : probability with which a slowdown of the MDE is caught.
    max_mde : a case whose MDE exceeds this leaves the verdict undecided (0.15: a pass means no case
        slowed by 15 % or more went unseen, at `power`).
    max_stack_mde : the same for a shift of every case together.
    aggregate_min_effect, aggregate_alpha, aggregate_min_cases, aggregate_noise_alpha : the
        stack-wide test (geomean floor, Wilcoxon p, fewest cases, the history band's one-sided
        level).
    control_veto : a case whose interleaved control moved as much is not flagged (same stack only).
    prior_sigma : the backend's run-to-run sigma of one case (relative, one run), used when neither
        the case nor the other cases have `min_history` nights; None: unknown (undecided).
    prior_stack_sigma : the same for the stack-wide (mean over cases) night-to-night swing.
    """

    pairwise: PairwiseConfig = field(default_factory=lambda: PairwiseConfig(min_effect=0.05, noise_k=6.0))
    power: float = 0.8
    max_mde: float = MAX_MDE
    max_stack_mde: float = MAX_STACK_MDE
    aggregate_min_effect: float = 0.03
    aggregate_alpha: float = 0.001
    aggregate_min_cases: int = 10
    aggregate_noise_alpha: float = 0.01
    control_veto: bool = True
    prior_sigma: float | None = None
    prior_stack_sigma: float | None = None


@dataclass(frozen=True)
class CaseInput:
    """One perf case of the pair: raw samples of both runs, the baseline series' locations (oldest
    first, ending with the baseline run), and the interleaved control's candidate/baseline ratio."""

    key: str
    baseline: Sequence[float]
    candidate: Sequence[float]
    history: Sequence[float] = ()
    control: tuple[str, float] | None = None
    name: str = ""  # for the reasons in words; the key when empty


@dataclass
class CaseJudgement:
    key: str
    name: str
    status: Status
    mark: str
    ratio: float | None
    p_value: float | None
    threshold: float
    baseline_location: float | None
    candidate_location: float | None
    mde: float | None = None
    limited_by: str = ""
    noise: float | None = None
    history_nights: int = 0
    rounds: tuple[int, int] = (0, 0)
    advice: str = ""
    note: str = ""

    @property
    def decidable(self) -> bool:
        return self.mde is not None and not self.advice


@dataclass(frozen=True)
class StackNoise:
    """Night-to-night swing of a whole stack: sigma of the mean-over-cases log change between
    consecutive baseline nights, and how many changes it was estimated from."""

    sigma: float
    changes: int

    def band(self, alpha: float) -> float:
        """One-sided prediction bound for the next night's stack-wide shift (Student t, so five
        nights of history give a wide band and thirty a tight one)."""
        t = float(stats.t.ppf(1.0 - alpha, self.changes - 1))
        return math.expm1(t * self.sigma * math.sqrt(1.0 + 1.0 / self.changes))


def aggregate_history_noise(levels: Sequence[Sequence[float]]) -> StackNoise | None:
    """The stack's swing from the cases' level histories (oldest first, baseline last), on the
    nights every case has; None below 3 changes."""
    usable = [lv for lv in levels if lv and min(lv) > 0]
    nights = min((len(lv) for lv in usable), default=0)
    if not usable or nights < 4:
        return None
    arr = np.log(np.array([lv[-nights:] for lv in usable], dtype=float))
    steps = np.diff(arr, axis=1).mean(axis=0)
    return StackNoise(float(np.std(steps, ddof=1)), len(steps))


def pooled_sigma(cases: Sequence[CaseInput], pw: PairwiseConfig, min_cases: int = 3) -> float | None:
    """Median run-to-run sigma over the cases with at least `min_history` nights: the machine's
    typical noise, a floor for each case's own estimate (opening and auto-resolving a regression
    use this one definition)."""
    noises = [historical_noise(c.history) for c in cases if len(c.history) >= pw.min_history]
    known = sorted(n for n in noises if n is not None)
    return median(known) if len(known) >= min_cases else None


def noisy_nights(shifts: dict[str, float], min_shift: float = 0.15, k: float = 4.0) -> list[str]:
    """Nights whose stack-wide control shift (log, from the control's own level) is an outlier: beyond
    log(1 + min_shift) AND k robust sigmas of the nights' shifts. The control (torch's SDPA, timed
    in the same rounds) does not change with our kernel, so a night on which it moved on every case
    at once was a loaded or throttled machine; its levels would inflate every case's noise band
    (seen on the shared CPU: thresholds of 229-1000 %). Needs 5 nights to say anything."""
    if len(shifts) < 5:
        return []
    v = np.asarray(list(shifts.values()), dtype=float)
    mid = median(v)
    sigma = mad_sigma(v)
    cut = max(math.log1p(min_shift), k * sigma)
    return [rid for rid, x in shifts.items() if abs(x - mid) > cut]


@dataclass
class Judgement:
    verdict: Verdict
    cases: list[CaseJudgement]
    aggregate: dict[str, Any]
    reasons: list[str]
    too_noisy: list[str]

    @property
    def regressions(self) -> list[CaseJudgement]:
        return [c for c in self.cases if c.status == "regression"]


def _pct(x: float) -> str:
    # Past 10x an MDE says "hopeless here"; its digits would only look precise.
    return f"{x * 100:.1f}%" if x <= 10.0 else ">1000%"


# A pairwise verdict as a case's status (too few samples: undecided).
_STATUS_OF: dict[PairVerdict, Status] = {
    "slower": "regression",
    "faster": "improvement",
    "same": "same",
    "insufficient": "undecided",
}


def _judge_case(cfg: RuleConfig, c: CaseInput, floor_noise: float | None) -> CaseJudgement:
    pw = cfg.pairwise
    cmp = compare_samples(c.baseline, c.candidate, history=c.history, config=pw, pooled_noise=floor_noise)
    status = _STATUS_OF[cmp.verdict]
    j = CaseJudgement(
        c.key,
        c.name or c.key,
        status,
        cmp.mark,
        None if math.isnan(cmp.ratio) else cmp.ratio,
        cmp.p_value,
        cmp.threshold,
        None if math.isnan(cmp.baseline_location) else cmp.baseline_location,
        None if math.isnan(cmp.candidate_location) else cmp.candidate_location,
        noise=cmp.noise,
        history_nights=len(c.history),
        rounds=(cmp.n_baseline, cmp.n_candidate),
    )
    if cmp.verdict == "insufficient":
        j.note = f"too few samples ({cmp.n_baseline} vs {cmp.n_candidate})"
    elif cmp.verdict == "slower":
        j.note = f"{(cmp.ratio - 1) * 100:+.1f}% (threshold {_pct(cmp.threshold)}, p {cmp.p_value:.1e})"
        if cfg.control_veto and c.control and cmp.ratio / c.control[1] - 1.0 < cmp.threshold:
            j.status, j.mark = "same", "~"
            moved = (c.control[1] - 1) * 100
            j.note += f", but {c.control[0]} moved {moved:+.1f}% in the same rounds (machine)"
    power = minimum_detectable_effect(
        c.baseline,
        c.candidate,
        quantile=pw.location_quantile,
        alpha=pw.alpha,
        threshold=cmp.threshold,
        sigma_between=cmp.noise,
        power=cfg.power,
    )
    if power is None:
        j.advice = "too few samples to know what it could detect"
        return j
    j.mde, j.limited_by = power.mde, power.limited_by
    if power.mde > cfg.max_mde:
        j.advice = _advice(cfg, power, j)
    return j


def _advice(cfg: RuleConfig, power: Any, j: CaseJudgement) -> str:
    pw = cfg.pairwise
    have = min(j.rounds) if j.rounds[0] and j.rounds[1] else 0
    factor = power.rounds_factor(cfg.max_mde, pw.alpha, cfg.power)
    parts = [f"MDE {_pct(power.mde)} (limit {_pct(cfg.max_mde)}): a smaller slowdown could be missed"]
    if factor is not None and have:
        parts.append(
            f"about {math.ceil(have * factor)} rounds (--iterations) instead of {have} would resolve it"
        )
    else:
        parts.append(
            f"more rounds cannot: run-to-run noise (sigma {_pct(power.sigma_between)}) alone puts it "
            "above the limit; a quieter runner can"
        )
    if j.history_nights < pw.min_history:
        parts.append(
            f"{pw.min_history - j.history_nights} more night(s) of history would replace the noise estimate "
            "borrowed from the other cases"
        )
    return "; ".join(parts)


def _seen(cfg: RuleConfig, cases: Sequence[CaseJudgement]) -> str:
    """What the pair showed, in words: "no slowdown was seen" only when no case moved up
    significantly (a 30 % drill whose cases moved +18-49 % with p to 1e-67 was once told so)."""
    up = [
        c
        for c in cases
        if c.ratio and c.ratio > 1.0 and c.p_value is not None and c.p_value < cfg.pairwise.alpha
    ]
    if not up:
        return "no slowdown was seen"
    top = max(up, key=lambda c: c.ratio or 1.0)
    return (
        f"{len(up)} case(s) were significantly slower but not beyond their threshold "
        f"(largest {((top.ratio or 1.0) - 1) * 100:+.1f}%, {top.name})"
    )


def _separate_common_mode(cfg: RuleConfig, cases: list[CaseJudgement]) -> float | None:
    """A case flagged only because the whole stack moved is left to the aggregate test.

    Per case, what counts is the move beyond the stack-wide (geomean) shift: a night on which every
    case is 8 % slower is one event, judged once against the stack's own night-to-night band, not
    eighteen. Returns the common shift (geomean ratio) when there are enough cases to estimate it."""
    perf = [c for c in cases if c.ratio and c.ratio > 0]
    if len(perf) < cfg.aggregate_min_cases:
        return None
    common = geomean(c.ratio for c in perf if c.ratio) or 1.0
    if common <= 1.0:
        return common
    for c in perf:
        if c.status == "regression" and c.ratio and c.ratio / common - 1.0 < c.threshold:
            c.status, c.mark = "same", "~"
            c.note = (
                f"{(c.ratio - 1) * 100:+.1f}%, with the stack-wide shift of {(common - 1) * 100:+.1f}% "
                "(judged by the aggregate test)"
            )
    return common


def _aggregate(
    cfg: RuleConfig,
    cases: list[CaseJudgement],
    history: StackNoise | None,
    pair_sigma: float | None,
    controls: Sequence[float | None] = (),
) -> dict[str, Any]:
    """Geometric-mean ratio over the cases and a one-sided Wilcoxon signed-rank test on them; a
    systematic slowdown names every case that moved past the aggregate floor significantly. The
    floor is the larger of aggregate_min_effect and the stack's own night-to-night band. Its MDE
    (`mde`) is the smallest common shift caught with probability `power`.

    With an interleaved control for every case (same stack), the controls' geomean ratio is taken
    out first: a loaded night slows the control in the same rounds, a slower kernel does not
    (measured on the shared CPU: a clean second night moved every case +14 % to +121 %). The
    controls' mean, not each case's own control, so one noisy control call adds 1/n of its noise."""
    by_key = dict(zip([c.key for c in cases], controls, strict=False)) if controls else {}
    perf = [c for c in cases if c.ratio and c.ratio > 0 and c.p_value is not None]
    n = len(perf)
    if n < cfg.aggregate_min_cases:
        return {"cases": n, "verdict": "too few cases", "mde": None}
    normalized = all(by_key.get(c.key) for c in perf)
    control = float(np.mean(np.log([by_key[c.key] or 1.0 for c in perf]))) if normalized else 0.0
    ours = float(np.mean(np.log([c.ratio or 1.0 for c in perf])))
    # The control can explain a shift away, never create or grow one: it is taken out only in the
    # direction ours moved, and by no more than ours moved. Seen on the loaded 2-core CPU: torch's
    # SDPA (the control) ran 40x slower in one run while our kernel ran 1x, and dividing by it
    # invented a +1070 % "systematic slowdown".
    shift = math.copysign(min(abs(control), abs(ours)), ours) if control * ours > 0 else 0.0
    logs = np.log([c.ratio or 1.0 for c in perf]) - shift
    geomean = float(np.exp(logs.mean()))
    p_slower = float(stats.wilcoxon(logs, alternative="greater").pvalue) if np.any(logs) else 1.0
    floor = cfg.aggregate_min_effect
    stack_sigma = history.sigma / math.sqrt(2.0) if history is not None else cfg.prior_stack_sigma
    if history is not None:
        floor = max(floor, history.band(cfg.aggregate_noise_alpha))
    elif pair_sigma is not None:
        # No stack history yet: the stated prior (pooled or the backend's), never this pair's spread.
        # The geomean of two runs moves by the stack's common swing and the cases' own noise / √n.
        z = float(stats.norm.isf(cfg.aggregate_noise_alpha))
        common = math.hypot(stack_sigma or 0.0, pair_sigma / math.sqrt(n))
        floor = max(floor, math.expm1(z * math.sqrt(2.0) * common))
    else:  # nothing known about the noise: the aggregate cannot call anything systematic
        return {"cases": n, "verdict": "noise unknown", "mde": None}
    systematic = geomean - 1.0 >= floor and p_slower < cfg.aggregate_alpha
    # What the control took away must not become a pass: a stack-wide slowdown of ours that the
    # control "explains" is the machine or the kernel, and nobody can tell which (seen in CI on the
    # loaded 2-core VM: a 30 % drill with SDPA 52 % slower in the same rounds passed). Undecided.
    raw = logs + shift
    raw_p = float(stats.wilcoxon(raw, alternative="greater").pvalue) if shift and np.any(raw) else p_slower
    explained = (
        bool(shift)
        and not systematic
        and math.expm1(float(raw.mean())) >= floor
        and raw_p < cfg.aggregate_alpha
    )
    # The geomean's own noise: the stack's night-to-night swing (history) and the cases' independent
    # run-to-run noise, sampling included, averaged over n cases (this pair's spread).
    sigma = math.hypot(
        history.sigma if history else math.sqrt(2.0) * (stack_sigma or 0.0),
        math.sqrt(2.0) * (pair_sigma or 0.0) / math.sqrt(n),
    )
    mde = math.expm1(math.log1p(floor) + float(stats.norm.ppf(cfg.power)) * sigma)
    agg: dict[str, Any] = {
        "cases": n,
        "geomean_ratio": geomean,
        "p_value": p_slower,
        "threshold": floor,
        "history_sigma": history.sigma if history else None,
        "history_changes": history.changes if history else 0,
        "mde": mde,
        "control_shift": math.exp(control) if normalized else None,
        "shift_removed": math.exp(shift),
        "explained_by_control": explained,
        "raw_geomean_ratio": float(np.exp(raw.mean())),
        "verdict": "slower" if systematic else "same",
    }
    if systematic:
        for c in perf:
            if (
                c.status == "same"
                and c.ratio
                and c.ratio - 1.0 >= floor
                and c.p_value is not None
                and c.p_value < cfg.pairwise.alpha
            ):
                c.status, c.mark = "regression", "+"
                c.note = (
                    f"{(c.ratio - 1) * 100:+.1f}%, part of a systematic slowdown "
                    f"(geomean {(geomean - 1) * 100:+.1f}% over {n} cases, p {p_slower:.1e})"
                )
    return agg


def judge(cases: Sequence[CaseInput], config: RuleConfig | None = None) -> Judgement:
    """Judges a candidate run against a baseline over its perf cases (rule: module docstring).

    Cost: O(Σ (m + n) log(m + n)) over the cases' samples, plus O(cases · nights) for the history.
    """
    cfg = config or RuleConfig()
    pw = cfg.pairwise
    pooled = pooled_sigma(cases, pw)
    floor_noise, source = (pooled, "pooled") if pooled is not None else (cfg.prior_sigma, "prior")
    out = [_judge_case(cfg, c, floor_noise) for c in cases]
    for c, j in zip(cases, out, strict=True):
        if j.noise is None and j.status != "undecided":
            need = pw.min_history - len(c.history)
            j.status, j.mark, j.mde = "undecided", "?", None
            j.note = "run-to-run noise unknown"
            j.advice = (
                f"its run-to-run noise is unknown: {need} more clean night(s) of this stack would decide "
                "(or A/B: both builds timed in the same rounds, `regress nightly --compare-build`)"
            )
    _separate_common_mode(cfg, out)
    controls = [c.control[1] if c.control else None for c in cases]
    history = aggregate_history_noise([c.history for c in cases])
    case_sigma = pooled if pooled is not None else cfg.prior_sigma
    aggregate = _aggregate(cfg, out, history, case_sigma, controls)
    # Descriptive only (never a noise estimate for this pair): the spread of its per-case ratios.
    ratios = [c.ratio for c in out if c.ratio]
    aggregate["pooled_sigma"], aggregate["pair_swing"] = pooled, pair_noise(ratios)
    aggregate["noise_source"] = source if floor_noise is not None else "unknown"

    reasons: list[str] = []
    regressed = [c for c in out if c.status == "regression"]
    if aggregate.get("verdict") == "slower":
        reasons.append(
            f"systematic slowdown: geomean {(aggregate['geomean_ratio'] - 1) * 100:+.1f}% over "
            f"{aggregate['cases']} perf cases (threshold {_pct(aggregate['threshold'])}, "
            f"Wilcoxon p {aggregate['p_value']:.1e})"
        )
    if regressed:
        named = ", ".join(f"{c.name} {c.note}" for c in regressed[:10])
        reasons.append(f"{len(regressed)} case(s) slower beyond threshold with significance: {named}")
        return Judgement("regression", out, aggregate, reasons, [])
    if aggregate.get("verdict") == "slower":  # the whole stack slowed, no one case beyond its own floor
        return Judgement("regression", out, aggregate, reasons, [])
    too_noisy = [c.name for c in out if not c.decidable]
    undecided = [c for c in out if c.status == "undecided"]
    stack_mde = aggregate.get("mde")
    stack_limited = (
        len(out) >= cfg.aggregate_min_cases and stack_mde is not None and stack_mde > cfg.max_stack_mde
    )
    unknown = [c for c in undecided if c.note == "run-to-run noise unknown"]
    if len(unknown) < len(undecided):
        reasons.append(
            f"{len(undecided) - len(unknown)} perf case(s) could not be compared (too few samples)"
        )
    if unknown:
        nights = max(pw.min_history - c.history_nights for c in unknown)
        reasons.append(
            f"{len(unknown)} perf case(s) have no known run-to-run noise and this backend no stated prior: "
            f"{nights} more clean night(s) of this stack would decide, or an A/B run on one device "
            "(`regress nightly --compare-build`, `regress gate --ab`) decides now"
        )
        too_noisy = [n for n in too_noisy if n not in {c.name for c in unknown}]
    if too_noisy:
        worst = max(out, key=lambda c: c.mde if c.mde is not None else math.inf)
        reasons.append(
            f"{len(too_noisy)} of {len(out)} perf case(s) too noisy to pass: {_seen(cfg, out)}, but "
            f"one below their MDE could have been missed (worst {worst.name}: {worst.advice})"
        )
    if stack_limited and stack_mde is not None:  # stack_limited implies it; said again for the checker
        reasons.append(
            f"the stack as a whole is too noisy: a shift of every case below {_pct(stack_mde)} would be "
            f"missed (limit {_pct(cfg.max_stack_mde)}; night-to-night band {_pct(aggregate['threshold'])})"
        )
    if aggregate.get("explained_by_control"):
        reasons.append(
            f"every case slowed (geomean {(aggregate['raw_geomean_ratio'] - 1) * 100:+.1f}%), and so did the "
            f"interleaved control ({(aggregate['control_shift'] - 1) * 100:+.1f}%): the machine or the "
            "kernel, which cannot be told apart from this pair; run both again on a quiet runner"
        )
    if undecided or too_noisy or stack_limited or aggregate.get("explained_by_control"):
        return Judgement("undecided", out, aggregate, reasons, too_noisy)
    if out:
        worst = max(out, key=lambda c: c.mde or 0.0)
        reasons.append(
            f"no perf case slowed beyond its threshold; each would have shown a slowdown of its MDE "
            f"(largest {_pct(worst.mde or 0.0)}, {worst.name}; limit {_pct(cfg.max_mde)})"
            + (f", the whole stack one of {_pct(stack_mde)}" if stack_mde is not None else "")
        )
    return Judgement("pass", out, aggregate, reasons, [])


__all__ = [
    "MIN_PAIR_CASES",
    "CaseInput",
    "CaseJudgement",
    "Judgement",
    "RuleConfig",
    "StackNoise",
    "aggregate_history_noise",
    "judge",
    "noisy_nights",
    "pooled_sigma",
]
