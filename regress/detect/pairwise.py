"""Pairwise detection: is a new run of one case worse than the baseline of its series?

Pure: sequences in, a result out; no database, no files.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np
from scipy import stats

from regress.facts.stats import median, percentile, successive_sigma

Verdict = Literal["slower", "faster", "same", "insufficient"]

# asv compare/continuous-style marks: "+" worse, "-" better, "~" moved but not established, " " same.
MARKS: dict[str, str] = {"slower": "+", "faster": "-", "same": " ", "insufficient": "?"}


@dataclass(frozen=True)
class PairwiseConfig:
    """Thresholds of the pairwise test; all three conditions must hold to call a change.

    Attributes
    ----------
    alpha : float
        Two-sided Mann–Whitney U p-value below which the raw samples differ. 0.002 follows asv's
        ``continuous``; with ~100 samples per side the test resolves shifts far below any floor.
    min_effect : float
        Relative effect-size floor on the ratio of locations (0.02 = 2 %). Below it a change is never
        called however significant, so a very quiet case cannot alarm on a 0.3 % shift.
    noise_k : float
        Multiples of the sigma of the difference of two runs (√2 × the series' own robust
        run-to-run sigma) that the ratio must also exceed: a noisy case must move further than it
        usually wanders.
    min_history : int
        Fewer historical values than this and the noise band is not used (floor and rank test only).
    min_samples : int
        Fewer raw samples than this on either side gives the verdict "insufficient".
    location_quantile : float
        The quantile whose ratio is the effect size (asv uses medians, 0.5). Timing noise
        from a busy machine only ever adds time (Chen & Revels 2016, "Robust benchmarking in noisy
        environments"), so the lower quartile estimates the undisturbed time better than the median on
        shared machines, while keeping enough samples to be stable (measured: docs/detection.md).
    higher_is_worse : bool
        True for times (a higher value is a regression).
    """

    alpha: float = 0.002
    min_effect: float = 0.02
    noise_k: float = 4.0
    min_history: int = 5
    min_samples: int = 5
    location_quantile: float = 0.25
    higher_is_worse: bool = True


@dataclass(frozen=True)
class PairwiseResult:
    """Outcome of one pairwise comparison.

    ratio is q(candidate) / q(baseline) at the configured location quantile q; threshold the relative
    change needed (the larger of the floor and the noise band); noise the historical relative sigma
    (None without history).
    """

    verdict: Verdict
    ratio: float
    p_value: float | None
    threshold: float
    noise: float | None
    baseline_location: float
    candidate_location: float
    n_baseline: int
    n_candidate: int
    significant: bool = False
    beyond_threshold: bool = False

    @property
    def mark(self) -> str:
        """ "+" worse, "-" better, "?" too few samples, "~" only one of significance and size, " " same."""
        if self.verdict == "same" and self.significant != self.beyond_threshold:
            return "~"
        return MARKS[self.verdict]

    @property
    def relative_change(self) -> float:
        return self.ratio - 1.0


def historical_noise(history: Sequence[float]) -> float | None:
    """Robust relative run-to-run sigma of a series of nightly values.

    Uses the median absolute night-to-night difference (scaled by 1.4826/√2 to a Gaussian sigma), so
    one step or one outlier in the history does not inflate the band. Cost O(n log n).
    """
    h = np.asarray([v for v in history if v is not None and math.isfinite(v)], dtype=float)
    if h.size < 3:
        return None
    level = median(h)
    if level == 0.0:
        return None
    rel = h / level
    return successive_sigma(rel)


def compare_samples(
    baseline: Sequence[float],
    candidate: Sequence[float],
    history: Sequence[float] | None = None,
    config: PairwiseConfig | None = None,
    pooled_noise: float | None = None,
) -> PairwiseResult:
    """Compares the raw samples of a candidate run against its baseline.

    Model: each side is an i.i.d. sample of one run's timings; a change is called when (1) the
    Mann–Whitney U test (two-sided, asymptotic with tie correction) rejects equality at ``alpha``,
    (2) the ratio of the location quantiles moves by at least ``min_effect`` and (3) by at least
    ``noise_k`` · √2 times the series' historical run-to-run sigma (``history``: the series'
    earlier nightly values, oldest first). ``pooled_noise``, the typical sigma of all cases on the
    same machine, is a lower bound for that sigma, since a few nights estimate one case's sigma
    poorly, and stands in for it when the history is shorter than ``min_history``. (1) alone
    over-alarms because run-to-run variation makes any two runs "significantly" different with
    enough samples (Conbench's false-positive fatigue); (2) and (3) make the call relative to what
    matters and to what this case usually does.
    Follows asv ``continuous`` (Mann–Whitney p < 0.002 and a factor) and adds the noise band.

    Cost: O((m + n) log(m + n)) for the rank test.
    """
    cfg = config or PairwiseConfig()
    # Timings are durations: a non-positive one is no measurement (as power.py and paired.py drop
    # them); kept, a baseline of zeros made any candidate an infinite slowdown.
    b = np.asarray([v for v in baseline if math.isfinite(v) and v > 0], dtype=float)
    c = np.asarray([v for v in candidate if math.isfinite(v) and v > 0], dtype=float)
    noise = historical_noise(history) if history is not None and len(history) >= cfg.min_history else None
    if pooled_noise is not None:
        # A floor for a case's own estimate, and the estimate itself when its history is too short
        # (a second night must not judge on the effect floor alone: docs/detection.md).
        noise = pooled_noise if noise is None else max(noise, pooled_noise)
    # Both runs carry the night-to-night noise, so their difference has sigma·√2.
    threshold = max(cfg.min_effect, cfg.noise_k * math.sqrt(2.0) * noise if noise is not None else 0.0)
    if b.size == 0 or c.size == 0:
        return PairwiseResult(
            "insufficient", math.nan, None, threshold, noise, math.nan, math.nan, int(b.size), int(c.size)
        )
    q = cfg.location_quantile
    bm, cm = percentile(b, 100 * q), percentile(c, 100 * q)
    ratio = cm / bm if bm != 0 else (1.0 if cm == 0 else math.inf)
    if b.size < cfg.min_samples or c.size < cfg.min_samples:
        return PairwiseResult("insufficient", ratio, None, threshold, noise, bm, cm, int(b.size), int(c.size))
    if np.all(b == b[0]) and np.all(c == b[0]):
        p = 1.0
    else:
        p = float(stats.mannwhitneyu(c, b, alternative="two-sided", method="asymptotic").pvalue)
    change = ratio - 1.0
    significant, beyond = p < cfg.alpha, abs(change) >= threshold
    verdict: Verdict = "same"
    if significant and beyond:
        worse = change > 0 if cfg.higher_is_worse else change < 0
        verdict = "slower" if worse else "faster"
    return PairwiseResult(
        verdict, ratio, p, threshold, noise, bm, cm, int(b.size), int(c.size), significant, beyond
    )
