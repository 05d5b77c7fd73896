"""Directed rounding cases: outputs known in closed form, checked bit for bit against each mode's rule.

Q = 0 makes every score 0, so P is uniform (every p = exp(0) = 1, l = Sk) and O[i, d] is the mean
of V[:, d] for every query row. V is built so that this mean is exact in fp32 whatever order a
kernel sums in: every term is a multiple of the smallest term's last bit and the same-signed total
stays below 2^24 of those, so every partial sum is exact; Sk is a power of two, so O / l (or
O · (1/l)) is exact too. The output rounding fp32 → bf16 is then the only rounding left, and each
mode's rule gives the output bits directly (`rule_bits`, written apart from kernel/common/bf16.h's
add-and-shift recipes and regress.facts.numerics' copy of them):
  rtne  nearest, a tie to the even pattern;  rtna  nearest, a tie away from zero;  rtz  truncate.

Head 0 holds the directed targets, one per column (`directed_targets`): fp32 means on a bf16 tie,
one fp32 ULP and far above and below it, and exact, for an even, an odd and an all-ones bf16
mantissa (the carry into the exponent), both signs, at 1, 2^-100 and the largest binade whose
Sk-term sum is still finite in fp32; then NaN payloads (every NaN must come out as 0x7FFF), ±Inf,
Inf - Inf, exact cancellation, and random fp32 targets. The bf16-to-Inf overflow itself cannot be
reached this way (the fp32 sum overflows first: Sk · t > FLT_MAX for any t above bf16's largest
finite); tests/kernel/test_numerics.py covers it on the kernels' own rounding.
Heads 1… hold random bf16 rows whose means are exact (`random_exact_column`): the bias statistic
`bias_ulp`, the mean of (|out| - |exact|) in bf16 ULPs of the exact value, is -0.5 for rtz and 0
for rtne and rtna, which separates the modes by a margin no ULP limit has.

Pure numpy, no I/O.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from regress.facts.cases import HEAD_DIM
from regress.facts.numerics import CANONICAL_NAN, Mode, bf16_bits_to_f64, ulp_bf16

INPUT = "rounding"
# Shapes of the directed cases: (B, H, Sq, Sk); head 0 directed, heads 1-2 random (256 means for
# the bias). 128 keys are two 64-key tiles (the online softmax rescales by exp(0) = 1 between
# them); 4 keys are one partial tile and reach the binade 2^124. Tiny, so hip-emu stays quick.
SHAPES: tuple[tuple[int, int, int, int], ...] = ((1, 3, 4, 128), (1, 3, 4, 4))

F32_MAX_EXP = 127
LOW_PATTERNS = (0x0000, 0x0001, 0x7FFF, 0x8000, 0x8001, 0xFFFF)  # the 16 bits bf16 drops
MANTISSAS = (0x00, 0x01, 0x7F)  # bf16's 7 stored bits: even, odd, all ones (a round-up carries)
NAN_PAYLOADS = (0x7FC0, 0x7F81, 0xFFC1, 0x7FFF, 0xFFFF)  # bf16 NaNs: quiet, signalling, negative


@dataclass(frozen=True)
class Column:
    """One output column: what it checks, and the V values its mean comes from."""

    label: str
    v_bits: np.ndarray  # [Sk] bf16 patterns


def _bf16(x: float) -> int:
    """The bf16 pattern of x, which must be exactly representable (construction is exact)."""
    u = int(np.array([x], dtype=np.float32).view(np.uint32)[0])
    if (u & 0xFFFF) or float(np.float32(x)) != x:
        raise ValueError(f"{x!r} is not a bf16 value")
    return u >> 16


def _f32_value(bits: int) -> float:
    return float(np.array([bits], dtype=np.uint32).view(np.float32)[0])


def column_for_mean(bits: int, sk: int, rng: np.random.Generator, label: str) -> Column:
    """Sk bf16 values whose fp32 mean is exactly the fp32 pattern `bits` (finite, normal).

    t = hi + mid + lo, the 24-bit significand cut into three 8-bit pieces (each a bf16 value);
    then Sk/2 rows hold 2·hi, one row Sk·mid, one row Sk·lo, the rest 0, shuffled. The sum is
    Sk·t, all terms share t's sign and the smallest one's last bit is t's last bit times Sk, so
    every partial sum is exact in fp32."""
    if sk < 4 or sk & (sk - 1):
        raise ValueError(f"Sk must be a power of two >= 4, got {sk}")
    t = _f32_value(bits)
    if not math.isfinite(t) or abs(t) * sk >= float(np.finfo(np.float32).max):
        raise ValueError(f"mean {bits:#010x} times {sk} is not finite in fp32")
    sign = -1.0 if bits & 0x80000000 else 1.0
    exp = ((bits >> 23) & 0xFF) - 127
    sig = (bits & 0x7FFFFF) | 0x800000
    hi = sign * math.ldexp(sig >> 16, exp - 7)
    mid = sign * math.ldexp((sig >> 8) & 0xFF, exp - 15)
    lo = sign * math.ldexp(sig & 0xFF, exp - 23)
    rows = [2 * hi] * (sk // 2) + [sk * mid, sk * lo] + [0.0] * (sk // 2 - 2)
    v = np.array([_bf16(x) for x in rows], dtype=np.uint16)
    rng.shuffle(v)
    exact = bf16_bits_to_f64(v).sum() / sk
    assert exact == t, (label, exact, t)  # the construction, checked in fp64 (exact here)
    return Column(label, v)


def random_exact_column(sk: int, rng: np.random.Generator) -> Column:
    """Random bf16 rows (both signs, exponents spread over 9 binades) whose mean is exact in fp32:
    every value is a multiple of 2^(e-15) below 2^(e+1), so Sk <= 128 terms sum exactly."""
    e = int(rng.integers(-8, 9))
    mant = rng.integers(128, 256, size=sk)
    shift = rng.integers(0, 9, size=sk)
    sign = np.where(rng.random(sk) < 0.5, -1.0, 1.0)
    vals = sign * np.ldexp(mant.astype(np.float64), (e - 7 - shift).astype(np.int32))
    v = (vals.astype(np.float32).view(np.uint32) >> 16).astype(np.uint16)
    mean = bf16_bits_to_f64(v).sum() / sk
    assert float(np.float32(mean)) == mean, "the random column's mean is not exact in fp32"
    return Column("random", v)


def _special(label: str, values: list[int], sk: int) -> Column:
    v = np.zeros(sk, dtype=np.uint16)
    v[: len(values)] = values
    return Column(label, v)


def directed_targets(sk: int, rng: np.random.Generator) -> list[Column]:
    """The HEAD_DIM columns of head 0 (see the module docstring)."""
    top = F32_MAX_EXP - 1 - int(math.log2(sk))  # largest binade whose Sk-term sum stays finite
    cols: list[Column] = []
    for exp in (0, -100, top):
        for mant in MANTISSAS:
            for low in LOW_PATTERNS:
                for sign in (0, 1):
                    bits = (sign << 31) | ((exp + 127) << 23) | (mant << 16) | low
                    label = f"{'-' if sign else '+'}2^{exp} m{mant:#04x} low{low:#06x}"
                    cols.append(column_for_mean(bits, sk, rng, label))
    one = 0x3F80
    for payload in NAN_PAYLOADS:
        cols.append(_special(f"NaN {payload:#06x} in V", [one, payload], sk))
    cols.append(_special("+Inf in V", [one, 0x7F80], sk))
    cols.append(_special("-Inf in V", [one, 0xFF80], sk))
    cols.append(_special("+Inf and -Inf in V", [0x7F80, 0xFF80], sk))
    cols.append(_special("exact cancellation", [0x4049, 0xC049], sk))
    cols.append(_special("all zero", [], sk))
    while len(cols) < HEAD_DIM:  # random fp32 means, 24 random significand bits each
        bits = int(rng.integers(0, 2**23)) | (int(rng.integers(107, 148)) << 23)
        bits |= int(rng.integers(0, 2)) << 31
        cols.append(column_for_mean(bits, sk, rng, f"random target {bits:#010x}"))
    return cols[:HEAD_DIM]


def directed_v(b: int, h: int, sk: int, seed: int) -> tuple[np.ndarray, list[str]]:
    """V as bf16 patterns [B, H, Sk, D] and the label of each column of head 0 (per batch)."""
    rng = np.random.default_rng(seed)
    v = np.zeros((b, h, sk, HEAD_DIM), dtype=np.uint16)
    labels: list[str] = []
    for bi in range(b):
        cols = directed_targets(sk, rng)
        labels = [c.label for c in cols]
        v[bi, 0] = np.stack([c.v_bits for c in cols], axis=1)
        for hi in range(1, h):
            v[bi, hi] = np.stack([random_exact_column(sk, rng).v_bits for _ in range(HEAD_DIM)], axis=1)
    return v, labels


def rule_bits(f32_bits: np.ndarray, mode: Mode) -> np.ndarray:
    """Each mode's rule on fp32 patterns, stated as the rule (kept bits, dropped bits against the
    half), not as bf16.h's carry trick; every NaN gives the canonical 0x7FFF."""
    u = np.asarray(f32_bits, dtype=np.uint64)
    sign = u & 0x80000000
    mag = u & 0x7FFFFFFF
    kept, dropped = mag >> 16, mag & 0xFFFF
    if mode == "rtz":
        up = np.zeros_like(kept, dtype=bool)
    elif mode == "rtna":
        up = dropped >= 0x8000
    elif mode == "rtne":
        up = (dropped > 0x8000) | ((dropped == 0x8000) & ((kept & 1) == 1))
    else:
        raise ValueError(f"rounding mode {mode!r} is not rtne, rtna or rtz")
    out = ((sign >> 16) | (kept + up)).astype(np.uint16)  # a carry out of the mantissa bumps the exponent
    return np.where(mag > 0x7F800000, np.uint16(CANONICAL_NAN), out).astype(np.uint16)


