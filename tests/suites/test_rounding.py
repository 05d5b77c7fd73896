"""The directed rounding cases (regress/run/suites/rounding.py): exact by construction, each mode's rule
stated independently of the kernels' recipes, and a bias statistic that tells the modes apart."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from regress.facts import numerics
from regress.facts.metrics import load_contract
from regress.facts.results import ROUNDING_MODES
from regress.run.suites import rounding

SK = (4, 128)


def _f32(bits: np.ndarray) -> np.ndarray:
    return np.asarray(bits, dtype=np.uint32).view(np.float32)


def test_rule_agrees_with_the_kernels_recipe_on_every_edge() -> None:
    """rule_bits (kept bits vs the half) against bf16.h's add-and-shift recipe (regress.facts.numerics
    carries the same one): all 2^16 dropped patterns under even, odd, all-ones and largest-finite
    upper halves of both signs, Inf, NaNs, and a million random patterns."""
    low = np.arange(1 << 16, dtype=np.uint64)
    uppers = [0x3F80, 0x3F81, 0x3FFF, 0x7F7F, 0x0000, 0x0080, 0x7F80, 0x7FC0, 0x7F81]
    edges = [((s << 15 | u) << 16) | low for u in uppers for s in (0, 1)]
    rng = np.random.default_rng(0)
    patterns = np.concatenate([*edges, rng.integers(0, 1 << 32, 1 << 20, dtype=np.uint64)]).astype(np.uint32)
    for mode in ROUNDING_MODES:
        want = numerics.f32_bits_to_bf16(patterns, mode)  # type: ignore[arg-type]
        assert (rounding.rule_bits(patterns, mode) == want).all(), mode  # type: ignore[arg-type]


def test_the_rules_on_a_tie() -> None:
    tie_even, tie_odd, carry = 0x3F808000, 0x3F818000, 0x3FFF8000  # 1 + 2^-8, odd + half, max mantissa + half
    got = {
        m: rounding.rule_bits(np.array([tie_even, tie_odd, carry, 0xBF808000]), m).tolist()
        for m in ROUNDING_MODES
    }
    assert got["rtne"] == [0x3F80, 0x3F82, 0x4000, 0xBF80]
    assert got["rtna"] == [0x3F81, 0x3F82, 0x4000, 0xBF81]
    assert got["rtz"] == [0x3F80, 0x3F81, 0x3FFF, 0xBF80]


@pytest.mark.parametrize("sk", SK)
def test_every_mean_is_exact_in_fp32_in_any_order(sk: int) -> None:
    """Each column's fp32 sum is the same whatever order a kernel adds in: forward, backward,
    pairwise and shuffled fp32 sums all equal the fp64 sum, so the mean is known exactly."""
    v_bits, labels = rounding.directed_v(1, 3, sk, seed=42)
    assert len(labels) == rounding.HEAD_DIM and len(set(labels)) > 100
    v = _f32(v_bits.astype(np.uint32) << 16)  # [1, 3, Sk, D] fp32
    finite = np.isfinite(v).all(axis=2)
    with np.errstate(invalid="ignore"):  # signalling NaNs, Inf - Inf
        exact = v.astype(np.float64).sum(axis=2)
    rng = np.random.default_rng(1)
    orders = [np.arange(sk), np.arange(sk)[::-1], *(rng.permutation(sk) for _ in range(4))]
    with np.errstate(invalid="ignore"):  # the Inf - Inf column
        for order in orders:
            acc = np.zeros(v.shape[:2] + v.shape[3:], dtype=np.float32)
            for j in order:
                acc = (acc + v[:, :, j]).astype(np.float32)
            assert (acc[finite] == exact[finite]).all()
        pairwise = v
        while pairwise.shape[2] > 1:
            pairwise = (pairwise[:, :, 0::2] + pairwise[:, :, 1::2]).astype(np.float32)
    assert (pairwise[:, :, 0][finite] == exact[finite]).all()
    means = rounding.exact_means(v_bits)  # raises if any mean is not exact in fp32
    assert not finite.all() and (means[~finite] & 0x7F800000 == 0x7F800000).all()


@pytest.mark.parametrize("sk", SK)
def test_directed_targets_cover_ties_and_the_top_binade(sk: int) -> None:
    means = rounding.exact_means(rounding.directed_v(1, 1, sk, seed=42)[0])[0, 0]
    low = means & 0xFFFF
    for pattern in rounding.LOW_PATTERNS:
        assert (low == pattern).sum() >= 18  # 3 magnitudes x 3 mantissas x 2 signs
    top = 127 - 1 - int(np.log2(sk))
    exponents = (means >> 23) & 0xFF
    assert exponents[exponents != 0xFF].max() == top + 127  # the largest binade whose sum stays finite
    assert (means == 0x7FFFFFFF).sum() == len(rounding.NAN_PAYLOADS) + 1  # NaNs and Inf - Inf


def test_modes_differ_on_the_directed_columns() -> None:
    """Every pair of modes disagrees on some column: a swap of any two is visible bit for bit (rtne
    and rtna only on the exact ties of an even pattern: 3 magnitudes x 2 signs)."""
    means = rounding.exact_means(rounding.directed_v(1, 1, 128, seed=42)[0])
    outs = {m: rounding.rule_bits(means, m) for m in ROUNDING_MODES}  # type: ignore[arg-type]
    for a, b in itertools.combinations(ROUNDING_MODES, 2):
        assert (outs[a] != outs[b]).sum() >= 6, (a, b)


@pytest.mark.parametrize("sk", SK)
def test_bias_separates_truncation_from_nearest(sk: int) -> None:
    """The rule's own outputs land in their mode's contract band, and rtz's outside the others'."""
    contract = load_contract()
    v_bits, labels = rounding.directed_v(1, 3, sk, seed=42)
    means = rounding.exact_means(v_bits)
    for mode in ROUNDING_MODES:
        out = rounding.rule_bits(means, mode)[:, :, None, :]  # type: ignore[arg-type]
        r = rounding.check(out, v_bits, mode, labels)  # type: ignore[arg-type]
        assert r["rule_mismatches"] == 0 and r["nan_noncanonical"] == 0
        lo, hi = contract.rounding_bias_band(mode)
        assert lo <= r["bias_ulp"] <= hi, (mode, r["bias_ulp"])
        for other in ROUNDING_MODES:
            olo, ohi = contract.rounding_bias_band(other)
            if (other == "rtz") != (mode == "rtz"):
                assert not olo <= r["bias_ulp"] <= ohi, (mode, other)


def test_check_names_the_broken_columns() -> None:
    v_bits, labels = rounding.directed_v(1, 3, 128, seed=42)
    means = rounding.exact_means(v_bits)
    truncated = rounding.rule_bits(means, "rtz")[:, :, None, :]
    r = rounding.check(truncated, v_bits, "rtne", labels)
    assert r["rule_mismatches"] > 0 and r["rule_mismatches_directed"] > 0
    assert r["worst"] and "rule gives" in r["worst"][0]
    payload = truncated.copy()
    payload[0, 0, 0, labels.index("NaN 0x7fc0 in V")] = 0x7FC0
    assert rounding.check(payload, v_bits, "rtz", labels)["nan_noncanonical"] == 1


def test_column_construction_refuses_what_it_cannot_make_exact() -> None:
    rng = np.random.default_rng(0)
    with pytest.raises(ValueError, match="power of two"):
        rounding.column_for_mean(0x3F808000, 96, rng, "x")
    with pytest.raises(ValueError, match="not finite"):
        rounding.column_for_mean(0x7F000000, 4, rng, "x")  # 2^127 * 4 overflows fp32
