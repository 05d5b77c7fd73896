"""bf16 rounding and ULP measures: Python (regress.facts.numerics) against hand-computed bit patterns, an
exact big-rational rounding, and the C kernel's own rounding (ra_cpu_round_f32)."""

from __future__ import annotations

import ctypes
import math
from fractions import Fraction

import numpy as np
import pytest

from regress.facts import numerics as nm
from regress.facts.results import ROUNDING_MODES
from regress.kernel import KernelLibrary, load_library, reference
from regress.native.build import build_kernel

MODES = ROUNDING_MODES
MODE_CODE = {"rtne": 0, "rtna": 1, "rtz": 2}

# (fp32 bits, expected bf16 bits for rtne, rtna, rtz), worked out by hand from the bit recipes.
CASES: list[tuple[str, int, tuple[int, int, int]]] = [
    ("one", 0x3F800000, (0x3F80, 0x3F80, 0x3F80)),
    ("tie, even below", 0x3F808000, (0x3F80, 0x3F81, 0x3F80)),
    ("tie, odd below", 0x3F818000, (0x3F82, 0x3F82, 0x3F81)),
    ("just below half", 0x3F807FFF, (0x3F80, 0x3F80, 0x3F80)),
    ("just above half", 0x3F808001, (0x3F81, 0x3F81, 0x3F80)),
    ("negative tie", 0xBF808000, (0xBF80, 0xBF81, 0xBF80)),
    ("negative just above half", 0xBF808001, (0xBF81, 0xBF81, 0xBF80)),
    ("mantissa carry into exponent", 0x3FFFFFFF, (0x4000, 0x4000, 0x3FFF)),
    ("subnormal tie, even", 0x00008000, (0x0000, 0x0001, 0x0000)),
    ("subnormal tie, odd", 0x00018000, (0x0002, 0x0002, 0x0001)),
    ("negative subnormal tie", 0x80008000, (0x8000, 0x8001, 0x8000)),
    ("smallest fp32 subnormal", 0x00000001, (0x0000, 0x0000, 0x0000)),
    ("largest bf16 subnormal up to normal", 0x007FFFFF, (0x0080, 0x0080, 0x007F)),
    ("largest finite fp32", 0x7F7FFFFF, (0x7F80, 0x7F80, 0x7F7F)),
    ("tie at the top", 0x7F7F8000, (0x7F80, 0x7F80, 0x7F7F)),
    ("below the top tie", 0x7F7F7FFF, (0x7F7F, 0x7F7F, 0x7F7F)),
    ("negative overflow", 0xFF7FFFFF, (0xFF80, 0xFF80, 0xFF7F)),
    ("+inf", 0x7F800000, (0x7F80, 0x7F80, 0x7F80)),
    ("-inf", 0xFF800000, (0xFF80, 0xFF80, 0xFF80)),
    ("+0", 0x00000000, (0x0000, 0x0000, 0x0000)),
    ("-0", 0x80000000, (0x8000, 0x8000, 0x8000)),
    ("quiet nan", 0x7FC00000, (0x7FFF, 0x7FFF, 0x7FFF)),
    ("signalling nan", 0x7F800001, (0x7FFF, 0x7FFF, 0x7FFF)),
    ("nan with high payload", 0x7FFFFFFF, (0x7FFF, 0x7FFF, 0x7FFF)),
    ("negative nan", 0xFFC00000, (0x7FFF, 0x7FFF, 0x7FFF)),
    ("nan whose rtna would carry", 0xFFFF8000, (0x7FFF, 0x7FFF, 0x7FFF)),
]


@pytest.fixture(scope="module")
def cpu_lib() -> KernelLibrary:
    return load_library(build_kernel("cpu").path)


def c_round(lib: KernelLibrary, x: np.ndarray, mode: str) -> np.ndarray:
    x = np.ascontiguousarray(x, dtype=np.float32)
    out = np.empty(x.shape, dtype=np.uint16)
    fn = lib.raw.ra_cpu_round_f32
    fn.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
    fn.restype = None
    fn(x.ctypes.data, out.ctypes.data, x.size, MODE_CODE[mode])
    return out