def exact_means(v_bits: np.ndarray) -> np.ndarray:
    """[B, H, Sk, D] bf16 V -> [B, H, D] fp32 patterns of the exact column means (NaN canonical).

    Summed in fp64, exact for these columns (checked: the fp32 value must equal the fp64 one)."""
    with np.errstate(invalid="ignore"):  # signalling NaN payloads and Inf - Inf
        v = bf16_bits_to_f64(v_bits)
        mean = v.sum(axis=2) / v.shape[2]
    f32 = mean.astype(np.float32)
    finite = np.isfinite(mean)
    if not (f32[finite].astype(np.float64) == mean[finite]).all():
        raise ValueError("a directed column's mean is not exact in fp32")
    bits: np.ndarray = f32.view(np.uint32).copy()
    bits[np.isnan(mean)] = 0x7FFFFFFF
    bits[mean == 0] = 0  # exact cancellation gives +0 under round-to-nearest accumulation
    return bits


def bias_ulp(out_bits: np.ndarray, exact: np.ndarray) -> float:
    """Mean of (|out| - |exact|) / ulp_bf16(exact) over finite non-zero exact values."""
    use = np.isfinite(exact) & (exact != 0)
    if not use.any():
        return 0.0
    out = np.abs(bf16_bits_to_f64(out_bits[use]))
    ex = np.abs(exact[use])
    return float(((out - ex) / ulp_bf16(ex)).mean())


