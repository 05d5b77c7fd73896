"""The statistics every layer shares, each formula once: the percentile, the median and the upper
median, the geometric mean, the two robust sigmas, the order-statistic standard error and the
running-median clip.

Pure and light: numpy is imported inside the functions that need it, so `metrics` (and through it
the CLI's `--help`) can use this module without loading numpy. The decisions built on these (the
pairwise test, change points, the MDE, the verdict) live in `detect/`.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import numpy as np

# 1 / Φ⁻¹(3/4): the median absolute deviation of a Gaussian times this is its sigma.
MAD_TO_SIGMA = 1.4826


def percentile(values: Sequence[float] | np.ndarray, q: float) -> float:
    """Linear-interpolated percentile, q in [0, 100] (numpy's default method); nan when empty.

    A numpy array goes to numpy (the ULP suite's millions of elements); a short list stays in plain
    Python, where numpy's call overhead would be most of the cost (the demo calls it ~10^5 times)."""
    if not len(values):
        return math.nan
    if type(values).__module__ == "numpy":  # an ndarray; numpy is imported only when one is given
        import numpy as np

        return float(np.percentile(values, q))
    s = sorted(values)
    pos = (len(s) - 1) * q / 100.0
    lo = math.floor(pos)
    hi = min(lo + 1, len(s) - 1)
    return float(s[lo] + (s[hi] - s[lo]) * (pos - lo))


def median(values: Sequence[float] | np.ndarray) -> float:
    """The middle value, or the mean of the two middle ones (numpy's median); nan when empty."""
    if not len(values):
        return math.nan
    import numpy as np

    return float(np.median(np.asarray(values, dtype=float)))


def upper_median(values: Iterable[float]) -> float:
    """The higher of the two middle values of an even count (the middle one of an odd count): always
    a value that was observed, not a mean of two (a case's wall time that the scheduler deals by, a
    benchmark's table cell). nan when empty."""
    s = sorted(values)
    return float(s[len(s) // 2]) if s else math.nan


def geomean(values: Iterable[float]) -> float | None:
    """Geometric mean of the positive finite values; None when there are none."""
    logs = [math.log(v) for v in values if v > 0 and math.isfinite(v)]
    return math.exp(math.fsum(logs) / len(logs)) if logs else None


def mad_sigma(values: Sequence[float] | np.ndarray) -> float:
    """Robust sigma of a sample: 1.4826 · median |x − median(x)| (a few outliers barely move it)."""
    import numpy as np

    x = np.asarray(values, dtype=float)
    if x.size == 0:
        return 0.0
    return float(MAD_TO_SIGMA * np.median(np.abs(x - np.median(x))))


def successive_sigma(values: Sequence[float] | np.ndarray) -> float:
    """Robust sigma of a time series: 1.4826 · median |x[i+1] − x[i]| / √2, from neighbours only, so
    one step in the series (a real change) inflates it no more than one outlier does."""
    import numpy as np

    x = np.asarray(values, dtype=float)
    if x.size < 2:
        return 0.0
    return float(MAD_TO_SIGMA * np.median(np.abs(np.diff(x))) / math.sqrt(2.0))


def order_statistic_se(values: Sequence[float] | np.ndarray, q: float) -> float | None:
    """Standard error of the q-quantile of `values` from its 95 % order-statistic interval / 3.92;
    None below 4 values. An interval reaching past the extreme values is given the full range: a
    few values cannot claim more precision than their spread."""
    import numpy as np

    x = np.sort(np.asarray(values, dtype=float))
    n = x.size
    if n < 4:
        return None
    half = 1.96 * math.sqrt(n * q * (1.0 - q))
    lo = max(0, math.floor(n * q - half) - 1)
    hi = min(n - 1, math.ceil(n * q + half) - 1)
    return float(x[hi] - x[lo]) / (2 * 1.96)


def clip_outliers(x: np.ndarray, sigma: float, k: float) -> np.ndarray:
    """Clips each value to its 3-point running median ± k·sigma (ends use the nearest full window)."""
    import numpy as np

    n = x.size
    if n < 3:
        return x.copy()
    med = np.empty(n)
    med[1:-1] = np.median(np.stack([x[:-2], x[1:-1], x[2:]]), axis=0)
    med[0], med[-1] = med[1], med[-2]
    clipped: np.ndarray = np.clip(x, med - k * sigma, med + k * sigma)
    return clipped
