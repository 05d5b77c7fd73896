"""Power of the pairwise rule: the smallest slowdown a comparison of two runs would have caught.

Pure: sequences in, dataclasses out; no database, no files.

Model
-----
The rule (`pairwise.compare_samples`) calls a slowdown when the log ratio of the two runs' location
quantiles, d̂ = log q(candidate) − log q(baseline), is both significant and at least the case's
threshold T. d̂ carries two noises:

- *sampling*: the standard error of each run's location quantile, from that run's own samples.
  Distribution-free (timing samples are skewed and often bimodal): the order statistics that
  bracket the q-quantile with 95 % confidence, x_(l) and x_(u) with l, u = nq ∓ 1.96·√(nq(1−q)),
  span about 2·1.96 standard errors (the binomial interval of Hahn & Meeker 1991, §5.2). It shrinks
  as 1/√rounds.
- *between runs*: two runs on two nights differ by more than their samples say (clocks, placement,
  a busy machine). Its sigma σ_b is the series' night-to-night sigma, so the difference of two runs
  has √2·σ_b. More rounds do not shrink it.

With σ_d = √(se_b² + se_c² + 2σ_b²) (conservative: σ_b already holds some sampling noise) and the
critical log ratio c = max(log(1 + T), z_{1−α/2}·√(se_b² + se_c²)), a true slowdown δ is caught
with probability `power` when log(1 + δ) ≥ c + z_power·σ_d. That δ is the minimum detectable effect
(MDE). The significance part is the normal approximation of the rank test's location shift; the
threshold part is exact for the rule.

Cost: O(n log n) per case (two quantiles and two order statistics per side).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np
from scipy import stats

from regress.facts.stats import mad_sigma, median, order_statistic_se

Limit = Literal["samples", "between-runs", "threshold"]

# Fewest cases from which the spread of one pair's per-case ratios estimates run-to-run noise.
MIN_PAIR_CASES = 8


def quantile_se(samples: Sequence[float], q: float) -> float | None:
    """Standard error of log(quantile q) of one run's samples (order-statistic interval / 3.92).

    None below 4 positive samples. A run whose interval reaches past its extreme samples is given
    the full range: a few samples cannot claim more precision than their spread.
    """
    return order_statistic_se(np.log([v for v in samples if v > 0 and math.isfinite(v)]), q)


def pair_noise(
    ratios: Sequence[float], sampling_se: Sequence[float] = (), min_cases: int = MIN_PAIR_CASES
) -> float | None:
    """Run-to-run sigma (of one run, relative) from the spread of one pair's per-case ratios.

    Most cases of a pair do not change, so the robust spread (1.4826·MAD) of their log ratios around
    the median is √2 times one run's sigma; a few changed cases barely move a MAD, and a shift of
    every case (a drill, a slower stack) moves none. The part of that spread the samples already
    explain (the median of the cases' sampling standard errors of the log ratio, `sampling_se`) is
    taken out in quadrature, so few rounds are not mistaken for a noisy machine. None ("unknown")
    with too few cases or when the sampling error explains the whole spread.

    Descriptive only: the rule never takes its noise band from the pair it judges (a real
    regression, rarely uniform, would widen the band that is meant to catch it).
    """
    logs = np.log(np.asarray([r for r in ratios if r > 0 and math.isfinite(r)], dtype=float))
    if logs.size < min_cases:
        return None
    spread = mad_sigma(logs)
    se = median(sampling_se) if len(sampling_se) else 0.0
    if spread <= se:
        # The samples explain all of the spread: what is left is unknown, not zero (a 0.0 here made
        # the noise band vanish exactly when the samples were noisiest).
        return None
    return math.sqrt((spread**2 - se**2) / 2.0)


@dataclass(frozen=True)
class Power:
    """What one comparison could detect.

    mde: the smallest relative slowdown caught with probability `power` (0.12 = 12 %);
    se_samples: the sampling standard error of the log ratio; sigma_between: the run-to-run sigma
    used (relative, one run); limited_by: which term dominates the MDE.
    """

    mde: float
    se_samples: float
    sigma_between: float
    threshold: float
    limited_by: Limit

    def rounds_factor(self, limit: float, alpha: float, power: float) -> float | None:
        """How many times the rounds would bring the MDE to `limit` (1.0: already there); None when
        no number of rounds can (the threshold or the between-run noise alone exceed it)."""
        if self.mde <= limit:
            return 1.0
        if _mde(0.0, self.sigma_between, self.threshold, alpha, power) > limit or self.se_samples == 0:
            return None
        lo, hi = 1.0, 2.0
        while _mde(self.se_samples / math.sqrt(hi), self.sigma_between, self.threshold, alpha, power) > limit:
            lo, hi = hi, hi * 2
            if hi > 1e6:
                return None
        for _ in range(40):
            mid = (lo + hi) / 2
            se = self.se_samples / math.sqrt(mid)
            above = _mde(se, self.sigma_between, self.threshold, alpha, power) > limit
            lo, hi = (mid, hi) if above else (lo, mid)
        return hi


def _mde(se_w: float, sigma_b: float, threshold: float, alpha: float, power: float) -> float:
    critical = max(math.log1p(threshold), float(stats.norm.isf(alpha / 2)) * se_w)
    sigma_d = math.sqrt(se_w**2 + 2.0 * sigma_b**2)
    return math.expm1(critical + float(stats.norm.ppf(power)) * sigma_d)


def minimum_detectable_effect(
    baseline: Sequence[float],
    candidate: Sequence[float],
    *,
    quantile: float,
    alpha: float,
    threshold: float,
    sigma_between: float | None,
    power: float = 0.8,
) -> Power | None:
    """The MDE of comparing these two runs with the pairwise rule (model: module docstring).

    Parameters
    ----------
    baseline, candidate : raw samples of the two runs.
    quantile : the location quantile of the rule. alpha : its two-sided significance.
    threshold : the relative change the rule requires (its floor or noise band).
    sigma_between : run-to-run relative sigma of one run (history, pooled or pair spread); None
        counts as 0 (then the MDE covers the samples only, and says so through `limited_by`).
    power : the probability of catching a slowdown of exactly the MDE.

    Returns None when either run has too few samples to say anything.
    """
    se_b, se_c = quantile_se(baseline, quantile), quantile_se(candidate, quantile)
    if se_b is None or se_c is None:
        return None
    se_w = math.hypot(se_b, se_c)
    sb = sigma_between or 0.0
    mde = _mde(se_w, sb, threshold, alpha, power)
    z_sig = float(stats.norm.isf(alpha / 2)) * se_w
    if z_sig > math.log1p(threshold):
        limited: Limit = "samples"
    elif math.sqrt(2.0) * sb > se_w:
        limited = "between-runs"
    else:
        limited = "threshold"
    return Power(mde, se_w, sb, threshold, limited)