def check(o_bits: np.ndarray, v_bits: np.ndarray, mode: Mode, labels: list[str]) -> dict[str, Any]:
    """The directed case's measures: o_bits [B, H, Sq, D] kernel output, v_bits [B, H, Sk, D].

    rule_mismatches: outputs whose bits differ from the mode's rule on the exact mean (head 0 and
    the random heads alike); nan_noncanonical: NaN outputs other than 0x7FFF; bias_ulp over heads 1…
    (the random exact means); the first few mismatching directed columns named in `worst`."""
    means = exact_means(v_bits)  # [B, H, D]
    want = rule_bits(means, mode)[:, :, None, :]
    o = np.asarray(o_bits, dtype=np.uint16)
    bad = o != np.broadcast_to(want, o.shape)
    nan = (o & 0x7FFF) > 0x7F80
    exact = means.view(np.float32).astype(np.float64)
    rand = np.broadcast_to(exact[:, 1:, None, :], o[:, 1:].shape)
    worst = []
    for d in np.flatnonzero(bad[:, 0].any(axis=(0, 1)))[:3].tolist():
        i = np.argwhere(bad[:, 0, :, d])[0]
        got, exp_ = int(o[i[0], 0, i[1], d]), int(want[i[0], 0, 0, d])
        worst.append(f"{labels[d]}: {got:#06x}, rule gives {exp_:#06x}")
    return {
        "rule_checked": int(o.size),
        "rule_mismatches": int(bad.sum()),
        "rule_mismatches_directed": int(bad[:, 0].sum()),
        "nan_noncanonical": int((nan & (o != CANONICAL_NAN)).sum()),
        "bias_ulp": bias_ulp(o[:, 1:], rand),
        "worst": worst,
    }
