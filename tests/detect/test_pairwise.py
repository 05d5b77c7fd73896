"""Pure pairwise tests: rank test AND effect floor AND the series' noise band."""

from __future__ import annotations

import numpy as np

from regress.detect import PairwiseConfig, compare_samples, historical_noise


def _samples(level: float, cv: float, n: int = 100, seed: int = 0) -> list[float]:
    rng = np.random.default_rng(seed)
    return list(level * (1 + cv * rng.standard_normal(n)))


def test_ten_percent_slowdown_is_slower() -> None:
    r = compare_samples(_samples(1.0, 0.01), _samples(1.1, 0.01, seed=1))
    assert r.verdict == "slower"
    assert r.mark == "+"
    assert r.ratio > 1.08


def test_speedup_is_faster() -> None:
    r = compare_samples(_samples(1.0, 0.01), _samples(0.9, 0.01, seed=1))
    assert (r.verdict, r.mark) == ("faster", "-")


def test_same_distribution_is_same() -> None:
    r = compare_samples(_samples(1.0, 0.01), _samples(1.0, 0.01, seed=1))
    assert (r.verdict, r.mark) == ("same", " ")


def test_significant_but_below_floor_is_marked_tilde() -> None:
    r = compare_samples(_samples(1.0, 0.001), _samples(1.005, 0.001, seed=1))
    assert r.significant and not r.beyond_threshold
    assert (r.verdict, r.mark) == ("same", "~")


def test_quiet_case_flags_two_percent_and_noisy_case_does_not() -> None:
    quiet_history = [1.0 + 0.001 * d for d in np.random.default_rng(2).standard_normal(30)]
    noisy_history = [1.0 + 0.03 * d for d in np.random.default_rng(3).standard_normal(30)]
    base, cand = _samples(1.0, 0.005), _samples(1.025, 0.005, seed=1)
    assert compare_samples(base, cand, history=quiet_history).verdict == "slower"
    noisy = compare_samples(base, cand, history=noisy_history)
    assert noisy.verdict == "same"
    assert noisy.noise is not None and noisy.threshold > 0.025


def test_too_few_samples_is_insufficient() -> None:
    r = compare_samples([1.0, 1.0], [2.0, 2.0])
    assert (r.verdict, r.mark) == ("insufficient", "?")
    assert compare_samples([], [1.0]).verdict == "insufficient"


def test_non_positive_timings_are_no_measurement() -> None:
    """A baseline of zero timings was an infinite slowdown of any candidate (exit 1, +inf %)."""
    assert compare_samples([0.0] * 40, _samples(1.0, 0.01)).verdict == "insufficient"
    assert compare_samples(_samples(1.0, 0.01), [-1.0] * 40).verdict == "insufficient"
    mixed = compare_samples([0.0, -2.0, *_samples(1.0, 0.01)], _samples(1.0, 0.01, seed=1))
    assert mixed.verdict == "same" and mixed.n_baseline == 100


def test_identical_constant_samples() -> None:
    r = compare_samples([3.0] * 10, [3.0] * 10)
    assert r.verdict == "same" and r.p_value == 1.0


def test_history_noise_is_robust_to_a_step() -> None:
    h = [1.0] * 10 + [1.5] * 10
    assert historical_noise(h) == 0.0
    assert historical_noise([1.0, 2.0]) is None


def test_lower_is_worse() -> None:
    cfg = PairwiseConfig(higher_is_worse=False)
    assert compare_samples(_samples(1.0, 0.01), _samples(0.8, 0.01, seed=1), config=cfg).verdict == "slower"
