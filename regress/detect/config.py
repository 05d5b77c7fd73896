"""Detection settings with no numerics behind them (no numpy, no scipy), so the CLI can show their
defaults in --help without paying for those imports: the change-point detector's thresholds and the
gate rule's pass limits (verdict.RuleConfig takes its defaults from here)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

MAX_MDE = 0.15  # a case whose minimum detectable slowdown exceeds this leaves the verdict undecided
MAX_STACK_MDE = 0.10  # the same for a shift of every case together

# Stated run-to-run noise per backend, for a comparison whose stack has too few clean nights to
# know its own (fewer than min_history): (sigma of one case between two runs, sigma of the
# stack-wide mean), relative. Measured, not guessed (docs/detection.md, "Noise priors"):
# cuda: the H200 quick perf nights of benchmarks/service/gate_calibration.sh and the committed H200
# bundles, where the noisiest quick case (the 25 µs cross-attention shape) moved about 1.7 % between
# processes on one machine and the rest 0.3-1 %. No prior for the shared CPU (its noise is the
# neighbours' load, not the machine's) nor for hip: there, a gate without history says how many
# nights would decide, and A/B decides on the first.
PRIOR_NOISE: dict[str, tuple[float, float]] = {"cuda": (0.02, 0.005)}


def prior_noise(backend: str) -> tuple[float | None, float | None]:
    case, stack = PRIOR_NOISE.get(backend, (None, None))
    return case, stack


@dataclass(frozen=True)
class ChangePointConfig:
    """Thresholds of `detect_change_points` (defaults measured in docs/detection.md).

    Attributes
    ----------
    alpha : float
        Family-wise false-alarm probability per tested segment (Bonferroni over candidate splits).
    min_relative_change : float
        Relative step size below which no change point is reported (0.01 = 1 %).
    min_segment : int
        Fewest nights on either side of a change point. 2 means a step is confirmed by its second
        night; a one-night excursion can never form a segment.
    outlier_k : float
        Values beyond their 3-point running median ± outlier_k·sigma are clipped to that band.
    sample_alpha : float
        With raw samples, the Mann–Whitney U p-value (two-sided) the nights around a split must reach.
    sample_window : int
        Nights on each side of a split whose raw samples are pooled for that test.
    higher_is_worse : bool
        True for times: an upward step is "slower".
    max_change_points : int
        Safety bound on the recursion.
    max_transient : int
        An excursion of at most this many nights that returns to its old level is dropped (both of
        its change points): a disturbed weekend is not two regressions.
    sample_location : {"values", "iqm"}
        With raw samples, what the segmentation runs on: "values" (default) the values as given;
        "iqm" each night's interquartile mean of its samples (nights with fewer than 4 samples
        keep their value). Measured in docs/detection.md: "iqm" finds more 5–10 % steps on bimodal
        nights but fewer 1–3 % ones, so it is not the default.
    """

    alpha: float = 0.001
    min_relative_change: float = 0.01
    min_segment: int = 2
    outlier_k: float = 2.0
    sample_alpha: float = 0.001
    sample_window: int = 3
    higher_is_worse: bool = True
    max_change_points: int = 64
    max_transient: int = 3
    sample_location: Literal["values", "iqm"] = "values"
