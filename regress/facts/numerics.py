"""Exact bf16 numerics in numpy: rounding and ULP measures (the fp64 attention reference, which
needs torch, is regress/kernel/reference.py).

Pure functions, no I/O, no torch. docs/numerics.md is the contract these implement; kernel/common/bf16.h is
the same contract in C. Bit patterns are numpy uint16 (bf16) or uint32 (fp32) arrays.
"""

from __future__ import annotations

import numpy as np

from .results import Rounding

# The result type's name for a rounding mode, as the numerics call it.
Mode = Rounding

CANONICAL_NAN = 0x7FFF
BF16_MANTISSA_BITS = 7
BF16_MIN_NORMAL_EXP = -126


# --- rounding -------------------------------------------------------------------------------------


def f32_bits_to_bf16(bits: np.ndarray, mode: Mode) -> np.ndarray:
    """fp32 bit patterns -> bf16 bit patterns, the same recipes as kernel/common/bf16.h."""
    u = np.asarray(bits, dtype=np.uint32).astype(np.uint64)
    if mode == "rtne":
        r = (u + 0x7FFF + ((u >> 16) & 1)) >> 16
    elif mode == "rtna":
        r = (u + 0x8000) >> 16
    elif mode == "rtz":
        r = u >> 16
    else:
        raise ValueError(f"rounding mode {mode!r} is not rtne, rtna or rtz")
    nan = (u & 0x7FFFFFFF) > 0x7F800000
    return np.where(nan, CANONICAL_NAN, r & 0xFFFF).astype(np.uint16)


def f32_to_bf16_bits(x: np.ndarray, mode: Mode) -> np.ndarray:
    """fp32 values -> bf16 bit patterns rounded by `mode`."""
    return f32_bits_to_bf16(np.ascontiguousarray(x, dtype=np.float32).view(np.uint32), mode)


def f64_to_f32_round_to_odd(x: np.ndarray) -> np.ndarray:
    """fp64 -> fp32 bit patterns, rounded to odd: truncate toward zero, then set the last bit if the
    conversion was inexact. NaN comes back as an fp32 NaN."""
    x = np.asarray(x, dtype=np.float64)
    with np.errstate(over="ignore", invalid="ignore"):
        t = x.astype(np.float32)
        # astype rounds to nearest; step back toward zero where it went past x.
        over = np.abs(t.astype(np.float64)) > np.abs(x)
        t = np.where(over, np.nextafter(t, np.float32(0)), t)
        inexact = (t.astype(np.float64) != x) & ~np.isnan(x)
    bits: np.ndarray = np.ascontiguousarray(t).view(np.uint32) | inexact.astype(np.uint32)
    return bits


def f64_to_bf16_bits(x: np.ndarray, mode: Mode) -> np.ndarray:
    """Exact single rounding of fp64 values to bf16 by `mode`; every NaN becomes 0x7FFF.

    Why round-to-odd first: rounding fp64 -> fp32 to nearest and then fp32 -> bf16 to nearest can
    round twice (a value just above a bf16 tie is first rounded onto the tie, then the tie goes to
    even: the wrong way). Round-to-odd keeps "inexact" in fp32's last bit, a sticky bit 16 places
    below bf16's last bit, so the second rounding sees exactly whether the value was below, on or
    above the tie; with at least two extra bits this makes the pair equal to one direct rounding.
    """
    return f32_bits_to_bf16(f64_to_f32_round_to_odd(x), mode)


def reference_bits(ref: np.ndarray, mode: Mode) -> np.ndarray:
    """The fp64 reference rounded once to bf16 by `mode` (NaN canonical)."""
    return f64_to_bf16_bits(np.asarray(ref, dtype=np.float64), mode)


def bf16_bits_to_f64(bits: np.ndarray) -> np.ndarray:
    """bf16 bit patterns -> fp64 values (exact)."""
    u = np.asarray(bits, dtype=np.uint16).astype(np.uint32) << 16
    return np.ascontiguousarray(u).view(np.float32).astype(np.float64)


