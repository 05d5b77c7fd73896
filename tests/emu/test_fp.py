"""The fp32 / bf16 models in regress.emu.fp on hand-computed values."""

from __future__ import annotations

from fractions import Fraction

import numpy as np
import pytest

from regress.emu import fp


def f32(*x: float) -> np.ndarray:
    return np.asarray(x, dtype=np.float32)


def test_fma_is_single_rounding():
    # (1 + 2^-23)(1 - 2^-23) = 1 - 2^-46 exactly; minus 1 -> -2^-46. A separate multiply would
    # round the product to 1 and give 0.
    a, b, c = f32(1 + 2**-23), f32(1 - 2**-23), f32(-1.0)
    assert fp.fma_f32(a, b, c)[0] == np.float32(-(2.0**-46))
    assert (a * b + c)[0] == 0.0


def test_fma_double_rounding_case_is_correct():
    """A sum whose fp64 rounding lands exactly on an fp32 tie: round-to-odd keeps it correct."""
    rng = np.random.default_rng(7)
    a = rng.standard_normal(20000).astype(np.float32)
    b = rng.standard_normal(20000).astype(np.float32)
    c = (rng.standard_normal(20000) * 1e-3).astype(np.float32)
    got = fp.fma_f32(a, b, c)
    for i in range(0, 20000, 997):
        exact = Fraction(float(a[i])) * Fraction(float(b[i])) + Fraction(float(c[i]))
        # The correctly rounded fp32: compare against both neighbours of the result.
        r = got[i]
        lo, hi = np.nextafter(r, np.float32(-np.inf)), np.nextafter(r, np.float32(np.inf))
        err = abs(Fraction(float(r)) - exact)
        assert err <= abs(Fraction(float(lo)) - exact) and err <= abs(Fraction(float(hi)) - exact)
    assert np.isnan(fp.fma_f32(f32(np.inf), f32(0.0), f32(1.0)))[0]
    assert fp.fma_f32(f32(np.inf), f32(2.0), f32(1.0))[0] == np.inf


def test_exp2_values_and_flushes():
    x = f32(0.0, 1.0, -1.0, 10.0, -np.inf, np.inf, -126.0, -127.0, -149.0, 128.0, 0.5)
    r = fp.exp2_f32(x)
    assert r[:4].tolist() == [1.0, 2.0, 0.5, 1024.0]
    assert r[4] == 0.0 and r[5] == np.inf
    assert r[6] == np.float32(2.0**-126)  # smallest normal survives
    assert r[7] == 0.0 and r[8] == 0.0  # denormal results flush to +0
    assert r[9] == np.inf  # overflow
    assert r[10] == np.float32(2**0.5)
    assert np.isnan(fp.exp2_f32(f32(np.nan)))[0]
    assert fp.exp2_f32(f32(1e-40))[0] == 1.0  # denormal input read as 0


def test_rcp_values():
    r = fp.rcp_f32(f32(2.0, 4.0, 3.0, 0.0, -0.0, np.inf, 1e-40, 2.0**126))
    assert r[0] == 0.5 and r[1] == 0.25
    assert r[2] == np.float32(1 / 3)
    assert r[3] == np.inf and r[4] == -np.inf
    assert r[5] == 0.0
    assert r[6] == np.inf  # denormal input is 0
    assert r[7] == np.float32(2.0**-126)  # the smallest normal result survives
    assert fp.rcp_f32(f32(2.0**127))[0] == 0.0  # 2^-127 is denormal -> flushed


@pytest.mark.parametrize("mode", ["rtne", "rtna", "rtz"])
def test_bf16_to_f32_is_exact(mode):
    bits = np.arange(0, 65536, 7, dtype=np.uint32)
    f = fp.bf16_to_f32(bits)
    back = (f.view(np.uint32) >> 16).astype(np.uint32)
    assert (back == bits).all()


def test_mfma_sums_exactly_then_rounds_once():
    """A row 0 = (2^24, 1, -2^24, 0, ...) against a column of ones: the exact sum is 1. Summed in fp32
    in k order (or pairwise) the 1 is lost at 2^24 (2^24 + 1 ties to 2^24) and the result is 0, so
    the model's stated order (exact in fp64, then one rounding) is what this checks."""
    big, one, neg_big = 0x4B80, 0x3F80, 0xCB80  # bf16 bits of 2^24, 1, -2^24
    a = np.zeros((64, 2), np.uint32)
    b = np.zeros((64, 2), np.uint32)
    # lane 0 holds A[0][0..3] (register e // 2, half e % 2) and B[0..3][0]
    a[0] = [big | one << 16, neg_big]
    b[0] = [one | one << 16, one | one << 16]
    c = np.zeros((64, 4), np.float32)
    terms = [np.float32(2.0**24), np.float32(1.0), np.float32(-(2.0**24))]
    sequential = np.float32(0.0)
    for t in terms:
        sequential = np.float32(sequential + t)
    assert sequential == 0.0  # the order this test must tell apart
    d = fp.mfma_f32_16x16x16_bf16(a, b, c)
    assert d[0, 0] == 1.0
    assert (d[1:, 0] == 0.0).all() and (d[:, 1:] == 0.0).all()
