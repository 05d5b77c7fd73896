"""A/B on one device: two builds timed in the same rounds, judged on their paired ratios.

Pure: sequences in, a `Judgement` out; no database, no files.

Model
-----
The perf suite times the baseline build (A) and the candidate (B) in the same rounds, alternating
which goes first (A B, then B A, ...). Two consecutive rounds form an ABBA block, so the position
bias (the second call of a round reads inputs the first one just warmed) cancels within a block.
Per block the candidate's time over the baseline's, as a log ratio d = log min(b₁, b₂) − log min(a₁, a₂),
carries only what changed inside those few milliseconds; the machine's slow drifts between nights
(clocks, placement, neighbours) hit both arms alike and drop out. So no night-to-night noise enters
the verdict and no history is needed: a first night decides.

The arms are timed in both listings, half the rounds each (candidate listed first, then baseline
first: `swap_at`), because on the H200 the arm in one listing role read up to 2 % slower in an A/A
(docs/detection.md §7); the effect is then the mean of the two listings' median d, and the rank test
takes the blocks of both.

Per case: a two-sided Wilcoxon signed-rank test on the blocks' d (`scipy.stats.wilcoxon`), the
effect the median of d, and a change is called when p < alpha AND |median| ≥ min_effect. Its MDE:
the sampling standard error of the median from the order statistics that bracket it (as
`power.quantile_se`, distribution-free), c = max(log(1 + floor), z_{1−α/2}·se), MDE = c + z_power·se.
Stack-wide: the mean of the cases' median d, a one-sided Wilcoxon across cases, the aggregate floor.

Cost: O(n log n) per case.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from scipy import stats

from regress.facts.stats import median, order_statistic_se, percentile

from .verdict import CaseJudgement, Judgement, _pct


@dataclass(frozen=True)
class ABConfig:
    """Thresholds of `judge_ab`.

    alpha : two-sided Wilcoxon p per case below which the arms differ.
    min_effect : per-case floor on the median paired ratio (0.02 = 2 %); two arms in the same
        rounds differ by far less than two nights, so the floor is the nightly one, not the gate's.
    aggregate_min_effect, aggregate_alpha, aggregate_min_cases : the stack-wide test (mean of the
        cases' median log ratios, one-sided Wilcoxon across cases).
    min_blocks : fewer ABBA blocks than this and the case is undecided (the rank test cannot reach
        alpha: with 10 blocks its smallest two-sided p is 2/1024).
    power, max_mde, max_stack_mde : what a pass must have been able to see.
    """

    alpha: float = 0.002
    min_effect: float = 0.02
    aggregate_min_effect: float = 0.01
    aggregate_alpha: float = 0.001
    aggregate_min_cases: int = 6
    min_blocks: int = 10
    power: float = 0.8
    max_mde: float = 0.15
    max_stack_mde: float = 0.10


@dataclass(frozen=True)
class ABInput:
    """One case: both arms' raw samples in round order (the same rounds), and its name."""

    key: str
    baseline: Sequence[float]
    candidate: Sequence[float]
    name: str = ""
    # Rounds per paired block: 2 for one process's ABBA rounds; 1 when each value is the location
    # of a whole run and the runs alternated as processes A B A B ... (`alternating_inputs`).
    block: int = 2
    # Where the arms' second listing begins (perf's A/B phase times both listings): 0, one listing.
    swap_at: int = 0


def block_log_ratios(baseline: Sequence[float], candidate: Sequence[float], block: int = 2) -> list[float]:
    """log(candidate / baseline) per block of `block` consecutive rounds (2: one ABBA block), each
    arm's fastest call of the block. Each arm has one call in each position of an ABBA block, so a
    position bias picks the same position for both and cancels; a disturbance only adds time, so
    the faster call of the two is the undisturbed one (the ratio of sums let one preempted call
    decide its block: per-case medians of a 10 % drill then scattered from -19 % to +25 %).
    Blocks where either arm has no finite positive time are skipped."""
    n = min(len(baseline), len(candidate)) // block * block
    out: list[float] = []
    for i in range(0, n, block):
        a, b = baseline[i : i + block], candidate[i : i + block]
        if not all(math.isfinite(v) and v > 0 for v in (*a, *b)):
            continue
        out.append(math.log(min(b)) - math.log(min(a)))
    return out


def median_se(logs: Sequence[float]) -> float | None:
    """Standard error of the median of `logs` from the 95 % order-statistic interval / 3.92."""
    return order_statistic_se(logs, 0.5)


def wilcoxon_p(d: Sequence[float], alternative: str = "two-sided") -> float:
    """Wilcoxon signed-rank p of the paired log ratios `d` (1.0 when every ratio is 0: scipy
    refuses an all-zero sample, and identical arms are the null)."""
    arr = np.asarray(d, dtype=float)
    if not np.any(arr):
        return 1.0
    return float(stats.wilcoxon(arr, alternative=alternative).pvalue)


def swap_point(stored: object) -> int:
    """A stored swap point (the perf result's `ab_swap_at` metric) as a round index; anything that is
    not an integer (absent, a hand-edited or foreign row) reads as 0, one listing. listing_logs then
    checks it against the samples."""
    return stored if isinstance(stored, int) and not isinstance(stored, bool) else 0


def listing_logs(
    baseline: Sequence[float], candidate: Sequence[float], block: int = 2, swap_at: int = 0
) -> list[list[float]]:
    """The block log ratios of each listing: one list, or two when the arms swapped listing at round
    `swap_at` (each half paired on its own, so no block straddles the swap). A swap point that is
    not an even round inside both arms' samples is not one: a single listing."""
    n = min(len(baseline), len(candidate))
    if not (0 < swap_at < n and swap_at % block == 0):
        return [block_log_ratios(baseline, candidate, block)]
    halves = [
        block_log_ratios(baseline[:swap_at], candidate[:swap_at], block),
        block_log_ratios(baseline[swap_at:], candidate[swap_at:], block),
    ]
    return [h for h in halves if h] or [[]]


def listing_location(halves: Sequence[Sequence[float]]) -> tuple[float, float | None]:
    """The case's log ratio and its standard error: the median of the blocks, or with two listings
    the mean of the two listings' medians, so an effect tied to the listing role (+e in one, -e in
    the other) cancels instead of deciding which side of a split distribution the pooled median
    falls on."""
    if len(halves) == 1:
        return median(halves[0]), median_se(halves[0])
    meds = [median(h) for h in halves]
    ses = [median_se(h) for h in halves]
    se = (
        None
        if any(x is None for x in ses)
        else math.sqrt(sum(x * x for x in ses if x is not None)) / len(ses)
    )
    return sum(meds) / len(meds), se


def paired_ratio(
    baseline: Sequence[float], candidate: Sequence[float], block: int = 2, swap_at: int = 0
) -> tuple[float, float]:
    """The case statistic the A/B verdict judges: candidate time over baseline time (> 1: candidate
    slower) as the median over paired blocks (with two listings, the mean of their medians), and
    the two-sided Wilcoxon p of all blocks; (nan, nan) when no block has finite times on both arms."""
    halves = listing_logs(baseline, candidate, block, swap_at)
    d = [x for h in halves for x in h]
    if not d:
        return math.nan, math.nan
    return math.exp(listing_location(halves)[0]), wilcoxon_p(d)


def _mde(se: float, floor: float, alpha: float, power: float) -> float:
    critical = max(math.log1p(floor), float(stats.norm.isf(alpha / 2)) * se)
    return math.expm1(critical + float(stats.norm.ppf(power)) * se)


def _case(cfg: ABConfig, c: ABInput) -> tuple[CaseJudgement, float | None, float | None]:
    halves = listing_logs(c.baseline, c.candidate, c.block, c.swap_at)
    d = [x for h in halves for x in h]
    j = CaseJudgement(
        c.key,
        c.name or c.key,
        "undecided",
        "?",
        None,
        None,
        cfg.min_effect,
        None,
        None,
        rounds=(len(d), len(d)),
    )
    if len(d) < cfg.min_blocks:
        j.note = f"too few paired blocks ({len(d)}, need {cfg.min_blocks})"
        j.advice = (
            f"at least {2 * cfg.min_blocks} rounds (--iterations) would let it decide"
            if c.block > 1
            else f"at least {cfg.min_blocks} alternated pairs of runs would let it decide"
        )
        return j, None, None
    med, se_or_none = listing_location(halves)
    p = wilcoxon_p(d)
    se = se_or_none or 0.0
    j.ratio, j.p_value, j.noise = math.exp(med), p, se
    j.baseline_location = percentile(c.baseline, 25) if len(c.baseline) else None
    j.candidate_location = percentile(c.candidate, 25) if len(c.candidate) else None
    significant, beyond = p < cfg.alpha, abs(math.expm1(med)) >= cfg.min_effect
    j.status, j.mark = "same", " "
    if significant and beyond:
        j.status, j.mark = ("regression", "+") if med > 0 else ("improvement", "-")
        j.note = f"{math.expm1(med) * 100:+.1f}% paired (floor {_pct(cfg.min_effect)}, Wilcoxon p {p:.1e})"
    elif significant != beyond:
        j.mark = "~"
    j.mde, j.limited_by = _mde(se, cfg.min_effect, cfg.alpha, cfg.power), "samples"
    if j.mde > cfg.max_mde:
        j.advice = (
            f"MDE {_pct(j.mde)} (limit {_pct(cfg.max_mde)}): the paired blocks scatter too much; "
            "more rounds (--iterations) or a quieter device would resolve it"
        )
    return j, med, se


def judge_ab(cases: Sequence[ABInput], config: ABConfig | None = None) -> Judgement:
    """Judges the candidate arm against the baseline arm of one A/B run (model: module docstring)."""
    cfg = config or ABConfig()
    judged = [_case(cfg, c) for c in cases]
    out = [j for j, _, _ in judged]
    meds = [m for _, m, _ in judged if m is not None]
    ses = [s for _, m, s in judged if m is not None and s is not None]
    aggregate: dict[str, Any] = {"cases": len(meds), "verdict": "too few cases", "mde": None, "mode": "ab"}
    if len(meds) >= cfg.aggregate_min_cases:
        mean = float(np.mean(meds))
        p = wilcoxon_p(meds, "greater")
        se = math.sqrt(float(np.mean(np.square(ses))) / len(ses)) if ses else 0.0
        floor = cfg.aggregate_min_effect
        systematic = math.expm1(mean) >= floor and p < cfg.aggregate_alpha
        aggregate.update(
            geomean_ratio=math.exp(mean),
            p_value=p,
            threshold=floor,
            mde=_mde(se, floor, cfg.aggregate_alpha * 2, cfg.power),
            verdict="slower" if systematic else "same",
        )
        if systematic:
            for j in out:
                if j.status == "same" and j.ratio and j.ratio - 1.0 >= floor and (j.p_value or 1) < cfg.alpha:
                    j.status, j.mark = "regression", "+"
                    j.note = (
                        f"{(j.ratio - 1) * 100:+.1f}% paired, part of a systematic slowdown "
                        f"(geomean {(math.exp(mean) - 1) * 100:+.1f}% over {len(meds)} cases, p {p:.1e})"
                    )
    reasons: list[str] = []
    regressed = [j for j in out if j.status == "regression"]
    if aggregate["verdict"] == "slower":
        reasons.append(
            f"A/B: systematic slowdown of the candidate build: geomean of the paired ratios "
            f"{(aggregate['geomean_ratio'] - 1) * 100:+.1f}% over {aggregate['cases']} perf cases "
            f"(threshold {_pct(aggregate['threshold'])}, Wilcoxon p {aggregate['p_value']:.1e})"
        )
    if regressed:
        named = ", ".join(f"{j.name} {j.note}" for j in regressed[:10])
        reasons.append(
            f"A/B: {len(regressed)} case(s) slower than the baseline build in the same rounds: {named}"
        )
    if regressed or aggregate["verdict"] == "slower":
        return Judgement("regression", out, aggregate, reasons, [])
    too_noisy = [j.name for j in out if not j.decidable]
    stack_mde = aggregate.get("mde")
    if not out:
        reasons.append("A/B: no perf case has both arms' samples")
    if too_noisy:
        worst = max(out, key=lambda j: j.mde if j.mde is not None else math.inf)
        seen = [j for j in out if j.ratio and j.ratio > 1 and (j.p_value or 1) < cfg.alpha]
        what = (
            "no slowdown was seen"
            if not seen
            else f"{len(seen)} case(s) significantly slower but below the floor"
        )
        reasons.append(
            f"A/B: {len(too_noisy)} of {len(out)} perf case(s) too noisy to pass: {what}, but one below "
            f"their MDE could have been missed (worst {worst.name}: {worst.advice or worst.note})"
        )
    if stack_mde is not None and stack_mde > cfg.max_stack_mde:
        reasons.append(f"A/B: a shift of every case below {_pct(stack_mde)} would be missed")
    if not out or too_noisy or (stack_mde is not None and stack_mde > cfg.max_stack_mde):
        return Judgement("undecided", out, aggregate, reasons, too_noisy)
    worst = max(out, key=lambda j: j.mde or 0.0)
    reasons.append(
        f"A/B: no perf case slower than the baseline build in the same rounds; each would have shown a "
        f"slowdown of its MDE (largest {_pct(worst.mde or 0.0)}, {worst.name}; limit {_pct(cfg.max_mde)})"
        + (f", the whole stack one of {_pct(stack_mde)}" if stack_mde is not None else "")
    )
    return Judgement("pass", out, aggregate, reasons, [])


__all__ = ["ABConfig", "ABInput", "block_log_ratios", "judge_ab", "median_se"]