@pytest.mark.parametrize(("name", "bits", "expected"), CASES, ids=[c[0] for c in CASES])
@pytest.mark.parametrize("mode", MODES)
def test_hand_picked_patterns(
    cpu_lib: KernelLibrary, name: str, bits: int, expected: tuple[int, int, int], mode: str
) -> None:
    want = expected[MODE_CODE[mode]]
    u = np.array([bits], dtype=np.uint32)
    assert int(nm.f32_bits_to_bf16(u, mode)[0]) == want, f"python {name} {mode}"
    assert int(c_round(cpu_lib, u.view(np.float32), mode)[0]) == want, f"C {name} {mode}"
    # fp32 values are exact in fp64, so the fp64 path must agree too.
    with np.errstate(invalid="ignore"):  # widening a signalling NaN warns
        wide = u.view(np.float32).astype(np.float64)
    assert int(nm.f64_to_bf16_bits(wide, mode)[0]) == want


@pytest.mark.parametrize("mode", MODES)
def test_c_hook_matches_python_on_a_million_values(cpu_lib: KernelLibrary, mode: str) -> None:
    rng = np.random.default_rng(7)
    n = 1_000_000
    bits = rng.integers(0, 2**32, size=n, dtype=np.uint64).astype(np.uint32)
    # A third are exact ties and a third sit one fp32 ULP either side of a tie.
    bits[: n // 3] = (bits[: n // 3] & 0xFFFF0000) | 0x8000
    third = bits[n // 3 : 2 * n // 3]
    bits[n // 3 : 2 * n // 3] = (third & 0xFFFF0000) | np.where(third & 1, 0x8001, 0x7FFF)
    x = bits.view(np.float32)
    assert np.array_equal(c_round(cpu_lib, x, mode), nm.f32_bits_to_bf16(bits, mode))


# --- fp64 -> bf16 against exact rational arithmetic -----------------------------------------------


def exact_bf16(x: float, mode: str) -> int:
    """Slow exact rounding of a double to bf16 bits, by Fraction arithmetic."""
    if math.isnan(x):
        return 0x7FFF
    sign = 0x8000 if math.copysign(1.0, x) < 0 else 0
    if math.isinf(x):
        return sign | 0x7F80
    a = Fraction(abs(x))
    if a == 0:
        return sign
    e = max(math.floor(math.log2(abs(x))), -126)
    # log2 of a double can be off by one near powers of two; fix it exactly.
    while e > -126 and a < Fraction(2) ** e:
        e -= 1
    while a >= Fraction(2) ** (e + 1):
        e += 1
    ulp = Fraction(2) ** (e - 7)
    n, rem = divmod(a, ulp)
    n = int(n)
    half = ulp / 2
    if mode == "rtz":
        pass
    elif rem > half or (rem == half and (mode == "rtna" or n % 2 == 1)):
        n += 1
    value = n * ulp
    top = Fraction(2) ** 128
    if value >= top:
        return sign | (0x7F7F if mode == "rtz" else 0x7F80)
    bits = int(np.array([float(value)], dtype=np.float32).view(np.uint32)[0])
    return sign | (bits >> 16)


def trap_values(rng: np.random.Generator, n: int) -> np.ndarray:
    """Values a hair above or below a bf16 tie: rounding to fp32 to nearest lands on the tie."""
    hi = rng.integers(0x0080, 0x7F7F, size=n).astype(np.uint32)
    tie = ((hi << 16) | 0x8000).view(np.float32).astype(np.float64)
    fp32_ulp = np.ldexp(1.0, np.frexp(tie)[1] - 24)
    offset = fp32_ulp * rng.uniform(0.01, 0.49, size=n) * rng.choice([-1.0, 1.0], size=n)
    sign = rng.choice([-1.0, 1.0], size=n)
    return sign * (tie + offset)


@pytest.mark.parametrize("mode", MODES)
def test_fp64_rounding_matches_exact_rationals(mode: str) -> None:
    rng = np.random.default_rng(11)
    random = rng.standard_normal(3000) * np.ldexp(1.0, rng.integers(-140, 128, size=3000))
    specials = np.array(
        [0.0, -0.0, np.inf, -np.inf, np.nan, 1e-50, -1e-50, 3.5e38, -3.5e38, 2.0**-133, 2.0**-134,
         3 * 2.0**-135, (2 - 2**-8) * 2.0**127, (2 - 2**-9) * 2.0**127, 1e300]
    )  # fmt: skip
    traps = trap_values(rng, 3000)
    values = np.concatenate([random, specials, traps])
    got = nm.f64_to_bf16_bits(values, mode)
    want = np.array([exact_bf16(float(v), mode) for v in values], dtype=np.uint16)
    bad = np.flatnonzero(got != want)
    assert bad.size == 0, [(values[i], hex(got[i]), hex(want[i])) for i in bad[:5]]


def test_naive_double_rounding_fails_on_the_traps() -> None:
    """The traps are real: fp64 -> fp32 (nearest) -> bf16 (nearest) gets some of them wrong."""
    values = trap_values(np.random.default_rng(3), 2000)
    naive = nm.f32_to_bf16_bits(values.astype(np.float32), "rtne")
    exact = np.array([exact_bf16(float(v), "rtne") for v in values], dtype=np.uint16)
    assert np.count_nonzero(naive != exact) > 100
    assert np.array_equal(nm.f64_to_bf16_bits(values, "rtne"), exact)


def test_reference_bits_canonical_nan() -> None:
    ref = np.array([np.nan, -np.nan, 1.0, np.inf])
    for mode in MODES:
        assert nm.reference_bits(ref, mode).tolist() == [0x7FFF, 0x7FFF, 0x3F80, 0x7F80]
    assert nm.canonicalize_nan(np.array([0xFFC0, 0x7F81, 0x7F80, 0x0001], np.uint16)).tolist() == [
        0x7FFF, 0x7FFF, 0x7F80, 0x0001
    ]  # fmt: skip


# --- ULP measures ---------------------------------------------------------------------------------


def all_finite_bf16() -> np.ndarray:
    b = np.arange(1 << 16, dtype=np.uint32).astype(np.uint16)
    return b[(b & 0x7F80) != 0x7F80]


def test_ordered_is_monotone_in_value() -> None:
    b = all_finite_bf16()
    vals = nm.bf16_bits_to_f64(b)
    order = np.argsort(vals, kind="stable")
    ords = nm.ordered(b[order])
    assert np.all(np.diff(ords) >= 0)
    # Equal ordered integers only for +0 and -0.
    assert np.count_nonzero(np.diff(ords) == 0) == 1
    assert nm.ordered(np.array([0x0000, 0x8000], np.uint16)).tolist() == [0, 0]


def test_ulp_distance_properties() -> None:
    rng = np.random.default_rng(5)
    fin = all_finite_bf16()
    a, b, c = (rng.choice(fin, 20000) for _ in range(3))
    assert np.array_equal(nm.ulp_distance(a, b), nm.ulp_distance(b, a))
    assert np.all(nm.ulp_distance(a, a) == 0)
    assert np.all(nm.ulp_distance(a, c) <= nm.ulp_distance(a, b) + nm.ulp_distance(b, c))
    # Along the number line distances add up exactly.
    lo, mid, hi = np.sort(np.stack([nm.ordered(x) for x in (a, b, c)]), axis=0)
    assert np.all((mid - lo) + (hi - mid) == hi - lo)
    assert nm.ulp_distance(np.array([0x0000], np.uint16), np.array([0x8000], np.uint16))[0] == 0
    assert nm.ulp_distance(np.array([0x0001], np.uint16), np.array([0x8001], np.uint16))[0] == 2
    assert nm.ulp_distance(np.array([0x3F80], np.uint16), np.array([0x3F81], np.uint16))[0] == 1
    assert nm.ulp_distance(np.array([0x3F7F], np.uint16), np.array([0x3F80], np.uint16))[0] == 1


def test_ulp_bf16() -> None:
    x = np.array([1.0, 1.5, 1.999, 2.0, -3.0, 0.0, 2.0**-126, 2.0**-130, 1e-45, 3.0e38])
    want = [2.0**-7, 2.0**-7, 2.0**-7, 2.0**-6, 2.0**-6, 2.0**-133, 2.0**-133, 2.0**-133, 2.0**-133, 2.0**120]
    assert nm.ulp_bf16(x).tolist() == want


def test_scaled_ulp_and_histogram() -> None:
    ref = np.array([1.0, 1.0, 0.001, np.nan, np.inf, np.inf, 1.0])
    mag = np.array([1.0, 4.0, 2.0, 1.0, 1.0, 1.0, 1.0])
    o = nm.f64_to_bf16_bits(np.array([1.0078125, 1.0078125, 0.0, np.nan, np.inf, -np.inf, np.nan]), "rtne")
    su = nm.scaled_ulp(o, ref, mag)
    assert su[0] == 1.0  # one ulp at 1
    assert su[1] == 0.25  # the same error against a magnitude of 4
    assert su[2] == pytest.approx(0.001 / 2.0**-6)
    assert su[3] == 0.0 and su[4] == 0.0  # same non-finite class
    assert su[5] == np.inf and su[6] == np.inf  # wrong sign of Inf, NaN where finite was due
    assert nm.ulp_histogram(np.array([0, 0, 1, 2, 3, 4, 100])) == {"0": 2, "1": 1, "2": 1, "3": 1, ">3": 2}


def test_reference_attention_matches_direct_fp64() -> None:
    import torch

    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(1, 5, 2, 128, generator=g).bfloat16() for _ in range(3))
    ref, mag = reference.reference_attention(q, k, v, layout="bshd", scale=0.1)
    qd, kd, vd = (t.transpose(1, 2).double() for t in (q, k, v))
    p = torch.softmax(qd @ kd.transpose(-1, -2) * 0.1, dim=-1)
    assert np.allclose(ref, (p @ vd).numpy(), rtol=1e-12, atol=1e-14)
    assert np.allclose(mag, (p @ vd.abs()).numpy(), rtol=1e-12, atol=1e-14)


def test_reference_attention_ieee_rules() -> None:
    import torch

    q = torch.ones(1, 2, 1, 128).bfloat16()
    k = torch.ones(1, 3, 1, 128).bfloat16()
    v = torch.ones(1, 3, 1, 128).bfloat16()
    q[0, 0, 0, 0] = float("inf")
    k[0, :, 0, 0] = -1.0  # row 0: every score is -inf
    v[0, 1, 0, 5] = float("inf")
    ref, _ = reference.reference_attention(q, k, v, layout="bshd")
    assert np.isnan(ref[0, 0, 0]).all()  # all -inf row -> NaN, no shortcut
    assert np.isinf(ref[0, 0, 1, 5]) and np.isfinite(np.delete(ref[0, 0, 1], 5)).all()


def test_scaled_ulp_with_a_precomputed_denominator_is_the_same() -> None:
    rng = np.random.default_rng(3)
    ref = rng.standard_normal((2, 3, 17, 8))
    ref[0, 0, 0, 0], ref[0, 0, 0, 1] = np.inf, np.nan
    mag = np.abs(ref) + 0.25
    o = nm.f64_to_bf16_bits(ref * 1.01, "rtne")
    assert np.array_equal(nm.scaled_ulp(o, ref, mag), nm.scaled_ulp(o, ref, mag, nm.magnitude_ulp(mag)))


def test_rtna_is_rtne_of_the_tie_nudged_value() -> None:
    """The CUDA epilogue's rtna (epilogue.cuh): round-to-nearest-even of x with its low byte replaced by
    bit 15 replicated (one prmt), so one cvt.rn instruction serves two values. From a tie up the
    nudged value lies above the tie, below it stays below, and Inf keeps its zero mantissa. The one
    exception is a NaN whose payload sits only in the low 8 bits (it would become Inf): the epilogue
    rounds a product, and the GPU's arithmetic NaN is the canonical 0x7FFFFFFF. Proven for all 2^32
    patterns once (4 min); here every high half with the low halves where rounding turns, and a
    million random patterns."""
    hi = np.arange(1 << 16, dtype=np.uint64) << 16
    lows = np.array([0, 1, 0xFF, 0x100, 0x7FFE, 0x7FFF, 0x8000, 0x8001, 0xFFFE, 0xFFFF], dtype=np.uint64)
    edge = (hi[:, None] | lows[None, :]).ravel()
    rand = np.random.default_rng(15).integers(0, 1 << 32, size=1 << 20, dtype=np.uint64)
    u = np.concatenate([edge, rand, np.array([0x7FFFFFFF, 0xFFFFFFFF], dtype=np.uint64)]).astype(np.uint32)
    nudged = (u & 0xFFFFFF00) | np.where(u & 0x8000, 0xFF, 0).astype(np.uint32)
    low_payload_nan = ((u & 0x7FFFFFFF) > 0x7F800000) & ((u & 0x007FFF00) == 0)
    got, want = nm.f32_bits_to_bf16(nudged, "rtne"), nm.f32_bits_to_bf16(u, "rtna")
    assert np.array_equal(got[~low_payload_nan], want[~low_payload_nan])
    assert low_payload_nan.any() and not np.array_equal(got, want)  # the exception is real, and excluded