def canonicalize_nan(bits: np.ndarray) -> np.ndarray:
    """Every bf16 NaN pattern -> 0x7FFF; other patterns unchanged."""
    b = np.asarray(bits, dtype=np.uint16)
    return np.where((b & 0x7FFF) > 0x7F80, np.uint16(CANONICAL_NAN), b).astype(np.uint16)


def is_nonfinite_bits(bits: np.ndarray) -> np.ndarray:
    nonfinite: np.ndarray = (np.asarray(bits, dtype=np.uint16) & 0x7F80) == 0x7F80
    return nonfinite


# --- ULP measures ---------------------------------------------------------------------------------


def ordered(bits: np.ndarray) -> np.ndarray:
    """Ordered integer of bf16 patterns: monotone in the value, +0 and -0 both 0 (int32)."""
    b = np.asarray(bits, dtype=np.uint16).astype(np.int32)
    mag = b & 0x7FFF
    return np.where(b & 0x8000, -mag, mag)


def ulp_distance(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Plain ULP distance |ordered(a) - ordered(b)| of finite bf16 patterns (int64)."""
    return np.abs(ordered(a).astype(np.int64) - ordered(b).astype(np.int64))


def ulp_bf16(x: np.ndarray) -> np.ndarray:
    """2^(floor(log2|x|) - 7): the bf16 ULP at |x|, clamped at the smallest normal (so 0 and
    subnormals get the subnormal spacing 2^-133)."""
    x = np.abs(np.asarray(x, dtype=np.float64))
    _, e = np.frexp(x)  # x = m * 2^e with m in [0.5, 1), so floor(log2 x) = e - 1
    exp = np.where(x == 0, BF16_MIN_NORMAL_EXP, np.maximum(e.astype(np.int64) - 1, BF16_MIN_NORMAL_EXP))
    ulp = np.ldexp(1.0, (exp - BF16_MANTISSA_BITS).astype(np.int32))
    return np.where(np.isfinite(x), ulp, x)  # Inf -> Inf, NaN -> NaN


def magnitude_ulp(mag: np.ndarray) -> np.ndarray:
    """The scaled-ULP denominator ulp_bf16(P·|V|), non-finite magnitudes as 0: it depends on the
    reference only, so callers comparing several outputs with one reference compute it once."""
    mag = np.asarray(mag, dtype=np.float64)
    return ulp_bf16(np.where(np.isfinite(mag), mag, 0.0))


def scaled_ulp(
    o_bits: np.ndarray, ref: np.ndarray, mag: np.ndarray, mag_ulp: np.ndarray | None = None
) -> np.ndarray:
    """|o - ref| / ulp_bf16(mag): the error in units of the magnitude of the summed terms P·|V|.

    Non-finite positions: 0 where o and ref are both NaN or the same infinity, inf where only one is
    non-finite or they differ, so max() over the result is a complete gate. `mag_ulp` is
    magnitude_ulp(mag) when the caller has it already.
    """
    o = bf16_bits_to_f64(o_bits)
    ref = np.asarray(ref, dtype=np.float64)
    denom = magnitude_ulp(mag) if mag_ulp is None else mag_ulp
    finite = np.isfinite(o) & np.isfinite(ref)
    with np.errstate(invalid="ignore", over="ignore"):
        err = np.where(finite, np.abs(o - ref) / denom, 0.0)
    same_nonfinite = (np.isnan(o) & np.isnan(ref)) | (np.isinf(o) & (o == ref))
    return np.where(finite, err, np.where(same_nonfinite, 0.0, np.inf))


def ulp_histogram(dist: np.ndarray) -> dict[str, int]:
    """Counts of plain ULP distances in the buckets 0, 1, 2, 3, >3."""
    d = np.asarray(dist).ravel()
    out = {str(i): int(np.count_nonzero(d == i)) for i in range(4)}
    out[">3"] = int(np.count_nonzero(d > 3))
    return out
