"""The minimum detectable effect of the pairwise rule (pure)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from regress.detect import PairwiseConfig, compare_samples
from regress.detect.power import minimum_detectable_effect, pair_noise, quantile_se


def _samples(level: float, cv: float, n: int, seed: int) -> list[float]:
    rng = np.random.default_rng(seed)
    return [float(v) for v in level * (1 + cv * np.abs(rng.standard_normal(n)))]


def test_quantile_se_shrinks_as_one_over_root_n() -> None:
    small = quantile_se(_samples(1.0, 0.05, 100, 0), 0.25)
    large = quantile_se(_samples(1.0, 0.05, 1600, 0), 0.25)
    assert small is not None and large is not None
    assert 2.5 < small / large < 6.0
    assert quantile_se([1.0, 2.0, 3.0], 0.25) is None


def test_mde_is_the_threshold_plus_a_power_margin_and_grows_with_noise() -> None:
    b, c = _samples(1.0, 0.01, 100, 0), _samples(1.0, 0.01, 100, 1)
    quiet = minimum_detectable_effect(b, c, quantile=0.25, alpha=0.002, threshold=0.05, sigma_between=0.002)
    noisy = minimum_detectable_effect(b, c, quantile=0.25, alpha=0.002, threshold=0.05, sigma_between=0.05)
    assert quiet is not None and noisy is not None
    assert 0.05 < quiet.mde < 0.06 and quiet.limited_by != "samples"
    assert noisy.mde > 0.10 and noisy.limited_by == "between-runs"
    few = minimum_detectable_effect(b, c[:3], quantile=0.25, alpha=0.002, threshold=0.05, sigma_between=0)
    assert few is None


def test_few_samples_limit_the_mde_and_more_rounds_help() -> None:
    b, c = _samples(1.0, 0.5, 8, 0), _samples(1.0, 0.5, 8, 1)
    p = minimum_detectable_effect(b, c, quantile=0.25, alpha=0.002, threshold=0.05, sigma_between=0.0)
    assert p is not None and p.limited_by == "samples" and p.mde > 0.15
    factor = p.rounds_factor(0.15, 0.002, 0.8)
    assert factor is not None and factor > 1.0
    # Between-run noise alone above the limit: no number of rounds helps.
    q = minimum_detectable_effect(b, c, quantile=0.25, alpha=0.002, threshold=0.05, sigma_between=0.2)
    assert q is not None and q.rounds_factor(0.15, 0.002, 0.8) is None


@pytest.mark.parametrize("sigma_between", [0.0, 0.01])
def test_a_slowdown_of_the_mde_is_caught_about_as_often_as_promised(sigma_between: float) -> None:
    """Simulated: slowdowns of exactly the MDE, with run-to-run noise of sigma_between, are caught by
    compare_samples in roughly `power` of the trials (the model is conservative: at least 0.7)."""
    cfg = PairwiseConfig(min_effect=0.05, noise_k=0.0)
    rng = np.random.default_rng(5)
    b0, c0 = _samples(1.0, 0.02, 60, 10), _samples(1.0, 0.02, 60, 11)
    p = minimum_detectable_effect(
        b0, c0, quantile=0.25, alpha=cfg.alpha, threshold=0.05, sigma_between=sigma_between
    )
    assert p is not None
    caught = 0
    for t in range(200):
        lb, lc = np.exp(sigma_between * rng.standard_normal(2))
        b = [v * lb for v in _samples(1.0, 0.02, 60, 1000 + t)]
        c = [v * lc * (1 + p.mde) for v in _samples(1.0, 0.02, 60, 2000 + t)]
        caught += compare_samples(b, c, config=cfg).verdict == "slower"
    assert caught / 200 >= 0.7


def test_pair_noise_ignores_a_common_shift_and_needs_enough_cases() -> None:
    rng = np.random.default_rng(0)
    ratios = list(np.exp(0.02 * rng.standard_normal(30)))
    s = pair_noise(ratios)
    assert s is not None and 0.008 < s < 0.025
    shifted = pair_noise([r * 1.3 for r in ratios])
    assert shifted is not None and math.isclose(shifted, s, rel_tol=1e-9)
    assert pair_noise(ratios[:5]) is None


def test_pair_noise_is_unknown_not_zero_when_the_samples_explain_the_spread() -> None:
    """It used to return 0.0 here, so the noise band vanished exactly when the samples were noisiest
    (a clean-vs-clean gate then flagged three cases at +55 %, +313 % and +181 %)."""
    rng = np.random.default_rng(1)
    ratios = list(np.exp(0.01 * rng.standard_normal(18)))
    assert pair_noise(ratios, [0.5] * 18) is None
    assert pair_noise(ratios) is not None
