"""Change points over one series of nightly values (history analysis, DESIGN §6).

Pure: sequences in, a list of `ChangePoint` out; no database, no files.

Method ("robust binary segmentation", chosen by measurement: docs/detection.md)
-----------------------------------------------------------------------------
1. Noise scale. sigma = 1.4826 · median|x[i+1] − x[i]| / √2, the median absolute successive
   difference (a steady series' sigma; unaffected by a few steps or outliers, unlike the sample
   standard deviation that Otava's t-test uses inside each window).
2. Outliers. Every value is clipped to its 3-point running median ± k·sigma. A median of 3 erases any
   single-night excursion but keeps every step that lasts two nights, so "a one-night outlier that
   returns is not a step" holds by construction, and the last night alone never makes a step.
3. Segmentation. Binary segmentation (Scott & Knott 1974; Killick et al. 2012 for the family) of the
   clipped series under a Gaussian mean-shift model with the known sigma of (1): in a segment the
   split t maximises the two-sample z = |mean(left) − mean(right)| / (sigma·√(1/n₁ + 1/n₂)); its
   two-sided normal p-value times the number of candidate splits (Bonferroni) must be below
   ``alpha``, the relative change at least ``min_relative_change`` and, when raw samples are given,
   a Mann–Whitney U test on the samples of the nearest nights around the split must agree (nights
   clipped in step 2 are skipped; the rank test only vetoes, since pooled samples of a few nights
   carry no night-to-night drift). Accepted splits recurse into both halves. With
   ``sample_location="iqm"`` the series is each night's interquartile mean instead of its value.
4. Pruning, as Otava's merge step (Fleming et al. 2023, "Hunter"): each change point is re-tested
   against its neighbouring segments only; the weakest failing one is removed and its neighbours
   re-tested, until all pass. Then excursions of a few nights that returned to the old level are
   dropped whole (the one-night rule of step 2, extended to finished short excursions).

Cost: O(n log n) per series with numpy (prefix sums make each segment scan O(length)); about 1 ms for
a year of nights, so 500 series in well under a second.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np

from regress.facts.stats import clip_outliers, median, successive_sigma

from .config import ChangePointConfig

Direction = Literal["slower", "faster"]


@dataclass(frozen=True)
class ChangePoint:
    """A step in a series.

    index is the first position (in the input sequence) at the new level; magnitude the relative
    change (after − before) / |before| of the clipped segment means on either side; p_value the
    Bonferroni-corrected p-value of the split against its neighbouring segments.
    """

    index: int
    direction: Direction
    magnitude: float
    p_value: float
    before_mean: float
    after_mean: float

    def to_dict(self) -> dict[str, float | int | str]:
        return {
            "index": self.index,
            "direction": self.direction,
            "magnitude": self.magnitude,
            "p_value": self.p_value,
            "before_mean": self.before_mean,
            "after_mean": self.after_mean,
        }


def interquartile_mean(samples: Sequence[np.ndarray], fallback: np.ndarray) -> np.ndarray:
    """Each night's interquartile mean (the mean of its middle half of samples; 25 % trimmed mean).

    Model: a night's samples are its location plus noise that may be heavy-tailed (one-sided
    interference) or bimodal (two alternating timings, as the H200 samples show). The median jumps
    between the two modes of a bimodal night and the mean follows the tail; the interquartile mean
    does neither and keeps most of the mean's efficiency for Gaussian noise (Rousseeuw & Leroy 1987).
    Nights with fewer than 4 samples keep their `fallback` value. Cost: O(n·k log k) for n nights
    of k samples, vectorised when all nights have the same number of samples.
    """
    out = np.asarray(fallback, dtype=float).copy()
    sizes = np.fromiter((s.size for s in samples), dtype=np.int64, count=len(samples))
    if sizes.size and np.all(sizes == sizes[0]) and sizes[0] >= 4:
        k = int(sizes[0])
        srt = np.sort(np.stack(samples), axis=1)
        means: np.ndarray = srt[:, k // 4 : k - k // 4].mean(axis=1)
        return means
    for i, s in enumerate(samples):
        if s.size >= 4:
            k = s.size
            out[i] = float(np.sort(s)[k // 4 : k - k // 4].mean())
    return out


def _best_split(csum: np.ndarray, a: int, b: int, m: int, sigma: float) -> tuple[int, float]:
    """Split t in [a+m, b-m] maximising the mean-shift z of segment [a, b); returns (t, z)."""
    t = np.arange(a + m, b - m + 1)
    n1, n2 = t - a, b - t
    left = (csum[t] - csum[a]) / n1
    right = (csum[b] - csum[t]) / n2
    with np.errstate(over="ignore"):  # a step far above a tiny sigma: z = inf, p = 0, as meant
        z = np.abs(left - right) / (sigma * np.sqrt(1.0 / n1 + 1.0 / n2))
    i = int(np.argmax(z))
    return int(t[i]), float(z[i])


def _corrected_p(z: float, candidates: int) -> float:
    # Two-sided normal tail times the number of splits that were scanned (Bonferroni).
    return min(1.0, math.erfc(z / math.sqrt(2.0)) * max(candidates, 1))


class _Series:
    """One series prepared for segmentation: clipped values, prefix sums, noise scale, samples."""

    def __init__(self, x: np.ndarray, samples: list[np.ndarray] | None, cfg: ChangePointConfig) -> None:
        self.cfg = cfg
        self.sigma_raw = successive_sigma(x)
        scale = max(median(np.abs(x)), 1e-300)
        # A perfectly steady series (sigma 0) still needs a finite z; any real step then passes.
        self.sigma = max(self.sigma_raw, 1e-9 * scale)
        self.y = clip_outliers(x, self.sigma_raw, cfg.outlier_k)
        self.kept = self.y == x  # nights not clipped as outliers
        self.csum = np.concatenate([[0.0], np.cumsum(self.y)])
        self.samples = samples

    def mean(self, a: int, b: int) -> float:
        return float((self.csum[b] - self.csum[a]) / (b - a))

    def test(self, a: int, t: int, b: int, candidates: int) -> tuple[float, float, float]:
        """(corrected p, before mean, after mean) of a split at t of segment [a, b)."""
        n1, n2 = t - a, b - t
        before, after = self.mean(a, t), self.mean(t, b)
        z = abs(after - before) / (self.sigma * math.sqrt(1.0 / n1 + 1.0 / n2))
        return _corrected_p(z, candidates), before, after

    def accepts(self, a: int, t: int, b: int, p: float, before: float, after: float) -> bool:
        cfg = self.cfg
        if p >= cfg.alpha or before == 0.0:
            return False
        rel = abs(after - before) / abs(before)
        # A step from next to zero has no finite relative size, as one from zero (refused above).
        if not math.isfinite(rel) or rel < cfg.min_relative_change:
            return False
        if self.samples is not None:
            w = cfg.sample_window
            # The nights nearest the split on each side, skipping the ones clipped as outliers in
            # step 2: one disturbed night next to a step must not veto it.
            left = [
                self.samples[i] for i in range(t - 1, a - 1, -1) if self.samples[i].size and self.kept[i]
            ][:w]
            right = [self.samples[i] for i in range(t, b) if self.samples[i].size and self.kept[i]][:w]
            if left and right:
                lv, rv = np.concatenate(left), np.concatenate(right)
                if lv.size >= 3 and rv.size >= 3 and not (np.all(lv == lv[0]) and np.all(rv == lv[0])):
                    # scipy.stats only here (raw samples given): importing it costs ~1 s of CLI start.
                    from scipy import stats

                    sp = stats.mannwhitneyu(lv, rv, alternative="two-sided", method="asymptotic").pvalue
                    if sp >= cfg.sample_alpha:
                        return False
        return True


def _drop_transients(
    series: _Series,
    cuts: list[int],
    tested: list[tuple[bool, float, float, float]],
    n: int,
    m: int,
    max_transient: int,
) -> tuple[list[int], list[tuple[bool, float, float, float]]]:
    """Removes excursions that returned: two cuts at most `max_transient` nights apart, in opposite
    directions, with the levels before the first and after the second not different. Only a
    finished excursion is dropped; one at the end of the series has not returned (yet)."""
    i = 0
    while i + 1 < len(cuts):
        t1, t2 = cuts[i], cuts[i + 1]
        (_, _, b1, a1), (_, _, b2, a2) = tested[i], tested[i + 1]
        if t2 - t1 <= max_transient and (a1 > b1) != (a2 > b2):
            bounds = [0, *cuts, n]
            a, b = bounds[i], bounds[i + 3]
            # Medians: the segments around a disturbed stretch often hold more disturbed nights.
            before, after = median(series.y[a:t1]), median(series.y[t2:b])
            left, right = t1 - a, b - t2
            # 1.2533: the standard error of a median over that of a mean, for Gaussian noise.
            z = abs(after - before) / (1.2533 * series.sigma * math.sqrt(1.0 / left + 1.0 / right))
            p = _corrected_p(z, max(1, b - a - 2 * m + 1))
            if not series.accepts(a, t2, b, p, before, after) or left < m or right < m:
                del cuts[i : i + 2]
                del tested[i : i + 2]
                i = max(0, i - 1)
                continue
        i += 1
    return cuts, tested


def _unscaled(mean: float, exp: int) -> float:
    """A scaled segment mean back at its values' scale. The mean of finite values is finite, but its
    rounding in the scaled space can land one ulp past the float maximum, where ldexp raises."""
    try:
        return math.ldexp(mean, exp)
    except OverflowError:
        return math.copysign(np.finfo(float).max, mean)


def detect_change_points(
    values: Sequence[float],
    samples: Sequence[Sequence[float]] | None = None,
    config: ChangePointConfig | None = None,
) -> list[ChangePoint]:
    """Finds the steps in a time-ordered series of nightly values.

    Parameters
    ----------
    values : sequence of float
        One value per night (e.g. the p50 time), oldest first. Non-finite values are skipped.
    samples : sequence of sequences of float, optional
        The raw samples behind each value (same length as ``values``). When given, a split must
        also be significant on the raw samples (Mann–Whitney U), which keeps noisy nights honest.
    config : ChangePointConfig, optional
        Thresholds; the defaults are the ones measured in docs/detection.md.

    Returns
    -------
    list of ChangePoint
        Sorted by index. Model, method and cost: see the module docstring.
    """
    cfg = config or ChangePointConfig()
    if samples is not None and len(samples) != len(values):
        raise ValueError(f"samples has {len(samples)} nights, values has {len(values)}")
    raw = np.asarray(values, dtype=float)
    keep = np.flatnonzero(np.isfinite(raw))
    x = raw[keep]
    m = max(1, cfg.min_segment)
    if x.size < 2 * m:
        return []
    sample_arrays = None
    if samples is not None:
        sample_arrays = [np.asarray(samples[int(i)], dtype=float) for i in keep]
        sample_arrays = [s[np.isfinite(s)] for s in sample_arrays]
        if cfg.sample_location == "iqm":
            x = interquartile_mean(sample_arrays, x)
    # Scaled by a power of two to |x| < 1: exact, so nothing else changes, but the prefix sums of
    # values near the float maximum no longer overflow into inf (a wrong index, an Infinity mean).
    amax = float(np.max(np.abs(x)))
    exp = math.frexp(amax)[1] if math.isfinite(amax) else 0
    x = np.ldexp(x, -exp)
    series = _Series(x, sample_arrays, cfg)

    # Split step: binary segmentation, each segment tested with Bonferroni over its candidate splits.
    cuts: list[int] = []
    pending = [(0, int(x.size))]
    while pending and len(cuts) < cfg.max_change_points:
        a, b = pending.pop()
        if b - a < 2 * m:
            continue
        t, _ = _best_split(series.csum, a, b, m, series.sigma)
        p, before, after = series.test(a, t, b, b - a - 2 * m + 1)
        if series.accepts(a, t, b, p, before, after):
            cuts.append(t)
            pending += [(a, t), (t, b)]
    cuts.sort()

    # Merge step: re-test each cut against its neighbouring segments; drop the weakest failure.
    while True:
        bounds = [0, *cuts, int(x.size)]
        tested = []
        for i, t in enumerate(cuts):
            a, b = bounds[i], bounds[i + 2]
            p, before, after = series.test(a, t, b, b - a - 2 * m + 1)
            tested.append((series.accepts(a, t, b, p, before, after), p, before, after))
        failing = [i for i, r in enumerate(tested) if not r[0]]
        if not failing:
            break
        del cuts[max(failing, key=lambda i: tested[i][1])]

    cuts, tested = _drop_transients(series, cuts, tested, int(x.size), m, cfg.max_transient)

    out: list[ChangePoint] = []
    for t, (_, p, before, after) in zip(cuts, tested, strict=True):
        up = after > before
        slower = up if cfg.higher_is_worse else not up
        out.append(
            ChangePoint(
                index=int(keep[t]),
                direction="slower" if slower else "faster",
                magnitude=(after - before) / abs(before),
                p_value=p,
                before_mean=_unscaled(before, exp),
                after_mean=_unscaled(after, exp),
            )
        )
    return out
